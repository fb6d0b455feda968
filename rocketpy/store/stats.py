"""Store counters: puts, records, bytes (also per topic), failures by status, put latency
buckets and flush latency buckets."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

# Upper bounds in ms of RocketMQ's putMessageDistributeTime buckets; the last bucket is open.
LATENCY_BOUNDS_MS = (0, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)
# Upper bounds in seconds of the commit-log flush (fdatasync) latency buckets; the last is open.
FLUSH_BOUNDS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class StoreStats:
    """Counts what the commit log did; cheap enough for every put (no locking: one writer)."""

    def __init__(self) -> None:
        self.puts = 0
        self.records = 0
        self.bytes = 0
        self.max_put_ms = 0
        self.put_ms_total = 0
        self.failures: Counter[str] = Counter()
        self.latency_buckets = [0] * (len(LATENCY_BOUNDS_MS) + 1)
        #: bytes stored per topic (the topic a record is stored under: SCHEDULE_TOPIC_XXXX while delayed)
        self.topic_bytes: dict[str, int] = {}
        self.flush_buckets = [0] * (len(FLUSH_BOUNDS_S) + 1)
        self.flushes = 0
        self.flush_seconds_total = 0.0

    def record_put(self, topic: str, records: int, nbytes: int, elapsed_ms: int) -> None:
        """One successful put to ``topic`` of ``records`` records and ``nbytes`` bytes that took ``elapsed_ms``."""
        self.puts += 1
        self.records += records
        self.bytes += nbytes
        self.put_ms_total += elapsed_ms
        sizes = self.topic_bytes
        sizes[topic] = sizes.get(topic, 0) + nbytes
        self.latency_buckets[bisect_left(LATENCY_BOUNDS_MS, elapsed_ms)] += 1
        if elapsed_ms > self.max_put_ms:
            self.max_put_ms = elapsed_ms

    def record_flush(self, seconds: float) -> None:
        """One commit-log flush that made bytes durable in ``seconds``."""
        self.flushes += 1
        self.flush_seconds_total += seconds
        self.flush_buckets[bisect_left(FLUSH_BOUNDS_S, seconds)] += 1

    def record_failure(self, status: str) -> None:
        """One put refused or failed with ``status``."""
        self.failures[status] += 1

    def latency_distribution(self) -> dict[str, int]:
        """Bucket label (``"<=10ms"``, ..., ``">10000ms"``) → number of puts."""
        labels = [f"<={bound}ms" for bound in LATENCY_BOUNDS_MS] + [f">{LATENCY_BOUNDS_MS[-1]}ms"]
        return dict(zip(labels, self.latency_buckets))

    def snapshot(self) -> dict[str, object]:
        """Every counter, for logs and admin commands."""
        return {
            "puts": self.puts, "records": self.records, "bytes": self.bytes, "max_put_ms": self.max_put_ms,
            "failures": dict(self.failures), "latency": self.latency_distribution(),
        }
