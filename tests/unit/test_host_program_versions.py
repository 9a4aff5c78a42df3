"""Every host program's output opens with a versioned hello, and the console refuses one it
cannot read, naming the host and the program. The programs run for real (local bash,
the same shell lines the ssh transport sends) with setup lines that end in comments.
"""

from __future__ import annotations

import json
import sys

import pytest

from console.errors import TransportError
from console.hostprogs import follow_program, preflight_probe
from console.inventory import Host
from console.jobs.preflight.probe import HostRequest, probe_host
from console.jobs.preflight.probe_report import parse_probe
from console.logs.follower import FollowTarget, HostLogFollower
from console.logs.frames import Data, Hello
from console.probe.facts import gather_facts
from console.transport.hello import HostProgramError, check_hello
from console.transport.local import LocalConnection

VENV_SETUP = "source /opt/distconsole-test/venv/bin/activate"


def test_check_hello_says_what_is_wrong() -> None:
    check_hello("n1", "sampler", 2, {"program": "sampler", "v": 2})
    with pytest.raises(HostProgramError, match=r"^n1: sampler: speaks wire version 3, "):
        check_hello("n1", "sampler", 2, {"program": "sampler", "v": 3})
    with pytest.raises(HostProgramError, match=r"^n1: sampler: expected the sampler program"):
        check_hello("n1", "sampler", 2, {"program": "jobctl", "v": 2})
    with pytest.raises(HostProgramError, match=r"^n1: sampler: the program did not open"):
        check_hello("n1", "sampler", 2, ["not", "a", "hello"])


async def test_preflight_probe_runs_after_a_commented_setup_and_decodes() -> None:
    host = Host(name="p1", address="local", setup=f"{VENV_SETUP}  # the job's venv")
    request = HostRequest(host, programs=("bash", "no-such-program-x"))
    probe = await probe_host(LocalConnection(host), request, ["pytest", "no-such-package-x"])
    assert probe.executable and probe.executable.startswith("/opt/distconsole-test/venv/")
    assert probe.packages["pytest"] and probe.packages["no-such-package-x"] is None
    assert probe.programs["bash"] and probe.programs["no-such-program-x"] is None
    assert probe.python == ".".join(str(v) for v in sys.version_info[:3])
    assert probe.ports == {} and isinstance(probe.interfaces, tuple)
    assert probe.to_json()["packages"]["pytest"] == probe.packages["pytest"]


async def test_preflight_probe_of_a_failing_setup_says_so() -> None:
    host = Host(name="p2", address="local", setup="false  # broken venv")
    with pytest.raises(TransportError, match=r"the host's setup line or the probe did not run"):
        await probe_host(LocalConnection(host), HostRequest(host), [])


def test_preflight_probe_of_another_version_is_refused() -> None:
    older = json.dumps({"python": "3.8.0", "packages": {}})  # before hellos
    with pytest.raises(HostProgramError, match=r"^p3: preflight: .*versioned hello"):
        parse_probe("p3", f"{older}\n")
    newer = json.dumps({"program": "preflight", "v": preflight_probe.VERSION + 1})
    with pytest.raises(HostProgramError, match=r"^p3: preflight: speaks wire version"):
        parse_probe("p3", f"{newer}\n{older}\n")
    assert parse_probe("p3", "bash: python3: command not found\n") is None


async def test_facts_after_a_commented_setup() -> None:
    host = Host(name="f1", address="local", setup=f"{VENV_SETUP}  # py3.11; && not a command")
    facts = await gather_facts(LocalConnection(host), timeout=30)
    assert facts.via == "python"
    assert facts.python_path and facts.python_path.startswith("/opt/distconsole-test/venv/")


def test_follower_refuses_another_version_or_a_missing_hello() -> None:
    host = Host(name="l1", address="local")
    follower = HostLogFollower(LocalConnection(host), FollowTarget("j", "l1"))
    follower._check_hello(Hello(follow_program.PROGRAM, follow_program.VERSION))
    with pytest.raises(HostProgramError, match=r"^l1: follower: speaks wire version 0"):
        follower._check_hello(Hello(follow_program.PROGRAM, 0))
    with pytest.raises(HostProgramError, match=r"^l1: follower: the program did not open"):
        follower._check_hello(Data("/x", 0, None, b"line\n"))
