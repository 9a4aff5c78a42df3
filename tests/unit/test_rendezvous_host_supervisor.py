"""Issue 31 item 4 without a network: the policy of a job with a rendezvous host (its
store trains nothing: training hosts alone count, the store's end fails the job naming
it, the store is stopped once training ended, the host's loss is named), the store's
round as the leader reads it, a follower's probe of the store's port, and the real
store program answering torch's c10d rendezvous client."""

from __future__ import annotations

import json
import pickle
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from console.hostprogs.supervisor.policy import HostSilent, JobPolicy, PolicyProcess, ProcessEnded
from console.hostprogs.supervisor.rendezvous import sv_store_answer, sv_store_round
from console.hostprogs.supervisor.source import supervisor_source

T0 = 1000.0


def start_store(
    tmp_path: Path, run_id: str, *extra: str
) -> tuple[subprocess.Popen[str], int, Path]:
    """The real store program on a free loopback port, once it answers: (process, port,
    its round file). ``extra``: more of its options."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    program = Path(__file__).resolve().parents[2] / "console/hostprogs/rendezvous_store.py"
    rounds = tmp_path / "rendezvous-round.json"
    store = subprocess.Popen(
        [sys.executable, str(program), "--address", "127.0.0.1", "--port", str(port),
         "--run-id", run_id, "--round-file", str(rounds), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while sv_store_answer("127.0.0.1", port) is not None:
        if store.poll() is not None or time.monotonic() > deadline:
            store.kill()
            raise AssertionError(store.communicate())
        time.sleep(0.2)
    return store, port, rounds


def policy(min_hosts: int = 2) -> JobPolicy:
    procs = [PolicyProcess("node3", "rendezvous-0", "rendezvous")] + [
        PolicyProcess(f"node{i}", f"torchrun-{i}", "torchrun", (i,)) for i in range(3)
    ]
    found = JobPolicy(procs, "ddp", True, min_hosts=min_hosts, master_host="node3")
    found.rendezvous_host = "node3"
    return found


def test_training_hosts_alone_count_and_the_store_is_stopped_at_the_end() -> None:
    job = policy()
    assert job.hosts == ["node0", "node1", "node2"]
    # The first host lost: a scale-down like any other (it holds nothing but ranks).
    assert not job.feed(HostSilent("node0", "host lost", T0))
    assert [d["host"] for d in job.scale_downs] == ["node0"]
    assert job.hosts_now == ["node1", "node2"] and job.verdict is None
    assert not job.feed(ProcessEnded("node1", "torchrun-1", 0, T0 + 5))
    # The last training process ended: succeeded, and the store must be stopped now.
    assert job.feed(ProcessEnded("node2", "torchrun-2", 0, T0 + 6))
    assert job.verdict == "succeeded" and not job.over
    # The store ends by that stop: no failure, the job is over.
    assert not job.feed(ProcessEnded("node3", "rendezvous-0", 143, T0 + 7, "SIGTERM"))
    assert job.over and job.verdict == "succeeded" and job.first_failure is None


def test_the_stores_end_mid_job_fails_it_naming_the_rendezvous_host() -> None:
    for code in (0, 1, None):
        job = policy()
        assert job.feed(ProcessEnded("node3", "rendezvous-0", code, T0))
        assert job.verdict == "failed"
        failure = job.first_failure
        assert failure is not None and failure.host == "node3"
        assert failure.reason.startswith("the rendezvous store on node3 exited ("), failure
        # The ranks' ends that follow (their agents lost the store) are not the cause.
        job.feed(ProcessEnded("node0", "torchrun-0", 1, T0 + 1))
        assert job.first_failure is failure


def test_a_stop_asked_for_ends_the_store_without_a_failure() -> None:
    job = policy()
    assert job.feed(ProcessEnded("node3", "rendezvous-0", 143, T0, "SIGTERM", True))
    assert job.verdict == "stopped" and job.first_failure is None


def test_the_rendezvous_hosts_loss_is_named_as_the_cause() -> None:
    # A follower judging alone: the leader's processes count as one, lost (peers.silent).
    follower = JobPolicy([PolicyProcess("node1", "torchrun-1", "torchrun", (1,))], "ddp")
    follower.rendezvous_host = "node3"
    follower.processes.append(PolicyProcess("node3", "(leader)", "leader"))
    assert follower.feed(HostSilent("node3", "connection lost (the console lost it)", T0))
    assert follower.verdict == "failed" and follower.first_failure is not None
    assert follower.first_failure.reason == (
        "rendezvous host node3 lost: connection lost (the console lost it)"
    )


def test_the_leader_reads_the_stores_round(tmp_path: Path) -> None:
    assert sv_store_round(str(tmp_path)) is None
    path = tmp_path / "rendezvous-round.json"
    path.write_text(json.dumps({"round": 2, "complete": False, "agents": 3}))
    assert sv_store_round(str(tmp_path)) is None  # a round still forming says nothing
    path.write_text(json.dumps({"round": 3, "complete": True, "agents": 2}))
    assert sv_store_round(str(tmp_path)) == (3, 2)
    path.write_text("{not json")
    assert sv_store_round(str(tmp_path)) is None


def test_a_closed_port_does_not_answer() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert sv_store_answer("127.0.0.1", port) is not None  # bound, not listening
        sock.listen()
        assert sv_store_answer("127.0.0.1", port) is None


def test_the_supervisor_source_holds_the_rendezvous_part() -> None:
    source = supervisor_source()
    assert source.index("class SvRendezvous") < source.index("class SvElastic")


def test_the_store_program_serves_torchs_c10d_rendezvous(tmp_path: Path) -> None:
    """The real program and torch's own c10d backend as an agent uses it (is_host=0):
    the round torch writes is what the program reports, and SIGTERM ends it cleanly."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        _NodeDesc,
        _RendezvousState,
    )

    store, port, rounds = start_store(tmp_path, "job-1")
    try:
        deadline = time.monotonic() + 60
        params = RendezvousParameters(
            "c10d", f"127.0.0.1:{port}", "job-1", 1, 2, is_host="0", read_timeout="10"
        )
        backend, _store = create_backend(params)
        state = _RendezvousState()
        state.round, state.complete = 4, True
        state.participants = {_NodeDesc("10.0.0.10", 1, 0): 0, _NodeDesc("10.0.0.11", 2, 0): 1}
        # As torch stamps them (dynamic_rendezvous: datetime.now(timezone.utc)).
        state.deadline = datetime.now(UTC)
        state.last_heartbeats = {node: datetime.now(UTC) for node in state.participants}
        backend.set_state(pickle.dumps(state))
        while sv_store_round(str(tmp_path)) != (4, 2):
            assert time.monotonic() < deadline, rounds.read_text() if rounds.exists() else None
            time.sleep(0.2)
        addresses = json.loads(rounds.read_text())["addresses"]
        assert addresses == ["10.0.0.10", "10.0.0.11"]
        # torch takes a leaving agent out of the complete round: the round was formed
        # with 2, which is what the leader compares with the hosts it still hears.
        del state.participants[_NodeDesc("10.0.0.10", 1, 0)]
        backend.set_state(pickle.dumps(state), backend.get_state()[1])
        while json.loads(rounds.read_text()).get("agents_now") != 1:
            assert time.monotonic() < deadline, rounds.read_text()
            time.sleep(0.2)
        assert sv_store_round(str(tmp_path)) == (4, 2)
    finally:
        store.terminate()
        out, err = store.communicate(timeout=30)
    assert store.returncode == 0, err
    assert f"rendezvous store listening on 127.0.0.1:{port}" in out
    assert "rendezvous store stopped" in out


