"""What an attached ``launch`` follows (issue 23 item 2): an MPI job's ranks hand their
launcher none of their output, so it reads each rank's own files on the host the rank
runs on, next to the launcher's own files."""

from __future__ import annotations

from console.commands.launch import follow_targets
from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec

JOB = "mpi-1"


def test_mpi_ranks_are_followed_on_their_own_hosts_with_their_done_markers() -> None:
    inv = Inventory(
        path="hosts.yaml",
        hosts=(
            Host(name="n0", address="10.0.0.1", gpus=2),
            Host(name="n1", address="10.0.0.2", gpus=2),
        ),
    )
    p = plan(make_spec(kind="mpi", program="train.py"), inv, job_id=JOB)
    targets = {t.host: t for t in follow_targets(p)}
    assert sorted(targets) == ["n0", "n1"]
    jd0, jd1 = p.job_dirs["n0"], p.job_dirs["n1"]
    own = [(f.path, f.role, f.rank) for f in targets["n0"].files]
    assert own == [
        (f"{jd0}/launcher-0.out", "launcher", None),
        (f"{jd0}/launcher-0.err", "launcher", None),
        *((f"{jd0}/ranks/rank.{r}/{s}", "rank", r) for r in (0, 1) for s in ("stdout", "stderr")),
    ]
    assert [(f.path, f.host, f.rank) for f in targets["n1"].files] == [
        (f"{jd1}/ranks/rank.{r}/{s}", "n1", r) for r in (2, 3) for s in ("stdout", "stderr")
    ]
    assert targets["n0"].done_markers == (
        f"{jd0}/launcher-0.exit",
        f"{jd0}/ranks/rank.0/done",
        f"{jd0}/ranks/rank.1/done",
    )
    assert targets["n1"].done_markers == (f"{jd1}/ranks/rank.2/done", f"{jd1}/ranks/rank.3/done")


def test_a_ddp_job_is_followed_through_its_launchers_files_as_before() -> None:
    inv = Inventory(path="hosts.yaml", hosts=(Host(name="n0", address="10.0.0.1", gpus=2),))
    p = plan(make_spec(kind="ddp", program="train.py", master_port=29500), inv, job_id="ddp-1")
    (target,) = follow_targets(p)
    jd = p.job_dirs["n0"]
    assert [f.path for f in target.files] == [f"{jd}/torchrun-0.out", f"{jd}/torchrun-0.err"]
    assert target.done_markers == (f"{jd}/torchrun-0.exit",)
