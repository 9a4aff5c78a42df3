"""Horovod elastic's plan: the horovodrun line, the discovery script it writes, the rank
wrapper's elastic arm, and when a horovod job is (not) elastic."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from console.commands.parts.job_options import naming_options
from console.errors import JobSpecError, PlanError
from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from tests.unit.test_plan_mpi import JD, JOB, inventory

ELASTIC = {"DISTCONSOLE_HOROVOD_ELASTIC": "1"}


def elastic_plan(**extra: object):  # type: ignore[no-untyped-def]
    fields: dict[str, object] = {
        "kind": "horovod", "program": "example:horovod", "gpus_per_host": 2,
        "max_restarts": 2, "horovod_elastic": True, "interface": "eth0",
    }  # fmt: skip
    fields.update(extra)
    return plan(make_spec(**fields), inventory(), job_id=JOB)


def horovodrun_line(script: str) -> list[str]:
    """The launcher script's last command (its rank wrapper spans lines), as words."""
    return shlex.split(script[script.index("\nexec horovodrun") + 1 :])


def test_horovodrun_line_has_elastic_options_quoted() -> None:
    p = elastic_plan()
    launch = p.launches[0]
    assert launch.role == "horovodrun" and launch.argv[:2] == ("bash", "-c")
    assert launch.argv[-1] == "distconsole-horovodrun"
    assert launch.log_paths[0].path == f"{JD}/horovodrun-0.out"
    words = horovodrun_line(launch.argv[2])
    assert words[:5] == ["exec", "horovodrun", "-np", "6", "-p"]
    assert "-H" not in words and "--mpi" not in words and "--gloo" in words
    at = words.index("--host-discovery-script")
    assert words[at + 1] == "$f"  # the script written first, by the same bash
    options = dict(zip(words[at + 2 :: 2], words[at + 3 :: 2], strict=False))
    assert options["--min-np"] == "4" and options["--max-np"] == "6"  # one host of 2 lost
    assert options["--reset-limit"] == "4"  # two resets (down, up) per restart
    assert "--blacklist-cooldown-range" in words and "--network-interface" in words
    assert any("elastic" in n for n in p.notes), p.notes


def test_discovery_script_lists_the_leaders_hosts_now(tmp_path: Path) -> None:
    p = elastic_plan()
    script = p.launches[0].argv[2]
    start = script.index("printf '%s\\n' ") + len("printf '%s\\n' ")
    text = shlex.split(script[start : script.index(' >"$f"', start)])[0]
    # The job directory's "~/" expands on the host; here a temporary one stands in.
    text = text.replace('"$HOME"/' + JD[2:], str(tmp_path))
    path = tmp_path / "discover.sh"
    path.write_text(text)
    run = ["sh", str(path)]
    assert subprocess.run(run, capture_output=True, text=True, check=True).stdout.split() == [
        "10.0.0.1:2", "10.0.0.2:2", "10.0.0.3:2",
    ]  # fmt: skip
    (tmp_path / "supervisor.json").write_text('{"hosts_now": ["n0", "n2"]}')
    out = subprocess.run(run, capture_output=True, text=True, check=True).stdout.split()
    assert out == ["10.0.0.1:2", "10.0.0.3:2"]


def test_elastic_rank_wrapper_finds_its_host_by_name_and_counts_starts() -> None:
    script = elastic_plan().launches[0].argv[2]
    wrapper = horovodrun_line(script)[-2]
    assert "10.0.0.2) r=$((2 + HOROVOD_LOCAL_RANK))" in wrapper
    assert "DISTCONSOLE_RESTART_COUNT=$((n - 1))" in wrapper


def test_not_elastic_without_the_switch_restarts_or_gloo() -> None:
    # The env var asks as the switch does (for hosts.yaml's env); without either, or
    # with restarts from the inventory at 0: horovodrun re-run whole.
    env_asked = elastic_plan(horovod_elastic=False, env=ELASTIC).launches[0]
    assert env_asked.role == "horovodrun"
    p = elastic_plan(horovod_elastic=False)
    launch = p.launches[0]
    assert launch.role == "launcher" and "-H" in launch.argv
    assert "--host-discovery-script" not in " ".join(launch.argv)
    assert any("re-run horovodrun whole" in n and "--horovod-elastic" in n for n in p.notes)
    env_only = {"horovod_elastic": False, "env": ELASTIC}
    for extra in ({"max_restarts": 0, **env_only}, {"horovod_launcher": "mpi", **env_only}):
        launch = elastic_plan(**extra).launches[0]
        assert launch.role == "launcher" and "-H" in launch.argv, extra


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"kind": "ddp", "program": "example:ddp"}, "applies to --kind horovod only"),
        ({"horovod_launcher": "mpi"}, "needs --horovod-launcher gloo"),
        ({"max_restarts": 0}, "needs --max-restarts"),
    ],
)
def test_the_switch_is_refused_where_it_cannot_apply(extra: dict[str, object], says: str) -> None:
    with pytest.raises(JobSpecError) as caught, naming_options():
        elastic_plan(**extra)
    assert caught.value.field == "--horovod-elastic" and says in caught.value.detail


