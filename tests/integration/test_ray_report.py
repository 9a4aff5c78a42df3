"""Issue 23 item 11: the Ray head in ``distconsole report`` of a Ray job on real sshd
hosts with real Ray (2.60). The head host's process is the driver's script, which also
runs ``ray start --head``: the bundle must hold the head's own Ray logs (GCS server,
dashboard, autoscaler monitor, the workers' output), not only its raylet's, and the
summary must name the head among the processes. One Ray cluster start, ~30 s."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_ray import dc, job_state, launch, remove_temp_dirs

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

RAY_LOGS = "ray-tmp/session_latest/logs"


def test_report_of_a_ray_job_holds_the_head(sshd_cluster, tmp_path: Path) -> None:
    cluster = sshd_cluster(n=2)
    result = launch(tmp_path, cluster, "--name", "ray-report", "--", "example:ray", "--steps", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    job = job_state(tmp_path, cluster)
    out = tmp_path / "bundle"
    try:
        report = dc(tmp_path, "report", str(cluster.inventory_path), job["id"], "--out", str(out))
        assert report.returncode == 0, report.stderr[-3000:]
        print(report.stdout)
        head = out / "hosts/node0" / RAY_LOGS
        node = out / "hosts/node1" / RAY_LOGS
        # The head's own Ray processes: GCS server, dashboard, the autoscaler's monitor.
        for name in ("gcs_server.out", "dashboard.log", "monitor.log", "raylet.out"):
            assert (head / name).is_file(), sorted(p.name for p in head.iterdir())
        # The workers' output on both nodes (the tasks ran on both; log_to_driver or not).
        for logs in (head, node):
            assert any(logs.glob("worker-*.out")), sorted(p.name for p in logs.iterdir())
        assert (node / "raylet.out").is_file()
        assert not (node / "gcs_server.out").exists()  # only the head runs a GCS
        # The summary names the head (`ray start --head`, run inside driver-0's script).
        summary = (out / "summary.txt").read_text()
        assert "node0 raynode-0 (Ray head" in summary, summary
        assert f"hosts/node0/{RAY_LOGS}/" in summary, summary
    finally:
        remove_temp_dirs(cluster, job["id"])
