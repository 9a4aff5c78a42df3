"""A report bundle masks the job's ``--env`` / ``--env-file`` values in what it copies
(issue 29 follow-up): each process's wrapper (``NAME.sh``), each host's ``job.json``
(the spec's env, the plan's, the horovodrun --gloo ``env.HOST.secret`` uploads' text) and
``plan.json``. The bundle is written from the very files the runner puts on the hosts
(``remote_ops.wrapper_script``, ``job_document``); the real path on sshd hosts is
``tests/integration/test_secrets_argv.py``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from console.inventory import Host, Inventory
from console.jobs.history import JobRecord
from console.jobs.models import JobPlan, JobState
from console.jobs.paths import process_name
from console.jobs.plan.planner import plan
from console.jobs.report.bundle import HostBundle, write_bundle
from console.jobs.report.env_masking import MASKED
from console.jobs.spec import JobSpec, make_spec
from console.jobs.ssh.remote_ops import host_job_dir, job_document, wrapper_script

HOSTS = tuple(Host(name=f"n{i}", address=f"10.0.0.{i + 1}") for i in range(2))
INVENTORY = Inventory(path="/nowhere/hosts.yaml", hosts=HOSTS)
TOKEN = "wandb-Tk93-secret-value"
SHORT = "q7"  # a short value: masked where it is set, not wherever "q7" appears
ENV = {"WANDB_API_KEY": TOKEN, "SHORT_ONE": SHORT, "QUOTED": "it's a 'value'"}


def host_files(planned: JobPlan, spec: JobSpec | None) -> list[HostBundle]:
    """Each host's job directory as the runner writes it (job.json, NAME.sh)."""
    bundles = []
    for host in HOSTS:
        if host.name not in planned.job_dirs:
            continue
        files: dict[str, bytes] = {}
        if spec is not None:
            doc = job_document(planned, created_at=1.7e9, spec=spec.model_dump(mode="json"))
            files["job.json"] = json.dumps(doc).encode()
        for launch in planned.launches:
            if launch.host == host.name:
                script = wrapper_script(
                    host, planned.job_id, launch, host_job_dir(planned, host.name)
                )
                files[f"{process_name(launch.role, launch.index)}.sh"] = script.encode()
        files["worker-0.out"] = b"step 1 SHORT_ONE=q7 printed by the program\n"
        # A Slurm job's batch script exports the env as the wrappers do (export/sbatch.py).
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in ENV.items())
        files["job.sbatch"] = f"#!/bin/bash\n{exports}srun train.py\n".encode()
        bundles.append(HostBundle(host.name, files))
    return bundles


def record(planned: JobPlan) -> JobRecord:
    return JobRecord(
        id=planned.job_id, name=planned.name, kind=planned.kind, state=JobState.SUCCEEDED,
        started=1.7e9, ended=1.7e9 + 60, hosts=tuple(h.name for h in HOSTS),
        inventory=INVENTORY.path, fail_fast=True, plan=planned, failure=None,
    )  # fmt: skip


def bundle_text(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file()}


def test_wrappers_job_json_and_plan_json_keep_the_names_and_mask_the_values(
    tmp_path: Path,
) -> None:
    for kind, extra in (("ps", {"ps": 1, "workers": 1}), ("horovod", {"gpus_per_host": 1})):
        spec = make_spec(kind=kind, program="train.py", env=ENV, **extra)
        planned = plan(spec, INVENTORY, job_id=f"{kind}-1")
        out = tmp_path / kind
        write_bundle(record(planned), host_files(planned, spec), out)
        files = bundle_text(out)
        holding = [name for name, text in files.items() if TOKEN in text]
        assert holding == [], (kind, holding)
        for name, text in files.items():
            if not name.endswith(".out"):
                assert f"SHORT_ONE={SHORT}" not in text and f'"SHORT_ONE": "{SHORT}"' not in text
                assert "it's a" not in text and "it'\"'\"'s a" not in text, (name, text)
        # The names stay; what a program printed is its own.
        doc = json.loads(files["hosts/n0/job.json"])
        assert doc["spec"]["env"] == dict.fromkeys(ENV, MASKED)
        assert "SHORT_ONE=q7 printed" in files["hosts/n0/worker-0.out"]
        assert f"export SHORT_ONE='{MASKED}'" in files["hosts/n0/job.sbatch"]
        if kind == "ps":
            wrapper = files["hosts/n0/ps-0.sh"]
            assert f"export WANDB_API_KEY='{MASKED}'" in wrapper, wrapper
            assert f"export SHORT_ONE='{MASKED}'" in wrapper
            plan_json = json.loads(files["plan.json"])
            assert plan_json["launches"][0]["env"]["WANDB_API_KEY"] == MASKED
            assert plan_json["launches"][0]["env"]["DISTCONSOLE_JOB_ID"] == "ps-1"  # ours
        else:  # horovodrun --gloo: the values travel in each host's env.HOST.secret upload
            [upload, *_] = [u for u in doc["plan"]["uploads"] if u["path"].endswith(".secret")]
            assert upload["data"] == MASKED


def test_with_no_job_json_back_every_env_value_of_the_plan_is_masked(tmp_path: Path) -> None:
    spec = make_spec(kind="ps", program="train.py", env=ENV, ps=1, workers=1)
    planned = plan(spec, INVENTORY, job_id="ps-2")
    write_bundle(record(planned), host_files(planned, None), tmp_path)
    files = bundle_text(tmp_path)
    assert [name for name, text in files.items() if TOKEN in text] == []
    env = json.loads(files["plan.json"])["launches"][0]["env"]
    assert set(env.values()) == {MASKED} and "WANDB_API_KEY" in env
