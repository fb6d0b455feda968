"""Store counters: puts, records, bytes, failures by status and put latency buckets."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

# Upper bounds in ms of RocketMQ's putMessageDistributeTime buckets; the last bucket is open.
LATENCY_BOUNDS_MS = (0, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)


class StoreStats:
    """Counts what the commit log did; cheap enough for every put (no locking: one writer)."""

    def __init__(self) -> None:
        self.puts = 0
        self.records = 0
        self.bytes = 0
        self.max_put_ms = 0
        self.failures: Counter[str] = Counter()
        self.latency_buckets = [0] * (len(LATENCY_BOUNDS_MS) + 1)

    def record_put(self, records: int, nbytes: int, elapsed_ms: int) -> None:
        """One successful put of ``records`` records and ``nbytes`` bytes that took ``elapsed_ms``."""
        self.puts += 1
        self.records += records
        self.bytes += nbytes
        self.latency_buckets[bisect_left(LATENCY_BOUNDS_MS, elapsed_ms)] += 1
        if elapsed_ms > self.max_put_ms:
            self.max_put_ms = elapsed_ms

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
