"""Issue 31's recovery figure: the store program cuts a scale-down short with what the
leader supervisor knows (hostprogs/rendezvous_store.py ``revise``, the leader's
``rendezvous-hosts.json``). torch's own rendezvous classes and c10d backend, the real
store program; no hosts."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from console.hostprogs.rendezvous_store import revise
from console.hostprogs.supervisor.rendezvous import SV_STORE_HOSTS, SvRendezvous, sv_store_round
from tests.unit.test_rendezvous_host_supervisor import policy, start_store

torch_rdzv = pytest.importorskip("torch.distributed.elastic.rendezvous.dynamic_rendezvous")


def node(addr: str) -> Any:
    return torch_rdzv._NodeDesc(addr, 100, 0)


def state_of(participants: list[str], complete: bool, waiting: tuple[str, ...] = ()) -> Any:
    """A state as torch writes it: stamps in UTC, every node beating."""
    state = torch_rdzv._RendezvousState()
    state.round, state.complete = 5, complete
    state.participants = {node(a): rank for rank, a in enumerate(participants)}
    state.wait_list = {node(a) for a in waiting}
    now = datetime.now(UTC)
    state.last_heartbeats = {n: now for n in (*state.participants, *state.wait_list)}
    if not complete and len(participants) >= 2:
        state.deadline = now + timedelta(seconds=60)
    return state


def test_a_suspect_is_dropped_only_once_its_beats_stopped() -> None:
    state = state_of(["a", "b", "c"], complete=True)
    assert revise(state, {"a"}, set(), (2, 3), lambda n: False) == []  # still beating
    assert len(state.participants) == 3
    done = revise(state, {"a"}, set(), (2, 3), lambda n: True)
    assert done == ["dropped a (pid 100): its host is lost"]
    assert sorted(n.addr for n in state.participants) == ["b", "c"]
    assert node("a") not in state.last_heartbeats
    assert (state.round, state.complete) == (5, True)  # the survivors' round goes on


def test_the_last_participant_dropped_opens_the_next_round_as_torch_does() -> None:
    state = state_of(["a"], complete=True, waiting=("b", "c"))
    revise(state, {"a"}, set(), (2, 3), lambda n: True)
    assert (state.round, state.complete, state.participants) == (6, False, {})
    assert state.wait_list == {node("b"), node("c")}


def test_a_forming_round_closes_once_every_expected_host_joined() -> None:
    state = state_of(
        ["b"],
        complete=False,
    )
    assert revise(state, set(), {"b", "c"}, (2, 3), lambda n: True) == []  # c not in yet
    # c waits (torch's wait list: it would join at its next poll): it joins now, and so
    # does s (a spare: never expected before it joined), not a suspect's still beating.
    state = state_of(["b"], complete=False, waiting=("c", "s", "x"))
    done = revise(state, {"x"}, {"b", "c"}, (2, 3), lambda n: False)
    assert done == ["round 5 complete with 3 agents: every host expected"]
    assert {n.addr: r for n, r in state.participants.items()} == {"b": 0, "c": 1, "s": 2}
    assert state.wait_list == {node("x")}
    state = state_of(["b"], complete=False, waiting=("c", "s", "x"))
    assert revise(state, set(), {"b", "c"}, (2, 3), lambda n: True) == []  # 4 > N: torch's
    state = state_of(["b"], complete=False, waiting=("c",))
    assert revise(state, set(), {"b", "c"}, (3, 3), lambda n: True) == []  # below M
    state = state_of(["c", "b"], complete=False)
    assert revise(state, set(), {"b", "c", "d"}, (2, 3), lambda n: True) == []  # d expected
    done = revise(state, set(), {"b", "c"}, (2, 3), lambda n: True)
    assert done == ["round 5 complete with 2 agents: every host expected"]
    assert state.complete and state.deadline is None
    assert {n.addr: r for n, r in state.participants.items()} == {"b": 0, "c": 1}
    # Below torch's min_nodes no deadline runs: a drop there clears it, nothing closes.
    state = state_of(["a", "b"], complete=False)
    revise(state, {"a"}, {"b"}, (2, 3), lambda n: True)
    assert (state.complete, state.deadline) == (False, None)
    closed = state_of(["a", "b"], complete=True)
    closed.closed = True
    assert revise(closed, {"a"}, {"b"}, (2, 3), lambda n: True) == []


class Leader(SvRendezvous):
    """The rendezvous host's leader, its parts that tell the store."""

    def __init__(self, job_dir: Path) -> None:
        self.host, self.is_leader, self.job_dir = "node3", True, str(job_dir)
        self.cfg = {"rendezvous_host": "node3", "kind": "ddp"}
        self.policy = policy(min_hosts=2)
        self.unsupervised: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.init_rendezvous()

    def event(self, event: str, **details: Any) -> None:
        self.events.append((event, details))


