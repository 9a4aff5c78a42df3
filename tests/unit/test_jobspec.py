"""JobSpec validation: every bad value is a JobSpecError naming its field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from console.errors import JobSpecError
from console.inventory import Host, Inventory
from console.jobs.models import JobKind
from console.jobs.plan.planner import plan
from console.jobs.spec import CLI_OPTION, JobSpec, make_spec, parse_env, spec_with


def spec(**fields: object) -> JobSpec:
    base: dict[str, object] = {"kind": "ddp", "program": "train.py"}
    base.update(fields)
    return make_spec(**base)


def test_defaults() -> None:
    s = spec()
    assert s.kind is JobKind.DDP
    assert s.args == ()
    assert s.hosts == () and s.tags == ()
    assert s.gpus_per_host is None and s.master_port is None and s.total_steps is None
    assert s.fail_fast is True
    assert s.horovod_launcher == "gloo"
    assert s.display_name == "ddp-train"
    assert s.example is None


def test_strings_from_a_form_are_converted() -> None:
    s = spec(gpus_per_host="4", master_port="29600", total_steps="100", args=["--lr", "0.1"])
    assert (s.gpus_per_host, s.master_port, s.total_steps) == (4, 29600, 100)
    assert s.args == ("--lr", "0.1")


def test_example_program_and_name() -> None:
    s = spec(program="example:ddp")
    assert s.example == "ddp"
    assert s.display_name == "ddp-example-ddp"
    assert spec(program="/opt/x/my train!.py", name=None).display_name == "ddp-my-train"
    assert spec(name="exp.1_a").display_name == "exp.1_a"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"kind": "tensorflow"}, "kind", "ddp, mpi, horovod, ps"),
        ({"program": ""}, "program", "required"),
        ({"program": "   "}, "program", "required"),
        ({"program": "example:nope"}, "program", "unknown example"),
        ({"program": "a\nb"}, "program", "line breaks"),
        ({"args": ["ok", "bad\x00"]}, "args", "NUL"),
        ({"hosts": ["a", "a"]}, "hosts", "twice"),
        ({"hosts": ["a", ""]}, "hosts", "empty"),
        ({"tags": [""]}, "tags", "empty"),
        ({"gpus_per_host": 0}, "gpus_per_host", "between 1 and"),
        ({"gpus_per_host": "two"}, "gpus_per_host", "whole number"),
        ({"gpus_per_host": 1.5}, "gpus_per_host", "whole number"),
        ({"workdir": "relative/dir"}, "workdir", "absolute"),
        ({"env": {"1BAD": "x"}}, "env", "not a valid environment variable name"),
        ({"env": {"A-B": "x"}}, "env", "not a valid environment variable name"),
        ({"env": {"OK": "a\x00b"}}, "env", "NUL"),
        ({"interface": "eth0; rm -rf /"}, "interface", "not a network interface"),
        ({"interface": "a" * 16}, "interface", "not a network interface"),
        ({"master_port": 80}, "master_port", "between 1024 and 65535"),
        ({"master_port": 70000}, "master_port", "between 1024 and 65535"),
        ({"master_port": "http"}, "master_port", "whole number"),
        ({"total_steps": 0}, "total_steps", "positive"),
        ({"total_steps": -5}, "total_steps", "positive"),
        ({"name": "bad name"}, "name", "letters, digits"),
        ({"name": "-x"}, "name", "letters, digits"),
        ({"ps": 2}, "ps", "only applies to --kind ps"),
        ({"workers": 2}, "workers", "only applies to --kind ps"),
        ({"chief": True}, "chief", "only applies to --kind ps"),
        ({"kind": "ps", "ps": 0}, "ps", "at least one ps"),
        ({"kind": "ps", "workers": 0}, "workers", "at least one worker"),
        ({"kind": "ps", "ps": -1}, "ps", "between 0 and"),
        ({"horovod_launcher": "mpi"}, "horovod_launcher", "only applies to --kind horovod"),
        ({"kind": "horovod", "horovod_launcher": "ssh"}, "horovod_launcher", "gloo or mpi"),
        ({"fail_fast": "maybe"}, "fail_fast", "true or false"),
        ({"args": ["--steps", "{steps_per_rank}"]}, "total_steps", "{steps_per_rank}"),
        ({"args": ["{total_steps}"]}, "total_steps", "{total_steps}"),
        ({"colour": "red"}, "colour", "not a job spec field"),
    ],
)
def test_every_error_names_its_field(fields: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(JobSpecError) as info:
        spec(**fields)
    assert info.value.field == field
    assert words in info.value.detail
    assert str(info.value).startswith(f"{field}: ")


def test_missing_kind_is_named() -> None:
    with pytest.raises(JobSpecError) as info:
        make_spec(program="x")
    assert info.value.field == "kind"


def test_every_spec_field_has_a_cli_option() -> None:
    assert set(JobSpec.model_fields) == set(CLI_OPTION)


def test_world_size_placeholder_needs_no_total_steps() -> None:
    assert spec(args=["{world_size}"]).args == ("{world_size}",)


def test_parse_env() -> None:
    assert parse_env(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    for bad, words in (("NOEQUALS", "NAME=VALUE"), ("9X=1", "valid environment variable name")):
        with pytest.raises(JobSpecError) as info:
            parse_env([bad])
        assert info.value.field == "env" and words in info.value.detail


def test_spec_is_frozen_and_spec_with_revalidates() -> None:
    s = spec(master_port=29600)
    with pytest.raises(ValidationError, match="frozen"):
        s.master_port = 1
    assert spec_with(s, master_port=29700).master_port == 29700
    with pytest.raises(JobSpecError) as info:
        spec_with(s, master_port=5)
    assert info.value.field == "master_port"


INVENTORY = Inventory(
    path="hosts.yaml",
    hosts=(
        Host(name="a", address="10.0.0.1", tags=("gpu",)),
        Host(name="b", address="10.0.0.2", tags=("cpu",)),
    ),
)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"hosts": ["a", "zz"]}, "hosts", "no host named zz"),
        ({"tags": ["nope"]}, "tags", "no host has tag nope"),
        ({"hosts": ["b"], "tags": ["gpu"]}, "tags", "no host matches"),
        ({"total_steps": 1, "gpus_per_host": 2}, "total_steps", "cannot be shared by 4 ranks"),
    ],
)
def test_inventory_dependent_errors_name_their_field(
    fields: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(JobSpecError) as info:
        plan(spec(**fields), INVENTORY, job_id="j")
    assert info.value.field == field
    assert words in info.value.detail


def test_bad_job_id_is_refused() -> None:
    with pytest.raises(JobSpecError) as info:
        plan(spec(), INVENTORY, job_id="../etc")
    assert info.value.field == "job_id"