def test_a_single_host_needs_every_slot() -> None:
    one = Inventory(path="h", hosts=(Host(name="solo", address="10.9.9.9", gpus=2),))
    spec = make_spec(kind="horovod", program="example:horovod", max_restarts=1, env=ELASTIC)
    words = horovodrun_line(plan(spec, one, job_id=JOB).launches[0].argv[2])
    assert words[words.index("--min-np") + 1] == words[words.index("--max-np") + 1] == "2"


def uneven() -> Inventory:
    """Four hosts of 1, 2, 3 and 4 slots."""
    hosts = tuple(Host(name=f"u{g}", address=f"10.1.0.{g}", gpus=g) for g in (3, 1, 4, 2))
    return Inventory(path="h", hosts=hosts)


def min_np_of(launch_script: str) -> int:
    words = horovodrun_line(launch_script)
    return int(words[words.index("--min-np") + 1])


def test_min_hosts_sets_min_np_to_the_slots_of_the_smallest_hosts() -> None:
    fields: dict[str, object] = {"kind": "horovod", "program": "example:horovod"}
    fields.update(max_restarts=1, horovod_elastic=True)
    for floor, fewest in ((1, 1), (2, 3), (3, 6), (4, 10)):
        planned = plan(make_spec(**fields, min_hosts=floor), uneven(), job_id=JOB)
        assert min_np_of(planned.launches[0].argv[2]) == fewest, floor
        assert planned.min_hosts == floor
        note, first_host = planned.notes  # the second: losing the first host ends it
        assert f"--min-hosts {floor}: " in note and f"horovodrun --min-np {fewest}" in note
        assert first_host.startswith(f"Losing {planned.hosts_involved[0]} ends the job:")
    # Without it: every slot but the largest host's (one host lost), as before.
    planned = plan(make_spec(**fields), uneven(), job_id=JOB)
    assert min_np_of(planned.launches[0].argv[2]) == 6 and planned.min_hosts == 0
    assert "horovodrun --min-np 6 (all slots but the largest host's)" in planned.notes[0]
    with pytest.raises(PlanError, match=r"--min-hosts 5 must be 1\.\.4"):
        plan(make_spec(**fields, min_hosts=5), uneven(), job_id=JOB)


def test_the_launcher_writes_the_hosts_for_its_supervisor() -> None:
    script = elastic_plan(min_hosts=2).launches[0].argv[2]
    line = next(ln for ln in script.splitlines() if "horovod-hosts.json" in ln)
    text = shlex.split(line[line.index("printf") :])[2]
    assert json.loads(text) == {
        "hosts": [{"name": f"n{i}", "horovod": f"10.0.0.{i + 1}", "slots": 2} for i in range(3)],
        "ssh_port": "2022",
    }


def test_min_hosts_is_for_horovod_elastic_jobs_only() -> None:
    fine = make_spec(
        kind="horovod", program="t.py", min_hosts=2, max_restarts=1, horovod_elastic=True
    )
    assert fine.min_hosts == 2
    # The job's env asks as the switch does.
    make_spec(kind="horovod", program="t.py", min_hosts=2, max_restarts=1, env=ELASTIC)
    refused = [
        ({"kind": "horovod"}, "applies to a horovod job under Horovod elastic only"),
        ({"kind": "horovod", "horovod_elastic": True, "horovod_launcher": "mpi"}, "gloo"),
        ({"kind": "mpi"}, "--kind horovod with --horovod-elastic, not mpi"),
        ({"kind": "ps"}, "--kind horovod with --horovod-elastic, not ps"),
        ({"kind": "horovod", "env": ELASTIC, "max_restarts": 0}, "Horovod elastic"),
    ]
    for fields, says in refused:
        values: dict[str, object] = {"program": "t.py", "min_hosts": 2, "max_restarts": 1}
        with pytest.raises(JobSpecError) as caught, naming_options():
            make_spec(**{**values, **fields})
        assert caught.value.field == "--min-hosts" and says in caught.value.detail, fields


def test_min_hosts_on_a_horovod_job_that_is_not_elastic_is_a_plan_error() -> None:
    # Asked by the env, but no restarts from the inventory: not elastic after all.
    spec = make_spec(kind="horovod", program="t.py", min_hosts=2, env=ELASTIC)
    with pytest.raises(PlanError, match="--min-hosts 2 applies to a horovod job under Horovod"):
        plan(spec, inventory(), job_id=JOB)


def test_the_switch_without_restarts_from_anywhere_is_a_plan_error() -> None:
    # No --max-restarts and none in hosts.yaml: not silently plain horovodrun.
    spec = make_spec(kind="horovod", program="t.py", horovod_elastic=True)
    with pytest.raises(PlanError, match="--horovod-elastic needs --max-restarts N"):
        plan(spec, inventory(), job_id=JOB)
    # The env var alone (often a host's default in hosts.yaml) still just asks.
    asked = plan(make_spec(kind="horovod", program="t.py", env=ELASTIC), inventory(), job_id=JOB)
    assert asked.launches[0].role == "launcher"
