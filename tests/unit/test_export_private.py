"""Issue 23 item 1: ``export --out`` writes files that hold the job's environment (an
``--env`` token included) private to their owner whatever the umask (600; an sbatch
script 700). The real CLI in a subprocess, run under umask 022."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOSTS_YAML = "hosts:\n  - {name: n0, address: 10.0.0.1, gpus: 2}\n"


def test_exported_files_are_private(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS_YAML)
    out = tmp_path / "out"
    modes = {}
    for to in (("sbatch", "--partition", "gpu"), ("kubeflow", "--image", "img:1")):
        argv = [
            *(sys.executable, "-m", "console", "export", str(hosts), "--to", *to),
            *("--kind", "ddp", "--env", "HF_TOKEN=hf_export_secret", "--out", str(out)),
            *("--", "train.py"),
        ]
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            preexec_fn=lambda: os.umask(0o022),
        )
        assert done.returncode == 0, done.stderr
        path = Path(done.stdout.strip())
        assert "hf_export_secret" in path.read_text()
        modes[path.suffix] = stat.S_IMODE(path.stat().st_mode)
    assert modes == {".sbatch": 0o700, ".yaml": 0o600}