def test_a_scan_that_finds_the_rendezvous_host_gone_names_it_so() -> None:
    """The followers judged alone, the leader's host (the rendezvous host, job.json's
    ``rendezvous_host``) does not answer: the settled failure names its role."""
    from dataclasses import replace

    from tests.unit.test_job_final_states import followers_alone, job

    document = {"id": "job-1", "hosts": ["n0", "n1", "n2"], "rendezvous_host": "n0"}
    copies = [replace(c, document=document) for c in followers_alone()]
    found = job(*copies, unreachable={"n0": "n0: connection refused"})
    assert found.rendezvous_host == "n0"
    first = (found.failure_text() or "").splitlines()[0]
    assert first.startswith("n0: rendezvous host lost (supervision lost on n0 at "), first


class _Forged:
    """A pickle that would run a command when loaded: what another user who reaches the
    store's port (torch's TCPStore takes no credentials) could write as the state."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_forged_state_in_the_store_is_refused_not_run(tmp_path: Path) -> None:
    """Another user writes a pickle that calls os.system under the rendezvous key: the
    store program reads it with torch's state classes alone, records an error and runs
    nothing."""
    import base64

    from torch.distributed import TCPStore

    store, port, rounds = start_store(tmp_path, "job-2")
    marker = tmp_path / "ran"
    try:
        deadline = time.monotonic() + 60
        client = TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False)
        client.set("torch.rendezvous.job-2", base64.b64encode(pickle.dumps(_Forged(marker))))
        while not rounds.exists() or "error" not in json.loads(rounds.read_text()):
            assert time.monotonic() < deadline, rounds.read_text() if rounds.exists() else None
            time.sleep(0.2)
        assert "os" in json.loads(rounds.read_text())["error"]
        assert not marker.exists()
        assert store.poll() is None  # the store serves on
    finally:
        store.terminate()
        store.communicate(timeout=30)
    assert not marker.exists()
