"""Under horovodrun --gloo the inventory's ``env`` (a value per host) goes in each host's
0600 ``env.HOST.secret`` with the user's ``--env`` values: horovodrun puts its whole
environment in every rank's argv, and the rank wrapper (``mpi_ranks.py``) is itself in
horovodrun's argv. Under mpirun (whose argv also holds the wrapper) a host's inventory
values that differ from the launcher's go in its file. Real horovodrun on sshd hosts:
tests/integration/test_secrets_horovod.py; real mpirun: test_mpi_per_host.py."""

from __future__ import annotations

from console.inventory import Host, Inventory
from console.jobs.plan.mpi_secrets import SECRET_ENV_RESOURCE, env_file_name
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec

SITE = {"n0": "site-n0-Vx31", "n1": "site-n1-Hq72"}
HOSTS = (
    Host(name="n0", address="10.0.0.1", env={"SITE_TOKEN": SITE["n0"], "NCCL_DEBUG": "WARN"}),
    Host(name="n1", address="10.0.0.2", env={"SITE_TOKEN": SITE["n1"]}),
    Host(name="n2", address="10.0.0.3"),
)
INVENTORY = Inventory(path="/nowhere/hosts.yaml", hosts=HOSTS)


def test_each_hosts_inventory_values_travel_in_its_own_file_and_in_no_argv() -> None:
    spec = make_spec(kind="horovod", program="train.py", gpus_per_host=1, env={"USER_KEY": "u-1"})
    planned = plan(spec, INVENTORY, job_id="hvd-1")
    [launch] = planned.launches
    everything = " ".join(launch.argv) + " ".join(launch.env.values())
    for value in (*SITE.values(), "u-1", "WARN"):
        assert value not in everything, value
    assert not {"SITE_TOKEN", "USER_KEY", "NCCL_DEBUG"} & set(launch.env)
    files = {u.host: u for u in planned.uploads if u.resource == SECRET_ENV_RESOURCE}
    assert {h: u.path.rsplit("/", 1)[1] for h, u in files.items()} == {
        h.name: env_file_name(h.name) for h in HOSTS
    }  # one per host: hosts that share a home share the job directory
    assert files["n0"].data == (
        "export SITE_TOKEN=site-n0-Vx31\nexport NCCL_DEBUG=WARN\nexport USER_KEY=u-1\n"
    )
    assert files["n1"].data == "export SITE_TOKEN=site-n1-Hq72\nexport USER_KEY=u-1\n"
    assert files["n2"].data == "export USER_KEY=u-1\n"  # nothing of its own in the inventory


def test_mpirun_forwards_names_and_a_hosts_own_inventory_values_go_in_its_file() -> None:
    spec = make_spec(kind="mpi", program="train.py", gpus_per_host=1, env={"USER_KEY": "u-1"})
    planned = plan(spec, INVENTORY, job_id="mpi-1")
    [launch] = planned.launches
    argv = " ".join(launch.argv)
    # -x NAME forwards the launcher's values (its wrapper, a 0600 file, sets them).
    assert "u-1" not in argv and "USER_KEY" in launch.argv and "SITE_TOKEN" in launch.argv
    assert launch.env["SITE_TOKEN"] == SITE["n0"] and SITE["n0"] not in argv
    # n1's own value differed from the launcher's: it was in the rank wrapper's text,
    # in every rank's argv; now in n1's file.
    assert SITE["n1"] not in argv
    files = {u.host: u.data for u in planned.uploads if u.resource == SECRET_ENV_RESOURCE}
    assert files == {"n0": "", "n1": "export SITE_TOKEN=site-n1-Hq72\n", "n2": ""}
    assert "unset SITE_TOKEN" in argv  # n2 has none: a name, no value


def test_mpirun_with_one_inventory_env_everywhere_keeps_no_file() -> None:
    same = tuple(h.model_copy(update={"env": {"SITE_TOKEN": "same"}}) for h in HOSTS)
    inventory = Inventory(path="/nowhere/hosts.yaml", hosts=same)
    planned = plan(make_spec(kind="mpi", program="t.py", gpus_per_host=1), inventory, job_id="m")
    assert not [u for u in planned.uploads if u.resource == SECRET_ENV_RESOURCE]
