"""Where a job's secrets live (issue 29 items 5 and 6): the notify command runs from a
0600 file, not ``bash -c TEXT``; the webhook reaches the leader's supervisor only;
``job.json`` and a report bundle's copies hold it masked, by the one masking
(``masked_url``); a process's job paths are exported with ``~/`` expanded, and each MPI
rank exports its own host's."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

from console.hostprogs.supervisor.notify import NOTIFY_COMMAND_FILE, SvNotifier
from console.inventory import load
from console.jobs.models import Notify
from console.jobs.notify import COMMAND_KEPT, masked_bytes, masked_document
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec
from console.jobs.ssh import remote_ops
from console.jobs.ssh.supervision import supervisor_spec

URL = "https://hooks.slack.com/services/T0/B0/s3cr3tPATH"
COMMAND = "curl -s -H 'Authorization: Bearer tok3nXYZ' https://alerts.example.com/x"


def two_host_plan(tmp_path: Path, kind: str = "ps", **fields: Any) -> tuple[Any, Any]:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        "hosts:\n  - {name: n0, address: 10.0.0.1, gpus: 1, user: alice}\n"
        "  - {name: n1, address: 10.0.0.2, gpus: 1, user: bob}\n"
    )
    inventory = load(hosts)
    spec = make_spec(kind=kind, program="train.py", **fields)
    return plan(spec, inventory, job_id="j-1"), inventory


def test_the_notify_command_runs_from_a_private_file_not_its_text_in_argv(
    tmp_path: Path,
) -> None:
    # The command records its own argv: its text must not be in it.
    command = "token=tok3nXYZ; tr '\\0' ' ' </proc/$$/cmdline >argv.txt"
    cfg = {"job_id": "j-1", "name": "t", "notify": {"command": command, "on": ["failed"]}}
    logged: list[str] = []
    notifier = SvNotifier(cfg, str(tmp_path), lambda event, **_: logged.append(event))
    notifier.notify("failed", "failed", "worker-1 exit status 3", "n1")
    notifier.drain(30)
    assert logged == ["notified"], logged
    argv = (tmp_path / "argv.txt").read_text()
    assert "tok3nXYZ" not in argv and NOTIFY_COMMAND_FILE in argv, argv
    file = tmp_path / NOTIFY_COMMAND_FILE
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert file.read_text() == command + "\n"


def test_only_the_leaders_supervisor_gets_the_webhook_and_the_command(tmp_path: Path) -> None:
    planned, inventory = two_host_plan(
        tmp_path, ps=1, workers=1, notify=[URL], notify_command=COMMAND
    )
    leader = inventory.hosts[0]
    specs = {
        h: supervisor_spec(planned, h, leader=leader, leader_port=1, secret="k", grace_s=5)
        for h in ("n0", "n1")
    }
    assert list(specs["n0"]["config"]["notify"]["urls"]) == [URL]
    assert specs["n0"]["config"]["notify"]["command"] == COMMAND
    assert specs["n1"]["config"]["notify"] is None
    assert "s3cr3tPATH" not in json.dumps(specs["n1"]) and "tok3n" not in json.dumps(specs["n1"])


def test_job_json_holds_the_notifications_masked_on_every_host(tmp_path: Path) -> None:
    planned, inventory = two_host_plan(
        tmp_path, ps=1, workers=1, notify=[URL], notify_command=COMMAND
    )
    spec = make_spec(
        kind="ps", program="train.py", ps=1, workers=1, notify=[URL], notify_command=COMMAND
    ).model_dump(mode="json")
    for host in inventory.hosts:
        payload = remote_ops.start_payload(planned, host, (), created_at=1.0, spec=spec)
        assert "s3cr3tPATH" not in payload and "tok3nXYZ" not in payload
    document = remote_ops.job_document(planned, created_at=1.0, spec=spec)
    assert document["plan"]["notify"]["urls"] == ["https://hooks.slack.com/…"]
    assert document["spec"]["notify"] == ["https://hooks.slack.com/…"]
    assert document["spec"]["notify_command"] == COMMAND_KEPT


def test_bundle_masking_covers_documents_and_any_other_file() -> None:
    config = {"job_id": "j", "notify": {"urls": [URL], "command": COMMAND, "on": ["failed"]}}
    assert masked_document(config) == {
        "job_id": "j",
        "notify": {
            "urls": ["https://hooks.slack.com/…"],
            "command": COMMAND_KEPT,
            "on": ["failed"],
        },
    }
    notify = Notify(urls=(URL,), command=None, on=("failed",))
    text = f"posting to {URL}\n{json.dumps({'u': URL})}\n".encode()
    assert b"s3cr3tPATH" not in masked_bytes(text, notify)
    assert masked_bytes(b"nothing here", None) == b"nothing here"


def run_bash(script: str, home: Path) -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", script + "\nenv -0"],
        env={"HOME": str(home), "PATH": os.environ["PATH"]},
        capture_output=True,
        timeout=30,
    ).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def test_the_wrapper_exports_the_job_dir_with_its_home_expanded(tmp_path: Path) -> None:
    planned, inventory = two_host_plan(tmp_path, kind="ddp")
    launch = planned.launches[0]
    job_dir = planned.job_dirs[launch.host]
    assert job_dir.startswith("~/")
    script = remote_ops.wrapper_script(inventory.hosts[0], "j-1", launch, job_dir)
    exports = "\n".join(ln for ln in script.splitlines() if ln.startswith("export DISTCONSOLE_"))
    seen = run_bash(exports, tmp_path)
    assert seen["DISTCONSOLE_JOB_DIR"] == f"{tmp_path}/{job_dir[2:]}"
    assert seen["DISTCONSOLE_HANG_HOOK"] == f"{tmp_path}/{job_dir[2:]}/python"


def test_each_mpi_rank_exports_its_own_hosts_paths(tmp_path: Path) -> None:
    planned, _ = two_host_plan(tmp_path, kind="mpi")
    argv = planned.launches[0].argv
    script = argv[argv.index("-c") + 1]
    for rank, home in ((0, tmp_path / "alice"), (1, tmp_path / "bob")):
        home.mkdir()
        # The launcher forwards its own (expanded) paths; the rank's host has its own.
        forwarded = "export DISTCONSOLE_HANG_HOOK=/home/launcher/x/python "
        forwarded += "DISTCONSOLE_JOB_DIR=/home/launcher/x OMPI_COMM_WORLD_RANK=" + str(rank)
        # Only the arm's exports: cut before the program runs.
        arm = script.split(f"\n{rank})\n", 1)[1].split("\nexec ", 1)[0]
        exports = "\n".join(ln for ln in arm.splitlines() if ln.startswith("export DISTCONSOLE_"))
        seen = run_bash(forwarded + "\n" + exports, home)
        job_dir = planned.job_dirs[("n0", "n1")[rank]].removeprefix("~/")
        assert seen["DISTCONSOLE_JOB_DIR"] == f"{home}/{job_dir}", (rank, seen)
        assert seen["DISTCONSOLE_HANG_HOOK"] == f"{home}/{job_dir}/python", (rank, seen)
    hooks = {u.host for u in planned.uploads if u.resource == "hang_sitecustomize.py"}
    assert hooks == {"n0", "n1"}  # node1's rank loads its own host's hook
