"""No reader dies on bytes (issue 29 item 3): what a host writes is decoded with
replacement, a reader thread that dies anyway warns naming it, what we print to a
terminal holds no control sequence of a host's, a login shell's greeting is skipped,
and a malformed job.json is left out by name.

GPUs: the nvidia-smi STAND-IN (``tests/standin/nvidia-smi``; no GPU here) replaying a
copy of the real H200 capture whose GPU name holds an invalid UTF-8 byte and escapes;
the kernel log: the journalctl STAND-IN (``tests/standin/journal/journalctl``; a test
user cannot read this machine's), which writes a file's bytes as they are.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from pathlib import Path

import pytest

from console.commands import gpus as gpus_command
from console.commands.jobs import render as jobs_table
from console.display import plain, plain_lines
from console.hostprogs import jobs_scan
from console.hostprogs.sampler import health as host_health
from console.hostprogs.sampler import program, schema
from console.hostprogs.sampler.gpus import NvsmiStream
from console.probe.health import host_verdicts
from console.transport.hello import (
    OutputStart,
    marked,
    marker_of,
    marks_in,
    new_marker,
    unmarked,
)
from console.transport.ship import with_setup
from tests.unit.test_health_sampler import DATA, STANDIN, sample_lines, view_of
from tests.unit.test_spare_hosts_console import spare_record

ODD_NAME = b"NVIDIA H200 \xff\x1b]0;owned\x07\x1b[2J"
XID_LOG = (
    b"@NOW@ node0 kernel: usb 1-1: \xff\xfe\xc3\x28 not UTF-8\n"
    b"@NOW@ node0 kernel: NVRM: Xid (PCI:0000:83:00): 79, pid=1234, GPU has fallen off the bus.\n"
)


def odd_capture(tmp_path: Path) -> Path:
    """The H200 capture with ODD_NAME as its GPU's name (bytes, not text)."""
    data = (DATA / "csv_h200_query-gpu.csv").read_bytes()
    assert data.count(b", NVIDIA H200,") == 1
    (tmp_path / "odd_query-gpu.csv").write_bytes(data.replace(b"NVIDIA H200", ODD_NAME))
    apps = (DATA / "csv_h200_compute-apps.csv").read_bytes()
    (tmp_path / "odd_compute-apps.csv").write_bytes(apps)
    return tmp_path / "odd"


def test_an_odd_byte_in_a_gpu_name_is_read_and_printed_plain(tmp_path: Path) -> None:
    # Before: nvidia-smi's reader thread died on the byte (text=True, strict) and the
    # sampler said "not answering".
    lines = sample_lines(STANDIN, capture=str(odd_capture(tmp_path)))
    view = view_of(lines)
    assert view.sample is not None and view.sample.gpu_error is None, view.sample
    (gpu,) = view.sample.gpus
    assert gpu.name is not None and gpu.name.startswith("NVIDIA H200 \ufffd")
    # The GPU's own verdict only: the host row reads this machine's real kernel log
    # (/dev/kmsg, as root), where test_health_kernel_xid writes a real Xid 79 earlier
    # in the suite for a PCI address that is not this capture's.
    assert [v.state for v in host_verdicts(view) if v.gpu is not None] == ["ok"]
    table = gpus_command.render([view])
    assert "\x1b" not in table and "\x07" not in table
    assert "GPU 0  NVIDIA H200 \ufffd" in table, table


def test_journalctl_with_invalid_utf8_still_gives_the_xid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "kernel.log"
    log.write_bytes(XID_LOG)
    monkeypatch.setenv("PATH", f"{STANDIN / 'journal'}:{os.environ['PATH']}")
    monkeypatch.setenv("JOURNALCTL_STANDIN_OUTPUT", str(log))
    schema.READER_FAILURES.clear()
    kernel = host_health.KernelXids(every=60.0, kmsg=str(tmp_path / "no-kmsg"))
    assert kernel.source == "journalctl"
    assert kernel.first.wait(30)
    (xid,) = kernel.poll()
    assert (xid["xid"], xid["pci"], xid["source"]) == (79, "0000:83:00", "journalctl")
    assert kernel.error is None and schema.READER_FAILURES == {}


