"""The core never imports textual or rich: only console/ui (and the ui/demo commands,
lazily) may. Checked in a fresh interpreter, module by module, so that the first module
that pulls either in is named."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import console

ROOT = Path(__file__).resolve().parents[2]
UI_ONLY = ("console.ui", "console.commands.ui", "console.commands.demo")
FORBIDDEN = ("textual", "rich")

PROBE = """
import importlib, json, sys
forbidden = {forbidden!r}
report = {{"leaks": {{}}, "errors": {{}}}}
for name in {modules!r}:
    try:
        importlib.import_module(name)
    except Exception as exc:
        report["errors"][name] = "%s: %s" % (type(exc).__name__, exc)
        continue
    loaded = sorted(m for m in forbidden if m in sys.modules)
    fresh = [m for m in loaded if m not in report["leaks"].values()]
    for m in fresh:
        report["leaks"].setdefault(name, m)
print(json.dumps(report))
"""


def core_modules() -> list[str]:
    names = [
        info.name
        for info in pkgutil.walk_packages(console.__path__, prefix="console.")
        if not any(info.name == u or info.name.startswith(u + ".") for u in UI_ONLY)
        # an entry point runs the CLI when imported
        and not info.name.endswith(".__main__")
    ]
    return sorted({"console", *names})


def test_core_module_list_is_complete() -> None:
    modules = core_modules()
    for expected in (
        "console.inventory",
        "console.cli",
        "console.transport.base",
        "console.probe.facts",
        "console.commands.check",
    ):
        assert expected in modules
    assert not any(m.startswith("console.ui") for m in modules)


def test_core_does_not_import_textual_or_rich() -> None:
    modules = core_modules()
    code = PROBE.format(forbidden=FORBIDDEN, modules=modules)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["errors"] == {}, report["errors"]
    assert report["leaks"] == {}, (
        f"these core modules pulled in textual/rich (first importer -> package): {report['leaks']}"
    )


def test_the_probe_would_catch_a_leak() -> None:
    # The same probe run on a UI module must report it, or the test above proves nothing.
    code = PROBE.format(forbidden=FORBIDDEN, modules=["console.ui.app"])
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["leaks"].get("console.ui.app") in FORBIDDEN, report


def test_plain_models_do_not_load_asyncssh() -> None:
    # Importing a host state, a sample or a job spec must stay cheap: the UI's models and
    # every CLI error path load these, and asyncssh costs ~100 ms of imports.
    code = (
        "import sys\n"
        "import console.transport.base, console.probe.models, console.jobs.spec, console.names\n"
        "print('asyncssh' in sys.modules)\n"
        "from console.transport import ClusterConnections\n"
        "print('asyncssh' in sys.modules, ClusterConnections.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "ClusterConnections"]
