"""Issue 23 item 1 under ``--scheduler slurm`` (a real Slurm cluster, its login host a
real sshd host whose home is open to everyone): the job's directory on the login host
is private (700) and its batch script, which holds the job's environment, 600; neither
is readable by another user (``nobody``)."""

from __future__ import annotations

import stat
import subprocess

import pytest

from tests.integration.test_private_files import JOBS
from tests.integration.test_slurm_jobs import Env, slurm, submitted

__all__ = ["slurm"]  # the module's Slurm cluster fixture, shared from test_slurm_jobs

pytestmark = [pytest.mark.sshd, pytest.mark.slow]


def test_slurm_job_directory_and_script_are_private(slurm: Env) -> None:
    login = slurm.sshd.hosts[0]
    login.home.chmod(0o755)
    token = "hf_slurm_private_token"
    done = slurm.launch(
        "--nodes", "1", "--env", f"HF_TOKEN={token}", program=("example:ddp", "--steps", "1")
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_dir = login.home / JOBS / submitted(done)
    scripts = [p for p in job_dir.iterdir() if p.is_file() and token in p.read_text()]
    assert scripts, sorted(p.name for p in job_dir.iterdir())
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
    for script in scripts:
        assert stat.S_IMODE(script.stat().st_mode) & 0o077 == 0, script.name
        refused = subprocess.run(
            ["cat", str(script)], user="nobody", capture_output=True, text=True
        )
        assert refused.returncode != 0 and token not in refused.stdout
