"""Retry after RECONSUME_LATER and delayed sends with the official C++ client (PyPI ``rocketmq`` 0.4.4).

Uses the harness of :mod:`tests.interop.test_cpp` (a rocketpy process, C++ children). The C++
1.2 client sends CONSUMER_SEND_MSG_BACK with only offset/group/delayLevel 0, so the broker
chooses level 3 (10 s); its wrapper exposes no query by id.
"""

from __future__ import annotations

from tests.interop.test_cpp import CppHarness


class CppFeatureTests(CppHarness):
    def test_retry_after_reconsume_later(self) -> None:
        """RECONSUME_LATER once: the message comes back ~10 s later under its own topic, reconsumeTimes 1."""
        self.start()
        topic = "InteropRetry"
        [sent] = self.produce(topic, "sync", 1, "--keys", "retry", "--body-prefix", "again")
        got = self.consume(topic, "CID_INTEROP_RETRY", 2, "--fail-times", "1", "--timeout", "40", "--linger", "1")
        self.assertEqual([(m["topic"], m["reconsume_times"]) for m in got[:2]], [(topic, 0), (topic, 1)])
        first, second = got[0], got[1]
        self.assertEqual([self.body(m) for m in (first, second)], [b"again-0", b"again-0"])
        self.assertEqual(second["keys"], "retry-0")
        self.assertGreaterEqual(second["store_timestamp"] - first["store_timestamp"], 9_000)
        self.assertEqual(first["msg_id"], sent["msg_id"])
        self.assertEqual(len(got), 2)

    def test_delay_level_on_send(self) -> None:
        """A message sent with delay level 2 (5 s) is stored on its topic about 5 s after it was born."""
        self.start()
        topic = "InteropDelay"
        self.produce(topic, "sync", 1, "--keys", "late", "--delay-level", "2")
        [msg] = self.consume(topic, "CID_INTEROP_DELAY", 1, "--timeout", "30", "--linger", "0.5")
        self.assertEqual((self.body(msg), msg["keys"]), (b"body-0", "late-0"))
        self.assertGreaterEqual(msg["store_timestamp"] - msg["born_timestamp"], 4_900)