def test_the_leader_tells_the_store_its_suspects_and_the_hosts_it_expects(
    tmp_path: Path,
) -> None:
    leader = Leader(tmp_path)
    told = tmp_path / SV_STORE_HOSTS
    leader.tell_store()
    assert json.loads(told.read_text()) == {
        "suspects": [],
        "expected": ["node0", "node1", "node2"],
    }
    leader.unsupervised["node0"] = {"at": 0.0, "why": "its connection closed"}
    leader.tell_store()
    leader.tell_store()  # unchanged: nothing more written or said
    assert json.loads(told.read_text()) == {"suspects": ["node0"], "expected": ["node1", "node2"]}
    assert [e for e, _ in leader.events] == ["rendezvous-told", "rendezvous-told"]


def test_the_survivors_meet_without_the_lost_agent_or_a_last_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3 real torch agents (torch's DynamicRendezvousHandler, c10d, is_host=0) form a
    round at the real store program; node0's agent goes silent, the leader's file
    suspects node0. torch alone would keep it 60 s (keep-alive 1 s x 60) and then hold
    the survivors' round 60 s (last call) for a third agent; with the store's revision
    the two survivors meet in a round of 2 within seconds."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # as jobs/plan/ddp.py
    hosts = tmp_path / "rendezvous-hosts.json"
    agents = [f"--agent=node{i}=10.0.0.1{i}" for i in range(3)]
    store, port, rounds = start_store(
        tmp_path,
        "job-r",
        "--hosts-file",
        str(hosts),
        "--min-nodes",
        "2",
        "--max-nodes",
        "3",
        *agents,
    )
    pool = ThreadPoolExecutor(3)
    handlers: list[Any] = []
    spare: Any = None
    try:
        for i in range(4):  # node0..node2, and a spare (node4, never expected)
            params = RendezvousParameters(
                "c10d", f"127.0.0.1:{port}", "job-r", 2, 3, local_addr=f"10.0.0.1{i}",
                is_host="0", read_timeout="30", join_timeout="300", keep_alive_interval="1",
                keep_alive_max_attempt="60", last_call_timeout="60",
            )  # fmt: skip
            backend, client = create_backend(params)
            handlers.append(torch_rdzv.create_handler(client, backend, params))
        spare = handlers.pop()
        first = [f.result(timeout=120) for f in [pool.submit(h.next_rendezvous) for h in handlers]]
        assert sorted(info.world_size for info in first) == [3, 3, 3]
        handlers[0]._stop_heartbeats()  # node0's agent is gone: no more beats
        hosts.write_text(json.dumps({"suspects": ["node0"], "expected": ["node1", "node2"]}))
        again = [pool.submit(h.next_rendezvous) for h in handlers[1:]]
        # Far below torch's own 60 + 60 s, however loaded the machine.
        after = [f.result(timeout=50) for f in again]
        assert sorted((info.rank, info.world_size) for info in after) == [(0, 2), (1, 2)]
        found = sv_store_round(str(tmp_path))
        assert found is not None and found[1] == 2, rounds.read_text()
        # A spare's agent then waits; the survivors' agents restart for it (torch's
        # num_nodes_waiting): the next round takes it in, though the leader does not
        # expect it yet (it counts a spare once its workers run).
        joining = pool.submit(spare.next_rendezvous)
        deadline = time.monotonic() + 50
        while spare._state_holder.state.round == 0 or not spare._state_holder.state.wait_list:
            assert not joining.done(), joining.result()
            assert time.monotonic() < deadline, "the spare's agent never waited"
            time.sleep(0.2)
        again = [pool.submit(h.next_rendezvous) for h in handlers[1:]]
        last = [f.result(timeout=50) for f in (*again, joining)]
        assert sorted(info.world_size for info in last) == [3, 3, 3]
    finally:
        for handler in [*handlers, spare]:
            if handler is not None:
                handler._stop_heartbeats()
        store.terminate()  # an agent still waiting then fails at once
        out, err = store.communicate(timeout=30)
        pool.shutdown(wait=True, cancel_futures=True)
    assert "rendezvous revised: dropped 10.0.0.10" in out, (out, err)
    assert "complete with 2 agents: every host expected" in out, out
