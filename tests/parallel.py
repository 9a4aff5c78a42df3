"""How the suite runs on several pytest-xdist workers at once (CI: ``-n 2``).

Most of the suite waits on real processes (sshd hosts, torchrun, Slurm, Ray), so two
workers on two cores finish in a little over half the time. What keeps them apart:

- ``pytest -n 2`` is all it takes: ``-n`` alone picks the scheduling below (loadgroup,
  collection order kept).
- A whole test module is one unit of work (its module-scoped cluster is started once, its
  tests keep their order). Modules that share something machine-wide form one unit
  together (``SHARED``): the Slurm clusters (fixed node addresses 127.0.0.4x, one session
  cluster); and ``heavy``: the slow-rank jobs that keep both cores busy, the tests that
  judge speed, and Ray's (its raylet must register within a hard-coded 30 s; /tmp/ray).
- Units start heaviest first (longest-processing-time order), by the seconds each module
  took in a recorded run (``module_seconds.json``); a module not in it counts as 0 s and
  runs last, in collection order. Record a new file with
  ``DISTCONSOLE_RECORD_SECONDS=tests/module_seconds.json pytest -n 2``.
- ``PINNED`` units run on worker gw0 only: the quick start's pip install begins on gw0 as
  soon as collection ends (``start_early`` in tests/conftest.py) and must be waited for in
  the same process.

Everything else the workers share is already safe to share: test users are claimed with
a lock per user (sshd_cluster.py), ports are asked from the kernel, temporary folders are
per worker, cgroups and network namespaces carry the worker's pid.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

SECONDS_FILE = Path(__file__).parent / "module_seconds.json"
RECORD_VAR = "DISTCONSOLE_RECORD_SECONDS"

SHARED: dict[str, tuple[str, ...]] = {
    "slurm": (
        "tests/integration/test_slurm_jobs.py",
        "tests/integration/test_slurm_srun_sampling.py",
        "tests/integration/test_slurm_gpu_screen.py",
        "tests/integration/test_restarts_slurm.py",
        "tests/integration/test_private_slurm.py",
        "tests/ui/test_slurm_only_nodes.py",
        "tests/unit/test_slurm_state.py",
    ),
    # One unit, never beside each other: the slow-rank jobs keep both cores busy for
    # minutes; the slow-rank and validate tests judge speed (two at once are each the
    # other's noise); and Ray's `ray start` gives its raylet a hard-coded 30 s to
    # register, which it missed beside the slow-rank jobs. Ray's modules also share
    # /tmp/ray.
    "heavy": (
        "tests/integration/test_slow_ranks.py",
        "tests/integration/test_slow_ranks_ps.py",
        "tests/integration/test_exclude_slow.py",
        "tests/integration/test_validate_hosts.py",
        "tests/integration/test_validate_slow_link.py",
        "tests/integration/test_ray.py",
        "tests/integration/test_ray_hang.py",
        "tests/integration/test_preflight_ports.py",
        "tests/unit/test_plan_ray.py",
    ),
}
PINNED = {"tests/integration/test_demo_quickstart.py": "gw0"}
_GROUP_OF = {module: group for group, modules in SHARED.items() for module in modules}


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def group_of(nodeid: str) -> str:
    module = module_of(nodeid)
    return _GROUP_OF.get(module, module)


def recorded_seconds() -> dict[str, float]:
    try:
        data = json.loads(SECONDS_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def _running_in_parallel(config: pytest.Config) -> bool:
    return config.pluginmanager.hasplugin("xdist") and bool(
        getattr(config.option, "numprocesses", None)
    )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the options
def pytest_cmdline_main(config: pytest.Config) -> None:
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "loadgroup"
        # xdist would sort units by test count; ours are already heaviest first.
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not (_running_in_parallel(config) or os.environ.get("PYTEST_XDIST_WORKER")):
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A worker parses the bare command line again, where `-n 2` alone never became
        # loadgroup (our pytest_cmdline_main runs on the controller only): xdist's own
        # hook must still turn our marks into the group suffix the scheduler reads.
        config.option.loadgroup = True
    seconds = recorded_seconds()
    weight: dict[str, float] = defaultdict(float)
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        group = group_of(item.nodeid)
        first.setdefault(group, index)
        item.add_marker(pytest.mark.xdist_group(group))
    for module, took in seconds.items():
        weight[_GROUP_OF.get(module, module)] += took
    # Every worker sorts the same collection the same way: xdist requires equal lists.
    items.sort(key=lambda item: (-weight[group_of(item.nodeid)], first[group_of(item.nodeid)]))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class PinnedLoadGroup(LoadGroupScheduling):
        """loadgroup, but a ``PINNED`` unit goes only to its worker."""

        def _allowed(self, node: Any, scope: str) -> bool:
            return PINNED.get(scope, node.gateway.id) == node.gateway.id

        def _assign_work_unit(self, node: Any) -> None:
            for scope in list(self.workqueue):
                if self._allowed(node, scope):
                    self.workqueue.move_to_end(scope, last=False)
                    super()._assign_work_unit(node)
                    return
            # Only units pinned to another worker are left: this one is done.
            if not self._pending_of(self.assigned_work.get(node, {})):
                node.shutdown()

    return PinnedLoadGroup(config, log)


_took: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get(RECORD_VAR) and not os.environ.get("PYTEST_XDIST_WORKER"):
        _took[module_of(report.nodeid.split("@", 1)[0])] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get(RECORD_VAR)
    if target and _took and not os.environ.get("PYTEST_XDIST_WORKER"):
        ranked = dict(sorted(((m, round(s, 1)) for m, s in _took.items()), key=lambda x: -x[1]))
        Path(target).write_text(json.dumps(ranked, indent=1) + "\n")
