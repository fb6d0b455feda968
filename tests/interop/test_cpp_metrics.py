"""``--http`` in a real ``python -m twisted rocketpy`` process, fed by the official C++ client."""

from __future__ import annotations

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.interop.test_cpp import CppHarness
from tests.ports import free_port

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    return found[0] if len(found) == 1 else None


class CppMetricsTests(CppHarness):
    def test_produced_then_consumed(self) -> None:
        """C++ sends show in the topic's offset and rates; once a C++ consumer took them all, its
        committed offset is the topic's and its lag 0."""
        port = free_port()
        self.start(extra=("--http", f"tcp:{port}:interface=127.0.0.1"))
        topic, group = "InteropMetrics", "CID_INTEROP_METRICS"
        self.produce(topic, "sync", 5)
        produced = scrape(port)
        self.assertEqual(value(produced, "rocketmq_producer_offset", topic=topic), 5)
        self.assertGreater(value(produced, "rocketmq_producer_tps", topic=topic) or 0, 0)
        self.assertGreater(value(produced, "rocketmq_broker_tps") or 0, 0)
        self.assertEqual(len(self.consume(topic, group, 5)), 5)
        deadline = time.monotonic() + 15  # the consumer's offsets reach the broker on its shutdown
        while True:
            consumed = scrape(port)
            where = {"topic": topic, "group": group}
            if value(consumed, "rocketmq_consumer_offset", **where) == 5 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(value(consumed, "rocketmq_consumer_offset", **where), 5)
        self.assertEqual(value(consumed, "rocketmq_message_accumulation", **where), 0)
        self.assertEqual(value(consumed, "rocketmq_group_get_latency_by_storetime", **where), 0)
        self.assertGreater(value(consumed, "rocketmq_consumer_tps", **where) or 0, 0)
