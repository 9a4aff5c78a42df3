"""Pre-flight of a planned job, probing this machine for real through the local
transport (``address: local``): mpirun as root, the job's own program and directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.preflight.job import preflight_job
from console.jobs.preflight.probe import PreflightReport
from console.jobs.spec import make_spec
from console.transport.pool import ClusterConnections


def local_inventory(tmp_path: Path) -> Inventory:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    host = Host(name="me", address="local", gpus=2, work_dir=str(work), python=sys.executable)
    return Inventory(path=str(tmp_path / "hosts.yaml"), hosts=(host,))


async def preflight(tmp_path: Path, **fields: object) -> PreflightReport:
    inventory = local_inventory(tmp_path)
    spec = make_spec(gpus_per_host=2, **fields)
    async with ClusterConnections(inventory) as pool:
        await pool.wait_settled()
        return await preflight_job(pool, spec, plan(spec, inventory), inventory)


def checks(report: PreflightReport) -> dict[str, str]:
    return {f.check: f.message for f in report.errors}


@pytest.mark.skipif(os.geteuid() != 0, reason="mpirun refuses root only when run as root")
async def test_mpirun_as_root_is_caught_before_the_launch(tmp_path: Path) -> None:
    report = await preflight(tmp_path, kind="mpi", program="example:ddp")
    message = checks(report)["mpi-root"]
    assert "OMPI_ALLOW_RUN_AS_ROOT=1" in message and "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in message
    assert "me: " in next(f.line() for f in report.errors if f.check == "mpi-root")


async def test_mpirun_allowed_as_root_or_not_used_passes(tmp_path: Path) -> None:
    allowed = await preflight(
        tmp_path,
        kind="mpi",
        program="example:ddp",
        env={"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"},
    )
    assert "mpi-root" not in checks(allowed)
    gloo = await preflight(tmp_path, kind="horovod", program="example:horovod")
    assert "mpi-root" not in checks(gloo)  # horovodrun --gloo starts no mpirun


async def test_the_jobs_own_program_must_be_there(tmp_path: Path) -> None:
    missing = await preflight(tmp_path, kind="ps", program="train.py")
    assert "train.py not found in" in checks(missing)["program"]
    (tmp_path / "work" / "train.py").write_text("print(1)\n")
    present = await preflight(tmp_path, kind="ps", program="train.py")
    assert "program" not in checks(present)
    on_path = await preflight(tmp_path, kind="ps", program="no-such-tool-xyz")
    assert "no-such-tool-xyz not found on PATH" in checks(on_path)["program"]
    nowhere = await preflight(tmp_path, kind="ps", program="train.py", workdir="/nonexistent/x")
    assert set(checks(nowhere)) >= {"workdir"}
    assert "program" not in checks(nowhere)
