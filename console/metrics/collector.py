"""``ClusterCollector``: a prometheus_client Collector over the latest views and jobs.

Each scrape turns one :class:`~console.metrics.source.Snapshot` into metric families:
dcgm-exporter's GPU metrics (``console/metrics/dcgm.py``), those of the GPUs' health
reading and their verdicts (``console/metrics/health.py``), and distconsole's own
(``distconsole_*``: host up, sample age, job state and restarts, per-rank step, steps/s,
samples/s, loss, relative speed). One labels dict is made per GPU and shared by all of
that GPU's samples, which lets :func:`console.metrics.exposition.render_text` write each
label set once.
A figure the GPU did not report is left out (never exported as 0).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from console.logs.steps import RankSteps
from console.metrics.dcgm import DCGM_FIELDS, HOSTNAME_LABEL, gpu_labels
from console.metrics.health import HealthExport
from console.metrics.source import MetricsSource, Snapshot

PREFIX = "distconsole_"


def _family(name: str, doc: str, typ: str = "gauge") -> Metric:
    return Metric(name, doc, typ)


class ClusterCollector(Collector):
    def __init__(self, source: MetricsSource, *, hostname_label: str = HOSTNAME_LABEL) -> None:
        self.source = source
        self.hostname_label = hostname_label
        self.health = HealthExport(hostname_label)

    def collect(self) -> Iterator[Metric]:
        snap = self.source.snapshot()
        labels_of: dict[tuple[str, int], dict[str, str]] = {}
        yield from self.gpu_families(snap, labels_of)
        yield from self.health.families(snap, labels_of)
        yield from self.host_families(snap)
        yield from self.job_families(snap)

    # -- dcgm-exporter's -----------------------------------------------------------------

    def gpu_families(
        self, snap: Snapshot, labels_of: dict[tuple[str, int], dict[str, str]]
    ) -> Iterator[Metric]:
        """dcgm-exporter's families; ``labels_of`` gets each GPU's labels dict."""
        rows = []
        for view in snap.views:
            if view.sample is None:
                continue
            health = view.sample.health
            for g in view.sample.gpus:
                h = health.gpu(g.index) if health is not None else None
                pci = h.pci_bus_id if h is not None else None
                labels = gpu_labels(view.name, g, self.hostname_label, pci)
                labels_of[(view.name, g.index)] = labels
                rows.append((labels, g))
        for field in DCGM_FIELDS:
            family = _family(field.name, field.help, field.type)
            name, read, append = field.name, field.read, family.samples.append
            for labels, g in rows:
                value = read(g)
                if value is not None:
                    append(Sample(name, labels, value))
            yield family

    # -- distconsole's own -----------------------------------------------------------------

    def host_families(self, snap: Snapshot) -> Iterator[Metric]:
        host = self.hostname_label
        up = _family(
            PREFIX + "host_up", "1 when the host is connected and its samples are current."
        )
        age = _family(
            PREFIX + "host_sample_age_seconds", "Seconds since the host's latest sample arrived."
        )
        for view in snap.views:
            labels = {host: view.name}
            up.samples.append(Sample(up.name, labels, 1.0 if view.live else 0.0))
            if view.sample is not None:
                seconds = max(0.0, snap.taken - view.sample.time)
                age.samples.append(Sample(age.name, labels, seconds))
        yield up
        yield age

    def job_families(self, snap: Snapshot) -> Iterator[Metric]:
        state = _family(PREFIX + "job_state", "1 for each job in its current state (label state).")
        restarts = _family(
            PREFIX + "job_restarts", "Restarts the job made (--max-restarts), as its hosts count."
        )
        for job in snap.jobs:
            labels = {"job": job.job_id, "name": job.name, "kind": job.kind, "state": job.state}
            state.samples.append(Sample(state.name, labels, 1.0))
            named = {"job": job.job_id, "name": job.name, "kind": job.kind}
            restarts.samples.append(Sample(restarts.name, named, float(job.restarts)))
        yield state
        yield restarts
        figures: tuple[tuple[str, str, str], ...] = (
            ("rank_step", "step", "The rank's latest step, as its log printed it."),
            ("rank_steps_per_second", "steps_per_s", "Steps per second of the rank."),
            ("rank_samples_per_second", "samples_per_s", "Samples per second the rank printed."),
            ("rank_loss", "loss", "The rank's latest loss, as its log printed it."),
        )
        families = [(_family(PREFIX + n, doc), attr) for n, attr, doc in figures]
        for job_id, ranks in snap.ranks.items():
            for rank in ranks:
                labels = self._rank_labels(job_id, rank)
                for family, attr in families:
                    value = getattr(rank, attr)
                    if value is not None:
                        family.samples.append(Sample(family.name, labels, float(value)))
        for family, _attr in families:
            yield family
        yield self._pace_family(snap)

    def _pace_family(self, snap: Snapshot) -> Metric:
        speed = _family(
            PREFIX + "rank_relative_speed",
            "The rank's pace against the job's median rank over the last window: the median "
            "rank's busy (compute) time over this rank's; 1 is the median, 0.5 half as fast. "
            "A rank is scored slow under 1/1.3 (--slow-threshold) for two windows in a row.",
        )
        for job in snap.jobs:
            for p in job.pace:
                if p.relative > 0:  # a rank with no busy time has no pace to compare
                    labels = {"job": job.job_id, "rank": str(p.rank), self.hostname_label: p.host}
                    speed.samples.append(Sample(speed.name, labels, 1.0 / p.relative))
        return speed

    def _rank_labels(self, job_id: str, rank: RankSteps) -> dict[str, str]:
        return {"job": job_id, "rank": str(rank.key), self.hostname_label: rank.host}
