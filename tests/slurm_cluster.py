"""A real Slurm cluster on this machine, for integration tests: munged, slurmctld and two
slurmd (``slurmd -N n1`` / ``-N n2``), Debian's slurm-wlm 22.05, never a mock.

Everything lives in one temporary directory (config, state, spools, logs, the munge key
and socket) and every daemon runs in the foreground as this process's child, so
:meth:`SlurmCluster.close` ends them all and removes the directory; nothing is written
to /etc or /run. Each node has its own loopback address (NodeAddr 127.0.0.4x) and port;
the controller listens on a free port. There is no accounting (``squeue --json`` while a
job is known to the controller, then ``JobCompType=jobcomp/filetxt``), processes are
tracked by ``proctrack/linuxproc`` (cgroups may not be usable in a container), and each
node offers ``gpu:1`` as a count without device files: there are no GPUs here, so jobs
run on CPUs (gloo) while Slurm still schedules GPUs as on a GPU cluster.

Clients (``sbatch``/``squeue``/``scancel`` run by a test user over SSH) find the cluster
through ``SLURM_CONF``: :attr:`SlurmCluster.setup_line` is what a login host's inventory
``setup`` adds.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from console.inventory import Inventory

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
MUNGED = "/usr/sbin/munged"
NODES = ("n1", "n2")
NODE_ADDRESS = "127.0.0.{}"
FIRST_NODE_OCTET = 41
CPUS_PER_NODE = 2


def unavailable_reason() -> str | None:
    """Why a Slurm cluster cannot be started here, or None when it can."""
    for program in (SLURMCTLD, SLURMD, MUNGED, "/usr/bin/sbatch"):
        if not os.path.exists(program):
            return f"{program} is not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the Slurm cluster runs slurmd (which starts jobs as other users) as root"
    return None


def _free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


class SlurmCluster:
    """munged + slurmctld + slurmd n1, n2 under ``root`` (see the module doc)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="distconsole-slurm-"))
        self.root.chmod(0o755)  # test users read slurm.conf and reach the munge socket
        self.conf = self.root / "slurm.conf"
        self.jobcomp = self.root / "jobcomp.txt"
        self.munge_dir = self.root / "munge"
        self.munge_socket = self.munge_dir / "munge.socket.2"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.node_addresses = {
            name: NODE_ADDRESS.format(FIRST_NODE_OCTET + i) for i, name in enumerate(NODES)
        }
        try:
            self._start_munge()
            self._write_config()
            self._start("slurmctld", [SLURMCTLD, "-D", "-i", "-f", str(self.conf)])
            for name in NODES:
                self._start(f"slurmd-{name}", [SLURMD, "-D", "-N", name, "-f", str(self.conf)])
            self.wait_idle(timeout=60)
        except BaseException:
            self.close()
            raise

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def setup_line(self) -> str:
        return f"export SLURM_CONF={self.conf}"

    def _start_munge(self) -> None:
        munge = pwd.getpwnam("munge")
        self.munge_dir.mkdir(mode=0o755)
        key = self.munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        for path in (self.munge_dir, key):
            os.chown(path, munge.pw_uid, munge.pw_gid)
        self._start(
            "munged",
            [
                "runuser", "-u", "munge", "--", MUNGED, "-F",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--log-file={self.munge_dir / 'munged.log'}",
                f"--pid-file={self.munge_dir / 'munged.pid'}",
                f"--seed-file={self.munge_dir / 'munged.seed'}",
            ],
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not self.munge_socket.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"munged did not create {self.munge_socket}")
            time.sleep(0.05)

    def _write_config(self) -> None:
        hostname = socket.gethostname()
        (self.root / "state").mkdir()
        for name in NODES:
            (self.root / f"tmp-{name}").mkdir(mode=0o1777)
            (self.root / f"tmp-{name}").chmod(0o1777)
        ctld_port = _free_port()
        lines = [
            "ClusterName=distconsoletest",
            f"SlurmctldHost={hostname}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool-%n'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'slurmd-%n.log'}",
            # Each node's own /tmp: srun --mpi=pmix makes its client directory there,
            # named by job and step only, so two slurmd on one machine would collide.
            f"TmpFS={self.root / 'tmp-%n'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp}",
            "GresTypes=gpu",
            "KillWait=2",
            "InactiveLimit=0",
            "SlurmdTimeout=30",
        ]
        for name, address in self.node_addresses.items():
            lines.append(
                f"NodeName={name} NodeHostname={hostname} NodeAddr={address} "
                f"Port={_free_port(address)} CPUs={CPUS_PER_NODE} Gres=gpu:1 State=UNKNOWN"
            )
        lines.append(
            f"PartitionName=test Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP"
        )
        self.conf.write_text("\n".join(lines) + "\n")
        # Slurm drops a GPU without a device file; these empty files name "the GPU"
        # of each node (nothing opens them: jobs here run on CPUs).
        gres = ["AutoDetect=off"]
        for name in NODES:
            device = self.root / f"gpu-{name}"
            device.touch()
            gres.append(f"NodeName={name} Name=gpu File={device}")
        (self.root / "gres.conf").write_text("\n".join(gres) + "\n")
        self.jobcomp.touch()

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.stderr", "wb")  # noqa: SIM115 - closed with the process
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        log.close()

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        text = ""
        for path in (self.root / f"{name}.stderr", self.root / f"{name}.log"):
            if path.exists():
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def command(self, *argv: str, check: bool = True) -> str:
        result = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
        return result.stdout

    def wait_idle(self, timeout: float) -> None:
        """Until both nodes are idle (registered and free)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            last = self.command("sinfo", "-h", "-N", "-o", "%N %t", check=False)
            states = dict(line.split() for line in last.splitlines() if line.strip())
            if all(states.get(n) == "idle" for n in NODES):
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"nodes not idle after {timeout}s: {last!r}\n{self.log_tail('slurmctld')}"
        )

    def job_processes(self, slurm_id: str) -> list[psutil.Process]:
        """Every process on this machine running for the Slurm job (its environment names it)."""
        found = []
        for proc in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error):
                if proc.environ().get("SLURM_JOB_ID") == slurm_id:
                    found.append(proc)
        return found

    def close(self) -> None:
        self._drain_jobs()
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 15)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                proc.wait(timeout=5)
        self._kill_stepds()
        shutil.rmtree(self.root, ignore_errors=True)

    def _drain_jobs(self, timeout: float = 15) -> None:
        """Cancel every job and wait until the controller lists none. A slurmd told to stop
        while a job of its node is still being cancelled sat out close()'s whole 15 s
        wait for SIGKILL (test_slurm_only_nodes' teardown took 19 s); once the controller
        has let the jobs go, every daemon stops within 2-3 s."""
        ctld = self.procs.get("slurmctld")
        if ctld is None or ctld.poll() is not None:
            return
        deadline = time.monotonic() + timeout
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            listed = self.command("squeue", "-h", "-o", "%i", check=False).split()
            if listed:
                self.command("scancel", *listed, check=False)
            while listed and time.monotonic() < deadline:
                time.sleep(0.1)
                listed = self.command("squeue", "-h", "-o", "%i", check=False).split()

    def _kill_stepds(self) -> None:
        """slurmstepd of a job still running when slurmd went away (a failed test), and the
        job's tasks under it. Neither its command line (``slurmstepd: [1.batch]``) nor its
        environment (blanked by the process title) names this cluster; it keeps this
        cluster's slurmd log open, so a file descriptor into :attr:`root` does."""
        inside = f"{self.root}/"
        stepds = []
        for proc in psutil.process_iter(["name"]):
            with contextlib.suppress(psutil.Error, OSError):
                if proc.info["name"] == "slurmstepd" and any(
                    os.readlink(fd).startswith(inside)
                    for fd in Path(f"/proc/{proc.pid}/fd").iterdir()
                ):
                    stepds.append(proc)
        doomed = {proc.pid: proc for proc in stepds}
        for stepd in stepds:
            with contextlib.suppress(psutil.Error):
                doomed.update((child.pid, child) for child in stepd.children(recursive=True))
        for proc in doomed.values():
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(list(doomed.values()), timeout=10)


@contextlib.contextmanager
def slurm_with_login(root: Path) -> Iterator[tuple[SlurmCluster, Inventory]]:
    """A Slurm cluster and one sshd login host whose setup reaches it, with the
    nvidia-smi stand-in on its PATH; the inventory names the host in its ``slurm:``."""
    from gpu_standin import readable_standin_dir
    from sshd_cluster import SETUP_LINE, SshdCluster

    from console.inventory import load

    slurm = SlurmCluster()
    try:
        sshd = SshdCluster(root / "sshd", 1)
        try:
            standin = readable_standin_dir()
            path = sshd.write_inventory(
                setup=f'{SETUP_LINE} && {slurm.setup_line} && export PATH="{standin}:$PATH"'
            )
            with path.open("a") as f:
                f.write(f"slurm:\n  login: {sshd.hosts[0].name}\n  partition: test\n")
            yield slurm, load(path)
        finally:
            sshd.close()
    finally:
        slurm.close()
