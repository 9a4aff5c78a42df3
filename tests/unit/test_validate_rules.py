"""validate's pure parts: the pair schedule (O(n) tests), the verdict rules (fleet median,
CPU quota, datasheet peaks, slow links vs slow hosts) and the per-host result store."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.validate import store
from console.validate.expected import peak_for
from console.validate.schedule import disjoint_rounds, follow_up_pairs, read_again, ring_pairs
from console.validate.verdicts import HostResult, Thresholds, judge_hosts, judge_links

HOSTS = [f"n{i}" for i in range(8)]


def test_ring_pairs_run_in_two_rounds_for_even_and_three_for_odd_fleets() -> None:
    even = disjoint_rounds(ring_pairs(HOSTS))
    assert [len(r) for r in even] == [4, 4]
    for round_ in even:
        hosts = [h for pair in round_ for h in pair]
        assert len(hosts) == len(set(hosts))  # disjoint: run at the same time
    odd = disjoint_rounds(ring_pairs(HOSTS[:5]))
    assert sum(len(r) for r in odd) == 5 and len(odd) == 3
    assert ring_pairs(HOSTS[:2]) == []  # two hosts: the all-hosts ring is the only pair


def test_follow_up_pits_each_slow_pairs_host_against_a_good_one() -> None:
    slow = [("n2", "n3")]
    extra = follow_up_pairs(slow, HOSTS)
    assert extra == [("n2", "n0"), ("n3", "n1")]
    # n hosts: n ring pairs + at most 3 per slow pair (it again, each host vs a good one).
    assert len(ring_pairs(HOSTS)) + len(slow) + len(extra) <= len(HOSTS) + 3 * len(slow)
    assert follow_up_pairs([("n0", "n1")], ["n0", "n1"]) == []  # no good host to ask


def test_a_follow_up_read_slow_once_is_read_again_before_it_is_judged() -> None:
    """CI on 2 busy cores: a follow-up pair (n1 vs a good host) read 46 % below the median
    once, while the other xdist worker loaded the machine, and named a second slow link.
    Every pair judged slow has two figures, the follow-ups too; the ring's slow pairs
    already have their second one."""
    reads = {frozenset(p): 2 for p in [("n0", "n1")]}
    reads |= {frozenset(p): 1 for p in [("n1", "n3"), ("n0", "n2")]}
    slow_now = [("n0", "n1"), ("n1", "n3")]
    assert read_again(slow_now, reads) == [("n1", "n3")]
    reads[frozenset(("n1", "n3"))] = 2
    assert read_again(slow_now, reads) == []


def cpu(host: str, gflops: float, **extra: float) -> HostResult:
    return HostResult(host, {"cpu_gflops": gflops, "mem_gbps": 10.0, "cpu_threads": 1, **extra})


def test_fleet_median_rules_warn_at_25_and_fail_at_50_percent_below() -> None:
    rows = judge_hosts([cpu("a", 10), cpu("b", 10), cpu("e", 10), cpu("c", 7.4), cpu("d", 4.9)])
    states = {r.host: r.state for r in rows}
    assert states == {"a": "ok", "b": "ok", "e": "ok", "c": "warn", "d": "fail"}
    reason = next(r for r in rows if r.host == "d").reasons[0]
    assert reason == "CPU fp32 matmul 4.9 GFLOPS is 51% below the fleet median 10 GFLOPS"
    lenient = judge_hosts(
        [cpu("a", 10), cpu("b", 10), cpu("c", 7.4)], Thresholds(warn=0.3, fail=0.6)
    )
    assert all(r.state == "ok" for r in lenient)


def test_a_cpu_quota_below_the_threads_warns_even_when_the_figures_look_fine() -> None:
    rows = judge_hosts(
        [cpu("a", 10), cpu("b", 10), cpu("c", 10, cpu_quota_cpus=0.25, cpu_throttled_fraction=0.8)]
    )
    slow = next(r for r in rows if r.host == "c")
    assert slow.state == "warn"
    assert "CPU limited by a cgroup quota to 0.25 CPU" in slow.reasons[0]
    assert "throttled in 80% of its periods" in slow.reasons[0]
    # A quota of 2 CPUs for 1 thread is no limit for this test.
    roomy = judge_hosts([cpu("a", 10), cpu("b", 10, cpu_quota_cpus=2.0)])
    assert all(r.state == "ok" for r in roomy)


def test_a_host_whose_program_failed_fails_with_its_error() -> None:
    rows = judge_hosts([cpu("a", 10), HostResult("b", error="b: validate: torch is missing")])
    assert [(r.host, r.state, r.reasons) for r in rows][1] == (
        "b",
        "fail",
        ("b: validate: torch is missing",),
    )


def test_gpus_are_judged_against_the_fleet_and_their_datasheet_peak() -> None:
    h100 = {
        "name": "NVIDIA H100 80GB HBM3",
        "matmul_tflops": 700.0,
        "dev_mem_gbps": 2900.0,
        "h2d_gbps": 50.0,
        "d2h_gbps": 50.0,
    }
    slow = {**h100, "matmul_tflops": 400.0}
    rows = judge_hosts([HostResult("a", {}, [h100, h100]), HostResult("b", {}, [h100, slow])])
    by = {(r.host, r.gpu): r for r in rows}
    assert by[("a", 0)].state == "ok" and by[("a", 0)].figures["matmul_tflops"] == 700.0
    bad = by[("b", 1)]
    assert bad.state == "warn"
    assert any("below the fleet median" in r for r in bad.reasons)
    assert any("40% of the H100 SXM's datasheet peak 989" in r for r in bad.reasons)
    assert any("NVIDIA H100 Tensor Core GPU datasheet" in r for r in bad.reasons)


def test_device_names_find_their_model_and_a10_is_not_a100() -> None:
    names = {
        "NVIDIA H100 80GB HBM3": "H100 SXM",
        "NVIDIA H100 PCIe": "H100 PCIe",
        "NVIDIA A100-SXM4-40GB": "A100 40GB SXM",
        "NVIDIA A100 80GB PCIe": "A100 80GB PCIe",
        "NVIDIA A10": "A10",
        "NVIDIA L40S": "L40S",
    }
    assert {n: getattr(peak_for(n), "model", None) for n in names} == names
    assert peak_for("Tesla T4") is None


def test_a_slow_pair_of_good_hosts_is_a_link_and_a_host_slow_with_all_is_the_host() -> None:
    pairs = {("a", "b"): 1.0, ("b", "c"): 1.0, ("c", "d"): 0.4, ("d", "a"): 1.0}
    pairs |= {("c", "a"): 1.0, ("d", "b"): 1.0}  # the follow-up: both fine with others
    links, hosts = judge_links(pairs)
    slow = [link for link in links if link.state != "ok"]
    assert [link.hosts for link in slow] == [("c", "d")] and slow[0].state == "fail"
    assert slow[0].reasons[0].startswith("slow link: c<->d 0.4 GB/s is 60% below")
    assert hosts == {}
    # d slow with everyone: d is the slow one, not a link.
    pairs = {("a", "b"): 1.0, ("b", "c"): 1.0, ("c", "d"): 0.6, ("d", "a"): 0.6}
    links, hosts = judge_links(pairs)
    assert set(hosts) == {"d"} and hosts["d"][0] == "warn"
    assert "the host, not one link" in hosts["d"][1]
    assert not any(r.startswith("slow link") for link in links for r in link.reasons)


def test_results_are_kept_per_host_and_read_back_as_validated_ago(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTCONSOLE_DATA_DIR", str(tmp_path))
    rows = judge_hosts([cpu("a", 10), cpu("b", 10), cpu("c", 4)])
    path = store.save("hosts.yaml", rows, now=1000.0)
    assert path.stat().st_mode & 0o077 == 0
    found = store.load_validated("hosts.yaml")
    assert {h: v.state for h, v in found.items()} == {"a": "ok", "b": "ok", "c": "fail"}
    assert found["a"].ago(now=1000.0 + 2 * 3600) == "validated 2 h ago: ok"
    assert found["c"].reasons[0].startswith("CPU fp32 matmul 4 GFLOPS")
    assert store.load_validated("other.yaml") == {}


async def test_a_host_without_torch_fails_with_a_clear_error_and_nothing_left() -> None:
    """The real program, run by a local transport with a Python that has no torch."""
    from console.errors import HostProgramError
    from console.inventory import Host
    from console.transport.local import LocalConnection
    from console.validate.runner import Plan, Session

    host = Host(name="bare", address="local", python="/usr/bin/python3")
    session = Session({"bare": LocalConnection(host)}, Plan(quick=True), lambda _line: None)
    with pytest.raises(HostProgramError, match=r"^bare: validate: torch is not importable"):
        await session.run_program(host, Plan(quick=True).config(mode="compute"))
    assert session.groups["bare"] == set()  # it exited: no group left to kill


def test_the_table_puts_failing_rows_first_then_the_ring_and_the_links() -> None:
    from console.commands.validate import render
    from console.validate.runner import Outcome

    rows = judge_hosts([cpu("node0", 10), cpu("node1", 10), cpu("node2", 3)])
    links, _ = judge_links(
        {("node0", "node1"): 1.0, ("node1", "node2"): 1.0, ("node2", "node0"): 0.5}
    )
    outcome = Outcome(ring={"busbw_gbps": 0.5, "hosts": ["node0", "node1", "node2"]})
    lines = render(rows, links, outcome).splitlines()
    assert lines[1].startswith("node2    -  fail   CPU fp32 matmul 3 GFLOPS is 70% below")
    assert lines[2] == "node0    -  ok     cpu_gflops=10 mem_gbps=10.0"
    assert "all-reduce over 3 hosts: 0.5 GB/s bus bandwidth (gloo)" in lines
    assert lines[-2] == "link node1<->node2  ok     1 GB/s"
    assert lines[-1] == "1 fail, 0 warn, 2 ok"
