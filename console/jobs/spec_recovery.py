"""The cross-field rules of a job spec's recovery options: ``--max-restarts`` per kind,
``--min-hosts`` (ddp, or horovod under Horovod elastic), ``--horovod-elastic`` and
``--spare-hosts`` and ``--rendezvous-host``.

A mixin of :class:`~console.jobs.spec.JobSpec` (pydantic collects model validators from
plain base classes too); the fields are declared there, their single-field checks are
``spec_options.RestartChecks``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import model_validator

from console.jobs.models import JobKind
from console.jobs.spec_options import FieldProblem

# "1" in the job's env asks for Horovod elastic (jobs/plan/horovod_elastic.py ELASTIC_VAR).
HOROVOD_ELASTIC_VAR = "DISTCONSOLE_HOROVOD_ELASTIC"


class RecoveryRules:
    """Which kinds each recovery option applies to, and what it needs beside it."""

    if TYPE_CHECKING:  # the JobSpec fields these rules read
        kind: JobKind
        env: dict[str, str]
        hosts: tuple[str, ...]
        max_restarts: int | None
        min_hosts: int | None
        spare_hosts: tuple[str, ...]
        horovod_elastic: bool
        horovod_launcher: str
        rendezvous_host: str | None

    @model_validator(mode="after")
    def _restarts(self) -> Any:
        if self.kind is JobKind.RAY and self.max_restarts:
            raise FieldProblem("max_restarts", "does not apply to --kind ray (Ray retries tasks)")
        if self.min_hosts is not None:
            self._min_hosts_applies()
        if self.horovod_elastic and self.kind is not JobKind.HOROVOD:
            raise FieldProblem(
                "horovod_elastic", f"applies to --kind horovod only, not {self.kind.value}"
            )
        if self.horovod_elastic and self.horovod_launcher != "gloo":
            raise FieldProblem(
                "horovod_elastic",
                "needs --horovod-launcher gloo: horovodrun --mpi has no elastic mode",
            )
        if self.horovod_elastic and self.max_restarts == 0:
            raise FieldProblem(
                "horovod_elastic", "needs --max-restarts N of at least 1 (Horovod's resets)"
            )
        if self.min_hosts is not None and self.max_restarts == 0:
            raise FieldProblem(
                "min_hosts",
                "needs --max-restarts N of at least 1: torchrun takes a lost host as a "
                "restart of the survivors (each scale-down uses one)"
                if self.kind is JobKind.DDP
                else "needs --max-restarts N of at least 1: Horovod elastic (horovodrun --min-np) "
                "runs only with restarts",
            )
        if self.spare_hosts and (self.kind is not JobKind.DDP or self.max_restarts == 0):
            raise FieldProblem(
                "spare_hosts", "applies to --kind ddp with --min-hosts and --max-restarts only"
            )
        if set(self.spare_hosts) & set(self.hosts):
            shared = ", ".join(h for h in self.spare_hosts if h in self.hosts)
            raise FieldProblem("spare_hosts", f"{shared} is already one of the job's --hosts")
        if self.rendezvous_host is not None:
            self._rendezvous_host_applies()
        return self

    def _rendezvous_host_applies(self) -> None:
        """--rendezvous-host: ddp (the c10d store), or horovod under Horovod elastic (its
        driver); a host that trains nothing, so neither a job host nor a spare."""
        name = self.rendezvous_host
        if self.kind is JobKind.HOROVOD:
            asked = self.env.get(HOROVOD_ELASTIC_VAR, "").strip().lower() in ("1", "true", "yes")
            if not (self.horovod_elastic or asked):
                raise FieldProblem(
                    "rendezvous_host",
                    "applies to a horovod job under Horovod elastic only (--horovod-elastic): "
                    "plain horovodrun has no rendezvous to move",
                )
        elif self.kind is not JobKind.DDP:
            raise FieldProblem(
                "rendezvous_host",
                "applies to --kind ddp (torchrun's c10d store) and to --kind horovod with "
                f"--horovod-elastic, not {self.kind.value}",
            )
        if name in self.hosts:
            raise FieldProblem(
                "rendezvous_host",
                f"{name} is one of the job's --hosts: the rendezvous host trains nothing "
                "(leave it out of --hosts)",
            )
        if name in self.spare_hosts:
            raise FieldProblem(
                "rendezvous_host",
                f"{name} is one of the job's --spare-hosts: the rendezvous host trains nothing",
            )

    def _min_hosts_applies(self) -> None:
        """--min-hosts: ddp (torchrun's elastic membership), or horovod under Horovod
        elastic (horovodrun --min-np; the switch, or its variable in the job's env)."""
        if self.kind is JobKind.DDP:
            return
        if self.kind is JobKind.HOROVOD:
            asked = self.env.get(HOROVOD_ELASTIC_VAR, "").strip().lower() in ("1", "true", "yes")
            if (self.horovod_elastic or asked) and self.horovod_launcher == "gloo":
                return
            raise FieldProblem(
                "min_hosts",
                "applies to a horovod job under Horovod elastic only (horovodrun --min-np): "
                f"--horovod-elastic or {HOROVOD_ELASTIC_VAR}=1 in its environment, with "
                "--max-restarts and the gloo launcher",
            )
        raise FieldProblem(
            "min_hosts",
            "applies to --kind ddp (torchrun's elastic membership) and to --kind horovod "
            f"with --horovod-elastic, not {self.kind.value}",
        )
