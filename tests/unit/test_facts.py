"""Host facts: the remote program and its sh fallback, run for real through the local
transport (bash subprocesses), and parsing of real nvidia-smi captures.

``nvidia-smi`` is the one stand-in (no GPU here): scripts that replay real captures or
fail the way nvidia-smi fails without a driver.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from console.errors import TransportError
from console.hostprogs import facts_program
from console.inventory import Host
from console.probe.facts import (
    MARKER,
    HostFacts,
    facts_command,
    gather_facts,
    parse_facts,
    parse_gpu_query,
    remote_word,
)
from console.transport.hello import HostProgramError
from console.transport.local import LocalConnection

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
VENV_SETUP = "source /opt/distconsole-test/venv/bin/activate"


@pytest.mark.parametrize(
    ("capture", "name", "memory"),
    [
        ("csv_h200_query-gpu.csv", "NVIDIA H200", 143771.0),
        ("csv_h100-80gb-hbm3-mig_query-gpu.csv", "NVIDIA H100 80GB HBM3", 81559.0),
        ("csv_l40s_query-gpu.csv", "NVIDIA L40S", 46068.0),
        ("csv_rtx-4080-super_query-gpu.csv", "NVIDIA GeForce RTX 4080 SUPER", 16376.0),
    ],
)
def test_gpu_query_from_real_captures(capture: str, name: str, memory: float) -> None:
    (gpu,) = parse_gpu_query((DATA / capture).read_text())
    assert (gpu.index, gpu.name, gpu.memory_total_mib) == (0, name, memory)


def test_gpu_query_in_the_shape_the_command_asks_for() -> None:
    # `--query-gpu=index,name,memory.total --format=csv`, two GPUs
    text = "index, name, memory.total [MiB]\n0, NVIDIA A100-SXM4-80GB, 81920 MiB\n"
    text += "1, NVIDIA A100-SXM4-80GB, 81920 MiB\n"
    gpus = parse_gpu_query(text)
    assert [(g.index, g.name, g.memory_total_mib) for g in gpus] == [
        (0, "NVIDIA A100-SXM4-80GB", 81920.0),
        (1, "NVIDIA A100-SXM4-80GB", 81920.0),
    ]


def test_parse_facts_takes_the_marked_line_after_setup_noise() -> None:
    payload = {"via": "python", "cpus": 4, "python": "3.10.1", "torch": None, "nvidia_smi": {}}
    hello = MARKER + json.dumps({"program": "facts", "v": facts_program.VERSION})
    facts = parse_facts(f"conda says hi\n{hello}\n{MARKER}{json.dumps(payload)}\n")
    assert facts.cpus == 4 and facts.python == "3.10.1" and facts.torch is None
    assert facts.nvidia_smi == "missing" and facts.gpu_count == 0
    with pytest.raises(TransportError, match="host facts missing"):
        parse_facts("just noise\n")
    with pytest.raises(TransportError, match="not valid JSON"):
        parse_facts(MARKER + "{nope\n")
    with pytest.raises(HostProgramError, match=r"gpu7: facts: .*versioned hello"):
        parse_facts(f"{MARKER}{json.dumps(payload)}\n", "gpu7")  # an older probe: no hello
    newer = MARKER + json.dumps({"program": "facts", "v": facts_program.VERSION + 1})
    with pytest.raises(HostProgramError, match="gpu7: facts: speaks wire version"):
        parse_facts(f"{newer}\n{MARKER}{json.dumps(payload)}\n", "gpu7")


def test_remote_word_lets_tilde_expand_and_quotes_the_rest() -> None:
    assert remote_word("~/venv/bin/python") == '"$HOME"/venv/bin/python'
    assert remote_word("~/a b/python") == "\"$HOME\"/'a b/python'"
    assert remote_word("python3") == "python3"


def test_setup_line_goes_first_and_values_are_quoted() -> None:
    host = Host(name="n", address="a", setup="source x # comment", work_dir="~/a b;c")
    line, program = facts_command(host)
    assert line.startswith("{ source x # comment\n} && {")
    assert "'~/a b;c'" in line
    assert "import json" in program


@pytest.fixture
def standin(tmp_path: Path) -> Path:
    """A bin directory for stand-in nvidia-smi scripts."""
    directory = tmp_path / "bin"
    directory.mkdir()
    return directory


def _standin(directory: Path, body: str) -> None:
    script = directory / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


async def _both(tmp_path: Path, standin: Path, work_dir: str) -> tuple[HostFacts, HostFacts]:
    setup = f"{VENV_SETUP} && export PATH={standin}:$PATH"
    with_python = Host(name="p", address="local", setup=setup, work_dir=work_dir)
    without = Host(
        name="s", address="local", setup=setup, work_dir=work_dir, python="no-such-python3"
    )
    return (
        await gather_facts(LocalConnection(with_python), timeout=30),
        await gather_facts(LocalConnection(without), timeout=30),
    )


async def test_python_program_and_sh_fallback_agree(tmp_path: Path, standin: Path) -> None:
    capture = DATA / "csv_h200_query-gpu.csv"
    # GPU stand-in: replays a real H200 capture.
    _standin(standin, f"exec cat {capture}\n")
    work_dir = str(tmp_path / "work dir" / "it's $(here)")
    py, sh = await _both(tmp_path, standin, work_dir)
    assert (py.via, sh.via) == ("python", "sh")
    assert py.python_path and py.python_path.startswith("/opt/distconsole-test/venv/")
    assert py.torch is not None and sh.torch is None and sh.python is None
    for attr in ("hostname", "os", "kernel", "arch", "cpus", "memory_total_bytes", "work_dir"):
        assert getattr(py, attr) == getattr(sh, attr), attr
    assert py.cpus == len(os.sched_getaffinity(0))
    assert py.work_dir == work_dir and Path(work_dir).is_dir()
    assert py.disk_free_bytes and sh.disk_free_bytes
    # same filesystem, read moments apart
    assert abs(py.disk_free_bytes - sh.disk_free_bytes) < 256 * 1024 * 1024
    assert py.gpus == sh.gpus and py.gpu_models == ("NVIDIA H200",)
    assert py.nvidia_smi == sh.nvidia_smi == "ok"
    assert shutil.disk_usage(work_dir).total > 0


async def test_failing_nvidia_smi_and_unwritable_work_dir(tmp_path: Path, standin: Path) -> None:
    # GPU stand-in: what nvidia-smi prints on a host whose driver is not loaded.
    _standin(
        standin,
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
        'driver. Make sure that the latest NVIDIA driver is installed and running."\nexit 9\n',
    )
    blocker = tmp_path / "file"
    blocker.write_text("")
    py, sh = await _both(tmp_path, standin, str(blocker / "sub"))
    for facts in (py, sh):
        assert facts.nvidia_smi.startswith("failed: NVIDIA-SMI has failed because it couldn't")
        assert facts.gpu_count == 0
        assert facts.disk_free_bytes is None
        assert len(facts.notes) == 1 and str(blocker / "sub") in facts.notes[0]


async def test_failing_setup_is_an_error_naming_it(tmp_path: Path) -> None:
    host = Host(name="n", address="local", setup="false", work_dir=str(tmp_path))
    with pytest.raises(TransportError, match="setup line or the facts command failed"):
        await gather_facts(LocalConnection(host), timeout=30)
