"""The Slurm occupancy parsers on output captured from a real slurmctld 22.05
(tests/data/slurm: job 1 ``--gres=gpu:1`` on n1, job 2 on n[1-2] without GPUs, job 3
pending)."""

from __future__ import annotations

from pathlib import Path

from console.inventory import Host
from console.jobs.slurm.queue import (
    expand_nodes,
    gres_gpus,
    node_addresses,
    node_hosts,
    occupancy_from_squeue,
    on_hosts,
)

DATA = Path(__file__).parents[1] / "data" / "slurm"


def test_squeue_json_gives_each_nodes_jobs_users_and_gpus() -> None:
    occupancy = occupancy_from_squeue((DATA / "squeue-occupancy-22.05.json").read_text(), "root")
    assert sorted(occupancy) == ["n1", "n2"]  # the pending job holds no node
    first, second = occupancy["n1"]
    assert (first.slurm_id, first.user, first.name, first.state) == (
        "1",
        "root",
        "train",
        "RUNNING",
    )
    assert (first.gpus, first.gpu_indices, first.mine) == (1, (0,), True)
    assert first.label == "slurm 1 root train (yours)"
    assert (second.slurm_id, second.gpus) == ("2", 0)
    assert [j.slurm_id for j in occupancy["n2"]] == ["2"]
    assert not occupancy_from_squeue((DATA / "squeue-occupancy-22.05.json").read_text())["n1"][
        0
    ].mine


def test_gres_and_host_lists() -> None:
    assert gres_gpus("gpu:a100:2(IDX:0,2),mps:0") == (2, (0, 2))
    assert gres_gpus("gpu:4(IDX:0-3)") == (4, (0, 1, 2, 3))
    assert gres_gpus("mps:100") == (0, ())
    assert expand_nodes("n[1-2],gpu[08-09,11],login") == [
        "n1",
        "n2",
        "gpu08",
        "gpu09",
        "gpu11",
        "login",
    ]


def test_nodes_map_to_hosts_by_name_then_address() -> None:
    addresses = node_addresses((DATA / "sinfo-22.05.json").read_text())
    assert addresses == {"n1": "127.0.0.41", "n2": "127.0.0.42"}
    hosts = [Host(name="gpu-a", address="127.0.0.41"), Host(name="n2", address="10.0.0.9")]
    mapping = node_hosts(hosts, addresses)
    assert mapping == {"n1": "gpu-a", "n2": "n2"}
    assert sorted(on_hosts({"n1": (), "n3": ()}, mapping)) == ["gpu-a", "n3"]
