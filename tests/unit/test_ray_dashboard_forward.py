"""A Ray job's dashboard, offered as a forward: read back from the head's `ray start`
flags (default port, the spec's port, a dashboard listening everywhere), by `plan`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from console.inventory import Host, Inventory
from console.jobs.plan.planner import plan
from console.jobs.plan.ray import dashboard_target
from console.jobs.spec import make_spec

REPO = Path(__file__).resolve().parents[2]


def inventory() -> Inventory:
    hosts = tuple(Host(name=f"n{i}", address=f"10.0.0.{i + 1}") for i in range(2))
    return Inventory(path="hosts.yaml", hosts=hosts)


def test_dashboard_target_of_a_ray_plan() -> None:
    default = plan(make_spec(kind="ray", program="example:ray", master_port=4000), inventory())
    assert dashboard_target(default) == ("n0", "localhost", 4001)
    chosen = make_spec(kind="ray", program="example:ray", master_port=4000, ray_dashboard_port=8265)
    assert dashboard_target(plan(chosen, inventory())) == ("n0", "localhost", 8265)
    everywhere = make_spec(
        kind="ray", program="example:ray", master_port=4000, ray_dashboard_host="0.0.0.0"
    )
    assert dashboard_target(plan(everywhere, inventory())) == ("n0", "localhost", 4001)
    on_nic = make_spec(
        kind="ray", program="example:ray", master_port=4000, ray_dashboard_host="10.0.0.1"
    )
    assert dashboard_target(plan(on_nic, inventory())) == ("n0", "10.0.0.1", 4001)
    ddp = plan(make_spec(kind="ddp", program="example:ddp", master_port=4000), inventory())
    assert dashboard_target(ddp) is None


def test_plan_command_offers_the_dashboard_forward(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        "hosts:\n  - name: n0\n    address: 10.0.0.1\n  - name: n1\n    address: 10.0.0.2\n"
    )
    argv = [sys.executable, "-m", "console", "plan", str(hosts), "--kind", "ray",
            "--master-port", "4000", "--", "example:ray"]  # fmt: skip
    text = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert f"distconsole forward {hosts} n0:4001 --local-port 4001" in text.stdout
    as_json = subprocess.run([*argv[:5], "--json", *argv[5:]], cwd=REPO, capture_output=True,
                             text=True, timeout=60)  # fmt: skip
    assert json.loads(as_json.stdout)["dashboard_forward"] == {
        "host": "n0", "dest_host": "localhost", "port": 4001
    }  # fmt: skip
