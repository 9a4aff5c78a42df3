"""`distconsole validate` names a slow link between two hosts that are fine alone.

4 real sshd hosts, each sshd inside a network namespace of its own (``ip netns exec``),
each namespace on a bridge with an address in 10.231.N.0/24 (only addresses this test
creates). node0 and node1 also share a direct veth pair, limited both ways with
``tc qdisc add dev VETH root tbf rate 20mbit burst 32kbit latency 400ms``, and route each
other's address over it: node0<->node1 is slow, every other path is not.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd_cluster import SSHD, SshdCluster, unavailable_reason

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

VALIDATE = (sys.executable, "-m", "console", "validate")
SMALL = ("--allreduce-mb", "1")  # 1 MiB: about 0.4 s a step over the 20 Mbit/s wire
REPO = Path(__file__).resolve().parents[2]
TAG = f"dcv{os.getpid() % 100000}"  # interface names stay under 15 characters
SUBNET = f"10.231.{os.getpid() % 250}"


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def in_ns(ns: str, *argv: str) -> None:
    sh("ip", "netns", "exec", ns, *argv)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        pytest.skip("needs root, ip and tc for network namespaces")
    made = SshdCluster(tmp_path_factory.mktemp("validate-link"), 4)
    spaces = [f"{TAG}n{i}" for i in range(4)]
    bridge = f"{TAG}br"
    try:
        sh("ip", "link", "add", bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", bridge)
        sh("ip", "link", "set", bridge, "up")
        for i, ns in enumerate(spaces):
            sh("ip", "netns", "add", ns)
            sh(
                "ip",
                "link",
                "add",
                f"{TAG}v{i}",
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                ns,
            )
            sh("ip", "link", "set", f"{TAG}v{i}", "master", bridge, "up")
            in_ns(ns, "ip", "addr", "add", f"{SUBNET}.{10 + i}/24", "dev", "eth0")
            in_ns(ns, "ip", "link", "set", "eth0", "up")
            in_ns(ns, "ip", "link", "set", "lo", "up")
            in_ns(ns, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0")
        # node0 <-> node1 over their own slow wire.
        sh("ip", "link", "add", "slow01", "netns", spaces[0], "type", "veth", "peer", "name",
           "slow10", "netns", spaces[1])  # fmt: skip
        for ns, dev, peer in ((spaces[0], "slow01", 11), (spaces[1], "slow10", 10)):
            in_ns(ns, "sysctl", "-qw", f"net.ipv4.conf.{dev}.rp_filter=0")
            in_ns(ns, "ip", "link", "set", dev, "up")
            in_ns(ns, "ip", "route", "add", f"{SUBNET}.{peer}/32", "dev", dev)
            in_ns(ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", "20mbit",
                  "burst", "32kbit", "latency", "400ms")  # fmt: skip
        for i, (host, ns) in enumerate(zip(made.hosts, spaces, strict=True)):
            made._kill_sshd(host)
            host.address = f"{SUBNET}.{10 + i}"
            host.config_path.write_text(made._sshd_config(host))
            assert host._log is not None
            host.process = subprocess.Popen(
                ["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", str(host.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=host._log,
                stderr=host._log,
            )
            assert made._wait_listening(host, timeout=20), host.log_path.read_text()[-2000:]
        made._write_known_hosts()
        made.write_inventory()
        yield made
    finally:
        made.close()
        for ns in spaces:
            with contextlib.suppress(subprocess.CalledProcessError):
                sh("ip", "netns", "del", ns)
        with contextlib.suppress(subprocess.CalledProcessError):
            sh("ip", "link", "del", bridge)


def test_the_tbf_limited_link_is_named_while_both_its_hosts_are_ok(
    cluster: SshdCluster, tmp_path: Path
) -> None:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
    done = subprocess.run(
        [*VALIDATE, str(cluster.inventory_path), "--json", "--quick", "--parallel", "4", *SMALL],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=env,
    )
    document = json.loads(done.stdout)
    links = {tuple(sorted(x["hosts"])): x for x in document["links"]}
    said = {k: (x["state"], x["busbw_gbps"], x["reasons"]) for k, x in links.items()}
    slow = [k for k, x in links.items() if x["state"] != "ok"]
    assert slow == [("node0", "node1")], (said, done.stderr)
    assert links[("node0", "node1")]["reasons"][0].startswith("slow link: node"), said
    hosts = {r["host"]: r["state"] for r in document["rows"] if r["gpu"] is None}
    assert hosts == dict.fromkeys(["node0", "node1", "node2", "node3"], "ok"), document
    assert done.returncode in (0, 1)
