"""Hostile and huge inventories (issue 29 items 4 and 6): an alias bomb and deep nesting
are refused naming their line, with memory bounded; values ending in a newline are
refused at load naming the key; 10,000 hosts load through libyaml and plan, with the
same values as ruamel's round-trip reader."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.errors import InventoryError
from console.inventory import load
from console.inventory.formats import load_yaml
from console.inventory.yaml_reading import fast_document
from console.jobs.models import JobKind
from console.jobs.plan.planner import plan
from console.jobs.spec import JobSpec

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_hosts"


def alias_bomb(levels: int = 9) -> str:
    """The classic "billion laughs": 9 levels of 9 aliases, 9**9 strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefghi", "bcdefghij"[: levels - 1], strict=False):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    last = "abcdefghij"[levels - 1]
    lines.append(f"hosts:\n  - name: n0\n    address: h0\n    tags: *{last}")
    return "\n".join(lines) + "\n"


def error_of(path: Path) -> InventoryError:
    with pytest.raises(InventoryError) as info:
        load(path)
    return info.value


def _limit_memory() -> None:
    one_gib = 1 << 30
    resource.setrlimit(resource.RLIMIT_AS, (one_gib, one_gib))


def test_alias_bomb_exits_2_naming_the_line_with_memory_bounded(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    assert len(bomb.read_bytes()) < 700
    started = time.monotonic()
    # The real CLI under a 1 GiB address-space limit: expanding the aliases (9**9 values)
    # dies of MemoryError (exit 1) or runs for minutes (the deadline below).
    with (tmp_path / "err").open("wb") as err_file:
        child = subprocess.Popen(
            [sys.executable, "-m", "console", "check", str(bomb)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            preexec_fn=_limit_memory,
        )
    deadline = started + 120
    while True:
        # wait4: this child's own peak RSS (RUSAGE_CHILDREN would mix in earlier tests').
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            child.kill()
            child.wait()
            raise AssertionError("distconsole check spent 120 s on a 400-byte alias bomb")
        time.sleep(0.05)
    child.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - started
    peak_mib = usage.ru_maxrss / 1024
    print(
        f"alias bomb: exit {child.returncode} in {elapsed:.2f} s (CPU "
        f"{usage.ru_utime + usage.ru_stime:.2f} s), peak RSS {peak_mib:.0f} MiB"
    )
    err = (tmp_path / "err").read_bytes()
    stderr = err.decode(errors="replace")
    assert child.returncode == 2, stderr
    assert f"{bomb}:5: YAML aliases expand this file past" in stderr
    assert "alias *d here adds 7,381 values" in stderr
    assert "Traceback" not in stderr
    assert peak_mib < 400


def test_alias_bomb_refused_by_load_naming_the_alias(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(alias_bomb(levels=6))  # 9**6 = 531,441 values: past the bound
    error = error_of(path)
    assert error.line == 5
    assert "alias *d here" in str(error)
    # Aliases within the bound are ordinary YAML and load.
    path.write_text(alias_bomb(levels=3).replace("tags: *c", "tags: [t1]"))
    with pytest.raises(InventoryError, match="unknown top-level key"):
        load(path)  # a, b, c are not keys of hosts.yaml; no alias error before that


def test_merge_keys_under_the_bound_still_load(tmp_path: Path) -> None:
    text = "defaults: {user: alice}\nhosts:\n" + "".join(
        f"  - <<: &h{i} {{gpus: 2, tags: [a, b]}}\n    name: n{i}\n    address: h{i}\n"
        for i in range(50)
    )
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    hosts = load(path).hosts
    assert len(hosts) == 50 and hosts[7].gpus == 2 and hosts[7].tags == ("a", "b")


def test_deep_nesting_is_refused_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  - address: h0\n    tags: " + "[" * 3000 + "]" * 3000 + "\n")
    started = time.monotonic()
    error = error_of(path)
    print(f"3000 nested lists refused in {time.monotonic() - started:.2f} s")
    assert error.line == 3
    assert "nested more than 100 levels deep" in str(error)


@pytest.mark.parametrize(
    "key", ["address", "user", "work_dir", "identity_file", "known_hosts", "proxy_jump", "python"]
)
def test_values_ending_in_a_newline_are_refused_naming_the_key(tmp_path: Path, key: str) -> None:
    path = tmp_path / "hosts.yaml"
    # A block scalar keeps the line end: the way such a value gets into a real file.
    value = "|\n      node1\n"
    if key == "address":
        path.write_text(f"hosts:\n  - name: n0\n    address: {value}")
    else:
        path.write_text(f"hosts:\n  - name: n0\n    address: h0\n    {key}: {value}")
    error = error_of(path)
    assert error.field == f"hosts[0].{key}", str(error)
    assert "ends in a newline" in str(error)
    assert error.line == (3 if key == "address" else 4)


def test_other_control_characters_and_slurm_words_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text('hosts:\n  - name: n0\n    address: "h0\\rx"\n')
    assert "contains a control character" in str(error_of(path))
    path.write_text(
        'hosts:\n  - name: n0\n    address: h0\nslurm:\n  login: n0\n  partition: "gpu\\n"\n'
    )
    assert error_of(path).field == "slurm.partition"


def _equal_by_both_readers(path: Path) -> None:
    text = path.read_text()
    fast = load_yaml(text, str(path), path.parent)
    slow = load_yaml(text, str(path), path.parent, fast=False)
    assert fast == slow


@pytest.mark.parametrize(
    "path", sorted(p for p in SAMPLES.iterdir() if p.suffix in (".yaml", ".yml")), ids=str
)
def test_both_readers_give_the_same_inventory_for_the_samples(path: Path) -> None:
    try:
        _equal_by_both_readers(path)
    except InventoryError:
        pytest.skip(f"{path.name} is not a hosts.yaml")


TRICKY = {
    # Each reads differently under YAML 1.1 (libyaml's own rules) and 1.2 (ruamel's).
    "yaml11_words": "hosts:\n  - name: n0\n    address: h0\n    env: {A: yes, B: on, C: 010}\n",
    "numbers": "hosts:\n  - name: n0\n    address: h0\n    gpus: 0o10\n    port: 0x16\n"
    "    connect_timeout: 1_5\n    env: {A: 1:30, B: 1e3, C: .5, D: -0, E: 2.50}\n",
    "timestamp_and_null": "hosts:\n  - name: n0\n    address: h0\n    env: {A: 2024-01-01}\n"
    "    setup: ~\n",
    "merge": "x: &x {gpus: 2}\nhosts:\n  - <<: *x\n    name: n0\n    address: h0\n",
    "tags": "hosts:\n  - name: n0\n    address: h0\n    gpus: !!str 3\n",
    "directive": "%YAML 1.1\n---\nhosts:\n  - name: n0\n    address: h0\n    env: {A: yes}\n",
    "duplicate": "hosts:\n  - name: n0\n    address: h0\n    address: h1\n",
    "plain": "defaults: {user: alice, gpus: 8, env: {A: '1', B: 2, C: 2.5, D: true}}\nhosts:\n"
    "  - name: n0\n    address: h0\n    tags: [a, b]\n  - h1:2222\n  - bob@h2\n",
}


@pytest.mark.parametrize("case", sorted(TRICKY))
def test_both_readers_agree_on_what_yaml_versions_read_differently(
    tmp_path: Path, case: str
) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(TRICKY[case])
    fast_used = fast_document(TRICKY[case]) is not None
    assert fast_used == (case == "plain"), "only the plain file is libyaml's to read"
    try:
        _equal_by_both_readers(path)
    except InventoryError as fast_error:
        # Then both refuse it, with the same (round-trip) message naming its line.
        with pytest.raises(InventoryError) as slow:
            load_yaml(TRICKY[case], str(path), tmp_path, fast=False)
        assert str(slow.value) == str(fast_error)


def test_ten_thousand_hosts_load_and_plan(tmp_path: Path) -> None:
    lines = ["defaults:", "  user: alice", "  gpus: 8", "  work_dir: /scratch/dc", "hosts:"]
    for i in range(10_000):
        lines += [f"  - name: n{i:05d}", f"    address: 10.0.{i // 256}.{i % 256}"]
    path = tmp_path / "hosts.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert fast_document(path.read_text()) is not None, "a plain file is read by libyaml"
    started = time.monotonic()
    cpu = time.process_time()
    inventory = load(path)
    loaded = time.monotonic()
    job = plan(JobSpec(kind=JobKind.DDP, program="train.py"), inventory, job_id="big-1")
    print(
        f"10,000 hosts: load {loaded - started:.2f} s, plan {time.monotonic() - loaded:.2f} s "
        f"(CPU {time.process_time() - cpu:.2f} s, load average {os.getloadavg()[0]:.1f})"
    )
    assert len(inventory.hosts) == 10_000
    assert len(job.launches) == 10_000
    assert job.launches[-1].host == "n09999"


def test_huge_file_with_a_mistake_names_its_line(tmp_path: Path) -> None:
    body = "".join(f"  - name: n{i}\n    address: h{i}\n" for i in range(500))
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n" + body + "  - name: bad\n    address: 'h x'\n")
    error = error_of(path)
    assert error.line == 1003 and error.field == "hosts[500].address"
