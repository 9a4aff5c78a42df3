"""A demo cluster can start at host index ``first``, so that several processes serving
shards of one cluster (bench/demo_shard.py) name distinct hosts on distinct addresses."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.transport.demo import MAX_DEMO_HOSTS, DemoCluster, demo_address


def test_a_shard_names_its_own_hosts_and_addresses(tmp_path: Path) -> None:
    first = DemoCluster(2, directory=tmp_path / "a")
    second = DemoCluster(2, directory=tmp_path / "b", first=2)
    assert first.names == ("node0", "node1")
    assert second.names == ("node2", "node3")
    assert second.addresses == {demo_address(2), demo_address(3)}
    assert not first.addresses & second.addresses
    hosts = second.inventory_data()["hosts"]
    assert [h["name"] for h in hosts] == ["node2", "node3"]
    assert [h["address"] for h in hosts] == [demo_address(2), demo_address(3)]


@pytest.mark.parametrize("first", [-1, MAX_DEMO_HOSTS - 1])
def test_a_shard_past_the_last_address_is_refused(tmp_path: Path, first: int) -> None:
    with pytest.raises(ValueError, match="first must be between 0 and"):
        DemoCluster(2, directory=tmp_path, first=first)
