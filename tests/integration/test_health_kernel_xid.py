"""An Xid line written into the machine's REAL kernel log (as root, ``/dev/kmsg``) is read
by a ``local`` host's sampler and fails the GPU at that PCI address.

The GPU is the nvidia-smi STAND-IN replaying the real H200 capture, from a copy written
here with ``pci.bus_id`` changed to an address picked at random from a range no capture
uses, so that the Xid (which stays in the kernel log) marks no other test's GPU.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from gpu_standin import readable_standin_dir

from console.inventory import Host
from console.probe.health import host_verdicts
from console.probe.monitor import ClusterMonitor
from console.transport.pool import ClusterConnections

DATA = Path(__file__).resolve().parent.parent / "data" / "nvidia-smi"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/dev/kmsg", os.W_OK), reason="writes /dev/kmsg as root"
)


def capture_at(tmp_path: Path, bus: int) -> Path:
    text = (DATA / "csv_h200_query-gpu.csv").read_text()
    assert text.count("00000000:83:00.0") == 1
    (tmp_path / "xid_query-gpu.csv").write_text(
        text.replace("00000000:83:00.0", f"00000000:{bus:02x}:00.0")
    )
    (tmp_path / "xid_compute-apps.csv").write_text((DATA / "csv_h200_compute-apps.csv").read_text())
    return tmp_path / "xid"


async def one_view(host: Host) -> object:
    pool = ClusterConnections([host], reconnect=False)
    monitor = ClusterMonitor(pool, interval=1.0, once=True)
    try:
        return (await monitor.first_frame(60))[host.name]
    finally:
        await monitor.close()
        await pool.close()


async def test_xid_79_in_the_kernel_log_fails_the_local_gpu(tmp_path: Path) -> None:
    bus = random.randint(0xE0, 0xFE)
    capture = capture_at(tmp_path, bus)
    with open("/dev/kmsg", "w") as kmsg:
        kmsg.write(
            f"<3>NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid=1, GPU has fallen off the bus.\n"
        )
    standin = readable_standin_dir()
    host = Host(
        name="local",
        address="local",
        setup=f"export PATH={standin}:$PATH NVSMI_STANDIN_CAPTURE={capture}",
    )
    view = await one_view(host)
    rows = host_verdicts(view)  # type: ignore[arg-type]
    (gpu,) = [v for v in rows if v.gpu == 0]
    assert gpu.state == "fail"
    assert any(r.startswith("Xid 79 (GPU has fallen off the bus) at ") for r in gpu.reasons)
    assert view.sample.health.xid_source == "kmsg"  # type: ignore[attr-defined]
