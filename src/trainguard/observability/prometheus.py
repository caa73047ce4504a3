"""The controller's metric families (``trainguard.observability.metrics``) as a Prometheus collector.

Shared by every backend that serves ``/metrics``: the local control plane reads its SQLite store at each
scrape, the operator its watch cache of the job resources. Either way the job metrics are recomputed from
the stored status, so a restarted control plane or operator reports the same values, neither reset nor
doubled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from trainguard.observability.metrics import ControllerStats, Family, JobSnapshot, MetricType, job_families


class JobsCollector(Collector):
    """At every scrape: the jobs' metrics from ``snapshots()``, and the reconcile loop's own figures."""

    def __init__(self, snapshots: Callable[[], Iterable[JobSnapshot]], stats: ControllerStats) -> None:
        self.snapshots = snapshots
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        for family in [*job_families(list(self.snapshots())), *self.stats.families()]:
            yield to_prometheus(family)


def to_prometheus(family: Family) -> Metric:
    spec = family.spec
    labels = list(spec.labels)
    if spec.type is MetricType.HISTOGRAM:
        histogram = HistogramMetricFamily(spec.name, spec.help, labels=labels)
        for sample in family.histograms:
            buckets = [
                (repr(float(bound)), float(n)) for bound, n in zip(spec.buckets, sample.counts, strict=True)
            ]
            buckets.append(("+Inf", float(sample.count)))
            histogram.add_metric(list(sample.labels), buckets, sample.sum)
        return histogram
    metric: CounterMetricFamily | GaugeMetricFamily
    if spec.type is MetricType.COUNTER:
        metric = CounterMetricFamily(spec.name, spec.help, labels=labels)
    else:
        metric = GaugeMetricFamily(spec.name, spec.help, labels=labels)
    for value in family.samples:
        metric.add_metric(list(value.labels), value.value)
    return metric
