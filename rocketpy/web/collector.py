"""The broker's Prometheus metrics: a ``prometheus_client`` collector that reads the broker's
state when scraped (doc/observability.md).

``rocketmq_*`` families carry rocketmq-exporter's names, types (gauges) and labels, so its
Grafana dashboard (10477) works unchanged; ``rocketpy_*`` families are rocketpy's own.
Everything is read from memory on the reactor thread; the only store reads (the store-time
lags) are made beforehand in the read pool and handed in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rocketpy.broker.admin import VERSION_DESC
from rocketpy.broker.overview import GroupProgress, connections_by_language
from rocketpy.broker.traffic import topic_offsets
from rocketpy.common.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from rocketpy.remoting.codes import ROCKETPY_VERSION
from rocketpy.store.stats import FLUSH_BOUNDS_S, LATENCY_BOUNDS_MS, StoreStats
from rocketpy.store.status import PutMessageStatus

TOPIC = ["cluster", "broker", "topic"]
GROUP = ["cluster", "broker", "topic", "group"]
BROKER = ["cluster", "brokerIP", "broker"]
RUNTIME = ["cluster", "brokerIP", "brokerHost", "des", "boottime", "broker_version"]
OWN = ["cluster", "broker"]
#: rocketmq-exporter's put-latency families, one per bucket of ``LATENCY_BOUNDS_MS`` (and the open one).
PMDT_NAMES = ("0ms", "0to10ms", "10to50ms", "50to100ms", "100to200ms", "200to500ms", "500to1s", "1to2s",
              "2to3s", "3to4s", "4to5s", "5to10s", "10stomore")
#: Java's MessageModel ordinals (rocketmq_group_diff's msgModel label).
MODEL_ORDINALS = {"BROADCASTING": "0", "CLUSTERING": "1"}


def _cumulative(counts: Iterable[int], bounds: Iterable[float]) -> list[tuple[str, float]]:
    """Prometheus histogram buckets (``le`` → cumulative count) from per-bucket counts."""
    out: list[tuple[str, float]] = []
    total = 0
    for bound, count in zip([*map(str, bounds), "+Inf"], counts):
        total += count
        out.append((bound, total))
    return out


def _gauges(labels: list[str], *families: tuple[str, str]) -> list[GaugeMetricFamily]:
    """Empty gauge families of ``(name, help)`` with ``labels``."""
    return [GaugeMetricFamily(name, text, labels=labels) for name, text in families]


class BrokerCollector(Collector):
    """One scrape of one broker.

    :param broker: the :class:`~rocketpy.broker.controller.BrokerService`.
    :param progress: the consumer groups' progress (:func:`~rocketpy.broker.overview.group_progress`).
    :param lags: ms waited by each ``(group, topic)``'s next message
        (:func:`~rocketpy.broker.overview.store_time_lags`).
    """

    def __init__(self, broker: Any, progress: list[GroupProgress], lags: dict[tuple[str, str], int]) -> None:
        self._broker = broker
        self._progress = progress
        self._lags = lags
        config = broker.config
        self._cluster, self._name = config.cluster_name, config.broker_name

    def collect(self) -> Iterator[Metric]:
        rates = self._broker.traffic.rates()
        yield from self._broker_rates(self._broker.traffic.total_rates())
        yield from self._topics(rates)
        yield from self._groups(rates)
        yield from self._producers()
        stats = self._broker.store.stats
        yield from self._runtime(stats)
        yield from self._store(stats)
        yield from self._clients()
        yield from self._features()

    # -- rocketmq-exporter --

    def _broker_rates(self, rates: dict[Hashable, float]) -> Iterator[Metric]:
        labels = [self._cluster, self._broker.config.advertised_address, self._name]
        for name, key, text in (("rocketmq_broker_tps", "put", "Messages stored per second (last minute)"),
                                ("rocketmq_broker_qps", "get", "Messages pulled per second (last minute)")):
            family = GaugeMetricFamily(name, text, labels=BROKER)
            family.add_metric(labels, rates.get(key, 0.0))
            yield family

    def _topics(self, rates: dict[Hashable, float]) -> Iterator[Metric]:
        tps, size, offset, retry = _gauges(
            TOPIC,
            ("rocketmq_producer_tps", "Messages stored per second in the topic"),
            ("rocketmq_producer_message_size", "Bytes stored per second in the topic"),
            ("rocketmq_producer_offset", "Messages in the topic: its queues' max offsets"),
            ("rocketmq_topic_retry_offset", "Max offsets of a retry topic"),
        )
        dlq = GaugeMetricFamily("rocketmq_topic_dlq_offset", "Max offsets of a group's dead letter topic",
                                labels=["cluster", "broker", "group"])
        for topic, count in sorted(topic_offsets(self._broker.topics, self._broker.store).items()):
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                retry.add_metric([self._cluster, self._name, topic], count)
                continue
            if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                dlq.add_metric([self._cluster, self._name, topic[len(DLQ_GROUP_TOPIC_PREFIX):]], count)
                continue
            labels = [self._cluster, self._name, topic]
            tps.add_metric(labels, rates.get(("put", topic), 0.0))
            size.add_metric(labels, rates.get(("put_bytes", topic), 0.0))
            offset.add_metric(labels, count)
        yield from (tps, size, offset, retry, dlq)

    def _groups(self, rates: dict[Hashable, float]) -> Iterator[Metric]:
        tps, size, offset, latency, lag = _gauges(
            GROUP,
            ("rocketmq_consumer_tps", "Messages pulled per second by the group"),
            ("rocketmq_consumer_message_size", "Bytes pulled per second by the group"),
            ("rocketmq_consumer_offset", "The group's committed offsets, summed over queues"),
            ("rocketmq_group_get_latency_by_storetime", "Ms the group's oldest unconsumed message has waited"),
            ("rocketmq_message_accumulation", "Messages stored and not yet consumed by the group"),
        )
        diff = GaugeMetricFamily("rocketmq_group_diff", "Messages not yet consumed by a clustering group",
                                 labels=["group", "topic", "countOfOnlineConsumers", "msgModel"])
        for p in self._progress:
            labels = [self._cluster, self._name, p.topic, p.group]
            tps.add_metric(labels, rates.get(("get", p.topic, p.group), 0.0))
            size.add_metric(labels, rates.get(("get_bytes", p.topic, p.group), 0.0))
            offset.add_metric(labels, p.consumer_offset)
            latency.add_metric(labels, self._lags.get((p.group, p.topic), 0))
            lag.add_metric(labels, p.lag)
            if p.message_model == "CLUSTERING":
                diff.add_metric([p.group, p.topic, str(p.online), MODEL_ORDINALS[p.message_model]], p.lag)
        yield from (tps, size, offset, latency, lag, diff)

    def _producers(self) -> Iterator[Metric]:
        producers = self._broker.producers
        family = GaugeMetricFamily("rocketmq_producer_count", "Producers connected, per producer group",
                                   labels=["cluster", "broker", "group"])
        for group in sorted(producers.groups()):
            family.add_metric([self._cluster, self._name, group], len(producers.channels_of(group)))
        yield family

    def _runtime(self, stats: StoreStats) -> Iterator[Metric]:
        """rocketmq-exporter's ``rocketmq_brokeruntime_*`` families rocketpy measures."""
        store = self._broker.store
        labels = [self._cluster, self._broker.config.advertised_address, "", VERSION_DESC,
                  str(int(self._broker.boot_time * 1000)), str(ROCKETPY_VERSION)]
        values: list[tuple[str, float]] = [
            (f"pmdt_{name}", count) for name, count in zip(PMDT_NAMES, stats.latency_buckets)]
        traffic = self._broker.traffic
        for span in (10, 60, 600):
            rates = traffic.total_rates(span)
            found, missed = rates.get("get_found", 0.0), rates.get("get_miss", 0.0)
            values += [(f"put_tps{span}", rates.get("put", 0.0)), (f"gettransfered_tps{span}", rates.get("get", 0.0)),
                       (f"getfound_tps{span}", found), (f"getmiss_tps{span}", missed),
                       (f"gettotal_tps{span}", found + missed)]
        values += [
            ("put_message_average_size", stats.bytes / stats.puts if stats.puts else 0.0),
            ("send_threadpoolqueue_headwait_timemills", int(store.queue_wait() * 1000)),
            ("commitlog_disk_ratio", max(store.checked_disk_ratio, 0.0)),
            ("commitlog_maxoffset", store.max_physical_offset),
            ("commitlog_minoffset", store.min_physical_offset),
            ("putmessage_entire_time_max", stats.max_put_ms),
            ("put_message_size_total", stats.bytes),
            ("putmessage_times_total", stats.puts),
        ]
        for name, value in values:
            family = GaugeMetricFamily(f"rocketmq_brokeruntime_{name}", name, labels=RUNTIME)
            family.add_metric(labels, value)
            yield family

    # -- rocketpy's own --

    def _own(self, family: Any, value: float, *extra: str) -> Any:
        family.add_metric([self._cluster, self._name, *extra], value)
        return family

    def _store(self, stats: StoreStats) -> Iterator[Metric]:
        labels = [self._cluster, self._name]
        put = HistogramMetricFamily("rocketpy_put_latency_seconds",
                                    "Time a put held the commit-log lock (ms resolution)", labels=OWN)
        put.add_metric(labels, _cumulative(stats.latency_buckets, [b / 1000 for b in LATENCY_BOUNDS_MS]),
                       stats.put_ms_total / 1000)
        yield put
        flush = HistogramMetricFamily("rocketpy_flush_latency_seconds",
                                      "Time a commit-log flush (fdatasync) took", labels=OWN)
        flush.add_metric(labels, _cumulative(stats.flush_buckets, FLUSH_BOUNDS_S), stats.flush_seconds_total)
        yield flush
        store, node = self._broker.store, self._broker.server
        refused = Counter(dict(stats.failures))  # copied at once: the store's writer thread adds to it
        refused.update(store.refused)
        family = CounterMetricFamily("rocketpy_put_refused", "Puts refused or failed, by status",
                                     labels=[*OWN, "reason"])
        for status in PutMessageStatus:
            if status is not PutMessageStatus.PUT_OK:
                self._own(family, refused.get(status.value, 0), status.value)
        yield family
        busy = refused.get("OS_PAGECACHE_BUSY", 0) + node.busy_rejections
        yield self._own(CounterMetricFamily(
            "rocketpy_page_cache_busy", "Sends refused because the store was busy (RocketMQ's flow control)",
            labels=OWN), busy)
        yield self._own(GaugeMetricFamily("rocketpy_commitlog_bytes", "Bytes the commit log holds", labels=OWN),
                        store.max_physical_offset - store.min_physical_offset)
        yield self._own(GaugeMetricFamily(
            "rocketpy_disk_used_ratio", "Used ratio of the store's partitions at the last check (-1: unreadable)",
            labels=OWN), store.checked_disk_ratio)

    def _clients(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("rocketpy_connections", "Client connections (with a heartbeat) by language",
                                   labels=[*OWN, "language"])
        for language, count in sorted(connections_by_language(self._broker.tables).items()):
            self._own(family, count, language)
        yield family
        yield self._own(GaugeMetricFamily("rocketpy_channels", "Open connections to the broker port", labels=OWN),
                        len(self._broker.server.channels))
        yield self._own(GaugeMetricFamily("rocketpy_held_pulls", "Pull requests long polling holds now",
                                          labels=OWN), self._broker.tables.held_pulls())

    def _features(self) -> Iterator[Metric]:
        broker = self._broker
        delays = GaugeMetricFamily("rocketpy_delay_backlog", "Delayed messages not yet delivered, per level",
                                   labels=[*OWN, "level"])
        for level, count in broker.schedule.backlogs().items():
            self._own(delays, count, str(level))
        yield delays
        yield self._own(GaugeMetricFamily("rocketpy_timer_backlog", "Timer messages parked and not yet delivered",
                                          labels=OWN), broker.timer.backlog())
        yield self._own(GaugeMetricFamily("rocketpy_transaction_half_backlog",
                                          "Half (prepared) messages the transaction checker has not passed",
                                          labels=OWN), broker.transaction_check.half_backlog())
        behind = GaugeMetricFamily("rocketpy_slave_lag_bytes", "Commit-log bytes a connected slave lacks",
                                   labels=[*OWN, "slave"])
        late = GaugeMetricFamily("rocketpy_slave_lag_seconds", "Seconds a connected slave has lacked some bytes",
                                 labels=[*OWN, "slave"])
        for address, nbytes, seconds in broker.ha.slave_lags() if broker.ha is not None else ():
            self._own(behind, nbytes, address)
            self._own(late, seconds, address)
        yield from (behind, late)
        if broker.ha_client is not None:
            link = GaugeMetricFamily("rocketpy_slave_master_link", "1 while this slave is linked to its master",
                                     labels=OWN)
            yield self._own(link, int(broker.ha_client.connected))
