"""The Slurm backend's plan (which task writes which file, how its lines are labelled)
and the task -> node map: pure functions, no Slurm needed (the real cluster
runs in tests/integration/test_slurm_jobs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.inventory import Inventory
from console.inventory import load as load_inventory
from console.jobs.slurm.backend import slurm_plan
from console.jobs.slurm.nodes import placed, plan_on_nodes, task_nodes
from console.jobs.spec import make_spec
from console.logs.prefixes import attribute, context_for

INVENTORY = """\
hosts:
  - name: login1
    address: 10.0.0.1
slurm:
  login: login1
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "hosts.yaml"
    path.write_text(INVENTORY)
    return load_inventory(str(path))


def test_ddp_task_lines_are_labelled_by_their_global_rank(inventory: Inventory) -> None:
    spec = make_spec(kind="ddp", hosts=("login1",), program="train.py", gpus_per_host=2)
    plan = slurm_plan("job-1", spec, inventory.get("login1"), 2)
    tasks = [la for la in plan.launches if la.role != "batch"]
    assert [la.log_paths[0].path.rsplit("/", 1)[1] for la in tasks] == ["task-0.out", "task-1.out"]
    # c10d numbers the nodes as they join: the plan does not guess task 1's ranks...
    assert all(la.ranks == () for la in tasks)
    # ...torchrun's prefix (the script's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) says them
    ctx = context_for(plan.job_id, "login1", tasks[1].log_paths[0], tasks[1])
    lines = attribute(ctx, ["[rank0]: step 1", "[rank1]: step 1", "torchrun: started"], 0.0)
    assert [(ln.rank, ln.text) for ln in lines] == [
        (0, "step 1"),
        (1, "step 1"),
        (None, "torchrun: started"),
    ]
    assert lines[2].role == "launcher"
    assert {ln.host for ln in lines} == {"login1"}  # no node known yet: the reader's name
    # once Slurm names the allocation, task 1's lines name its node
    assert not placed(plan)
    on_nodes = plan_on_nodes(plan, ["n1", "n2"])
    assert placed(on_nodes)
    task1 = next(la for la in on_nodes.launches if (la.role, la.index) == ("task", 1))
    ctx = context_for(plan.job_id, "login1", task1.log_paths[0], task1)
    lines = attribute(ctx, ["[rank3]: step 1", "torchrun: started"], 0.0)
    assert [(ln.host, ln.rank) for ln in lines] == [("n2", 3), ("n2", None)]
    batch = next(la for la in on_nodes.launches if la.role == "batch")
    assert batch.log_paths[0].node is None  # the batch output stays the login host's


def test_ps_files_name_the_chief(inventory: Inventory) -> None:
    spec = make_spec(kind="ps", hosts=("login1",), program="ps.py", ps=1, workers=2, chief=True)
    plan = slurm_plan("job-2", spec, inventory.get("login1"), 2)
    labels = {
        log.path.rsplit("/", 1)[1]: (log.role, log.index)
        for la in plan.launches
        for log in la.log_paths
        if la.role != "batch"
    }
    assert labels == {
        "ps-0.out": ("ps", 0),
        "worker-0.out": ("chief", 0),  # the second step's task 0
        "worker-1.out": ("worker", 0),
        "worker-2.out": ("worker", 1),
    }


def test_task_nodes_follow_the_scripts_placement(inventory: Inventory) -> None:
    login = inventory.get("login1")
    nodes = ["n1", "n2"]
    ddp = slurm_plan("a", make_spec(kind="ddp", hosts=("login1",), program="t.py"), login, 2)
    assert task_nodes(ddp, nodes) == {"task 0": "n1", "task 1": "n2"}
    mpi_spec = make_spec(kind="mpi", hosts=("login1",), program="a.out", gpus_per_host=2)
    mpi = slurm_plan("b", mpi_spec, login, 2)  # --ntasks-per-node=2: blocks of 2
    assert task_nodes(mpi, nodes) == {
        "task 0": "n1",
        "task 1": "n1",
        "task 2": "n2",
        "task 3": "n2",
    }
    ps_spec = make_spec(kind="ps", hosts=("login1",), program="ps.py", ps=1, workers=2, chief=True)
    ps = slurm_plan("c", ps_spec, login, 2)  # each step round-robin from the first node
    assert task_nodes(ps, nodes) == {
        "ps 0": "n1",
        "worker 0": "n1",
        "worker 1": "n2",
        "worker 2": "n1",
    }
    assert task_nodes(ps, []) == {}