def test_kmsg_records_with_odd_bytes_and_digits_are_read(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(
        b"3,1,\xc2\xb2,-;NVRM: Xid (PCI:0000:83:00): 79, \xff GPU has fallen off the bus.\n"
        b"3,2,5,-;NVRM: Xid (PCI:0000:83:00): " + b"9" * 5000 + b", too long\n"
    )
    kernel = host_health.KernelXids(kmsg=str(kmsg))
    (xid,) = kernel.poll()  # "²" is a digit to str.isdigit, not to int()
    assert xid["xid"] == 79 and "\ufffd" in str(xid["text"])
    assert kernel.fd is not None  # the reader goes on


def test_a_reader_that_dies_turns_its_host_into_warn_naming_it() -> None:
    schema.READER_FAILURES.clear()
    try:

        def reader() -> None:  # any bug of a reader thread's, here a decoding one
            b"\xff".decode("utf-8")

        schema.reader_thread("journalctl -k", reader).join(10)
        assert schema.READER_FAILURES["journalctl -k"].startswith("UnicodeDecodeError: ")
        health = program.Health(None, 5.0).line("nvidia-smi")
        assert health is not None
        lines = sample_lines(STANDIN)
        raw = json.loads(lines[-1])
        raw["health"]["readers"] = health["readers"]
        view = view_of([*lines[:-1], json.dumps(raw)])
    finally:
        schema.READER_FAILURES.clear()
    rows = host_verdicts(view)
    host = next(r for r in rows if r.gpu is None)
    assert host.state == "warn"
    assert host.reasons[0].startswith("health reader 'journalctl -k' failed (UnicodeDecodeError")
    assert [r.state for r in rows if r.gpu is not None] == ["ok"]


def test_a_dead_apps_reader_never_holds_a_line_back() -> None:
    # The stream's state without starting nvidia-smi: only its apps thread is tried.
    stream = object.__new__(NvsmiStream)
    stream.interval, stream.lock = 1.0, threading.Lock()
    stream._apps, stream._apps_ready = ([], None), threading.Event()
    stream._stopping = threading.Event()

    def broken() -> tuple[list[str], str | None]:
        raise RuntimeError("a reader bug")

    stream._query_apps = broken  # type: ignore[method-assign]
    schema.READER_FAILURES.clear()
    try:
        schema.reader_thread("nvidia-smi --query-compute-apps", stream._apps_loop).join(10)
        started = time.monotonic()
        assert stream.apps() == ([], None)
        assert time.monotonic() - started < 1.0  # not the 5 s first-answer wait
        assert "RuntimeError: a reader bug" in schema.READER_FAILURES.values()
    finally:
        schema.READER_FAILURES.clear()


# -- printing to a terminal ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("NVIDIA H200\x1b]0;owned\x07\ufffd", "NVIDIA H200\ufffd"),
        ("train\nnode1  running", "train node1  running"),
        ("a\x1b[31mred\x1b[0m\tb", "ared b"),
        ("lone \udc80 surrogate", "lone ? surrogate"),
        ("\x9b2J 8-bit", " 8-bit"),
        (None, "n/r"),
    ],
)
def test_plain_is_one_line_without_control_sequences(value: str | None, shown: str) -> None:
    assert plain(value) == shown


def test_plain_lines_keeps_lines_and_drops_their_controls() -> None:
    assert plain_lines("a\x1b[2J\nb\x1b]0;t\x07\n") == "a\nb\n"


def test_a_ui_table_cell_draws_nothing_of_a_hosts_on_the_terminal() -> None:
    from console.ui.formatting import plain as cell

    assert cell("x\x1b]0;t\x07\ny [b]").plain == "x y [b]"


def test_a_newline_in_a_job_name_makes_no_row() -> None:
    record = spare_record(None)
    named = dataclasses.replace(record, name="x\nfake-1  fake  ddp  running")
    table = jobs_table([named]).splitlines()
    assert len(table) == 2 and table[1].startswith("job-1  x fake-1  fake"), table


# -- where our output starts -----------------------------------------------------------


