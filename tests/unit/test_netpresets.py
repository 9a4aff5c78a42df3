"""Network presets (--net): the variables each sets, the user's env winning, `plan`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from console.errors import JobSpecError
from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.preflight.probe import preflight_hosts
from console.jobs.spec import make_spec
from console.transport.pool import ClusterConnections

INV = Inventory(
    path="hosts.yaml",
    hosts=(
        Host(name="n0", address="10.0.0.1", gpus=1, interface="ens1"),
        Host(name="n1", address="10.0.0.2", gpus=1, interface="ens1"),
    ),
)
TCP = {
    "NCCL_SOCKET_IFNAME": "ens1",
    "GLOO_SOCKET_IFNAME": "ens1",
    "NCCL_IB_DISABLE": "1",
    "OMPI_MCA_btl_tcp_if_include": "ens1",
    "OMPI_MCA_oob_tcp_if_include": "ens1",
    "HOROVOD_GLOO_IFACE": "ens1",
}
PRESET_VARS = {*TCP, "NCCL_IB_HCA", "NCCL_IB_GID_INDEX"}


def env_of(kind: str, **fields: object) -> dict[str, str]:
    spec = make_spec(kind=kind, program="t.py", **fields)
    return dict(plan(spec, INV, job_id="job-1").launches[0].env)


@pytest.mark.parametrize("kind", ["ddp", "mpi", "horovod", "ps"])
def test_tcp_pins_every_library_to_the_interface(kind: str) -> None:
    env = env_of(kind, net="tcp")
    assert {k: env[k] for k in TCP} == TCP


def test_ib_and_roce_set_the_hcas_and_roce_its_gid_index() -> None:
    ib = env_of("ddp", net="ib", ib_hca="mlx5_0,mlx5_1")
    assert ib["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert ib["NCCL_SOCKET_IFNAME"] == "ens1"  # NCCL's bootstrap stays on the interface
    assert "NCCL_IB_DISABLE" not in ib and "NCCL_IB_GID_INDEX" not in ib
    roce = env_of("ddp", net="roce", ib_hca="mlx5_0")
    assert (roce["NCCL_IB_GID_INDEX"], roce["NCCL_IB_HCA"]) == ("3", "mlx5_0")


def test_auto_forces_nothing() -> None:
    env = env_of("mpi")
    # (plan_mpi's own default NCCL_SOCKET_IFNAME from the interface predates presets)
    assert not (PRESET_VARS - {"NCCL_SOCKET_IFNAME"}) & set(env)


def test_the_users_env_wins_over_the_preset() -> None:
    env = env_of("ddp", net="tcp", env={"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "eth9"})
    assert (env["NCCL_IB_DISABLE"], env["NCCL_SOCKET_IFNAME"]) == ("0", "eth9")
    assert env["GLOO_SOCKET_IFNAME"] == "ens1"


def test_tcp_without_an_interface_and_bad_values_name_the_field() -> None:
    bare = Inventory(path="h", hosts=(Host(name="a", address="a", gpus=1),))
    with pytest.raises(JobSpecError) as err:
        plan(make_spec(kind="ddp", program="t.py", net="tcp"), bare, job_id="job-1")
    # The field to fill, in words of neither surface (the form: under Interface).
    assert err.value.field == "interface" and "--" not in err.value.detail
    with pytest.raises(JobSpecError) as err:
        make_spec(kind="ddp", program="t.py", net="ethernet")
    assert err.value.field == "net" and "auto, tcp, ib, roce" in str(err.value)
    with pytest.raises(JobSpecError) as err:
        make_spec(kind="ddp", program="t.py", ib_hca="mlx5_0; rm -rf /")
    assert err.value.field == "ib_hca"


def distconsole(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_plan_cli_shows_the_preset_and_its_env(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        "hosts:\n"
        "  - {name: n0, address: 10.0.0.1, gpus: 1}\n"
        "  - {name: n1, address: 10.0.0.2, gpus: 1}\n"
    )
    done = distconsole(
        "plan", hosts, "--kind", "mpi", "--net", "roce", "--interface", "ens1",
        "--ib-hca", "mlx5_0", "--", "a.out",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # An info line of its own, not a warning: nothing is wrong.
    assert "\nnet: roce on ens1 sets NCCL_SOCKET_IFNAME=ens1 " in done.stdout
    assert "warning: net" not in done.stdout
    assert "NCCL_IB_GID_INDEX=3" in done.stdout and "--env win over these" in done.stdout
    as_json = distconsole(
        "plan", hosts, "--kind", "ddp", "--net", "tcp", "--interface", "ens1", "--json",
        "--", "t.py",
    )  # fmt: skip
    as_plan = json.loads(as_json.stdout)
    env = as_plan["launches"][1]["env"]
    [note] = as_plan["notes"]
    assert note.startswith("net: tcp on ens1 sets NCCL_SOCKET_IFNAME=ens1 "), note
    assert not any("net:" in w for w in as_plan["warnings"]), as_plan["warnings"]
    assert env["NCCL_IB_DISABLE"] == "1" and env["GLOO_SOCKET_IFNAME"] == "ens1"
    bad = distconsole("plan", hosts, "--kind", "ddp", "--net", "fast", "--", "t.py")
    assert bad.returncode == 2 and "--net" in bad.stderr, bad.stderr
    # No interface anywhere: the CLI names the option to give.
    bare = distconsole("plan", hosts, "--kind", "ddp", "--net", "tcp", "--", "t.py")
    assert bare.returncode == 2, bare.stderr
    assert "--interface: the tcp network preset needs an interface: give one" in bare.stderr


async def test_preflight_names_the_host_whose_interface_is_missing() -> None:
    """The real probe on this machine (local transport) for two inventory hosts: one
    asks for lo (present, up, 127.0.0.1), the other for an interface that is not there."""
    hosts = (
        Host(name="good", address="local", interface="lo", python=sys.executable),
        Host(name="bad", address="local", interface="nosuch0", python=sys.executable),
    )
    async with ClusterConnections(hosts) as pool:
        await pool.wait_settled()
        report = await preflight_hosts(pool, hosts)
    (finding,) = [f for f in report.errors if f.check == "interface"]
    assert finding.host == "bad" and "nosuch0 not found" in finding.message
    assert "--net" in finding.message
    lo = report.probes["good"].interface_state
    assert lo is not None and lo.up is True and "127.0.0.1" in lo.addresses