def test_output_start_skips_a_greeting_to_the_marker() -> None:
    marker = new_marker()
    line = marked("exec python3 -u -", marker)
    assert marker_of(line) == marker and line.endswith("; exec python3 -u -")
    start = OutputStart(marker)
    greeting = b"Welcome \x1b[1;32mfriend\x1b[0m\n\x1b]0;title\x07"
    assert start.feed(greeting) == b""
    assert start.feed(marker.encode()[:5]) == b""
    assert start.feed(marker.encode()[5:] + b'\n{"program"') == b'{"program"'
    assert start.feed(b"\nmore") == b"\nmore"
    assert start.text(f"hi\n{marker}\nout\n") == "out\n"
    never = OutputStart(marker)
    assert never.feed(b"no marker here\n") == b""
    assert never.end() == b"no marker here\n"  # a command that never printed it


def test_a_nested_bash_of_ours_prints_the_marker_after_its_own_greeting() -> None:
    marker = new_marker()
    line = marked(with_setup("source venv/bin/activate", "python3 -u -", bash=True), marker)
    assert unmarked(line).startswith("bash -c ") and marks_in(line) == 2
    assert line.startswith(f"export DISTCONSOLE_OUTPUT_MARK={marker}; ")
    greeting = b"Welcome\x1b]0;t\x07"
    start = OutputStart(marker, marks_in(line))
    assert start.feed(greeting + marker.encode() + b"\n" + greeting) == b""
    assert start.feed(marker.encode() + b"\nhello\n") == b"hello\n"
    whole = f"Welcome\n{marker}\nWelcome{marker}\nhello\n"
    assert OutputStart(marker, 2).text(whole) == "hello\n"
    plain_line = marked("echo hi", marker)
    assert plain_line == f"printf '%s\\n' {marker}; echo hi" and marks_in(plain_line) == 1


# -- job.json on a host ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b'{"id": "j", "name": "x', "not JSON"),
        (b'{"id": "j", "name": "bad \\udc80 name", "hosts": ["node0"]}', "lone surrogate"),
        (b'{"id": "j", "hosts": "node0"}', '"hosts" is a str, not a list'),
        (b'{"id": "j", "hosts": [1]}', '"hosts" holds a value that is not a string'),
        (b'{"id": "j", "plan": [1]}', '"plan" is a list, not a dict'),
        (b"[1, 2]", "not a JSON object"),
        (b'{"id": "j\xff", "hosts": ["node0"]}', None),  # read with replacement
    ],
)
def test_a_malformed_job_json_is_left_out_by_name(
    tmp_path: Path, text: bytes, problem: str | None
) -> None:
    path = tmp_path / "job.json"
    path.write_bytes(text)
    document, found = jobs_scan.read_document(str(path))
    if problem is None:
        assert found is None and document is not None and document["id"] == "j\ufffd"
    else:
        assert document is None and found is not None and problem in found, found


def test_scan_program_lists_every_job_and_names_the_bad_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = tmp_path / "jobs"
    for job, text in (("good-1", '{"id": "good-1", "hosts": ["h"]}'), ("bad-1", "{not json")):
        (root / job).mkdir(parents=True)
        (root / job / "job.json").write_text(text)
    # The supervisor's record quotes a rank's line: a lone surrogate there reads "?".
    (root / "good-1" / "supervisor.json").write_text('{"state": "failed", "lines": ["x\\udc80"]}')
    args = json.dumps({"roots": [str(root)], "known": [], "host": "h"})
    done = subprocess.run(
        [sys.executable, "-", args],
        input=Path(jobs_scan.__file__).read_text(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    from console.jobs.report.discover import Discovery
    from console.jobs.report.scan import parse_scan

    found = Discovery()
    found.add(parse_scan("h", done.stdout))
    assert sorted(found.jobs) == ["bad-1", "good-1"]
    assert found.jobs["good-1"].document == {"id": "good-1", "hosts": ["h"]}
    assert found.jobs["good-1"].copies["h"].supervisor == {"state": "failed", "lines": ["x?"]}
    (skipped,) = found.skipped
    assert skipped.startswith(f"h: {root}/bad-1/job.json left out: not JSON"), skipped
