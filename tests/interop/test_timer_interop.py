"""Timer messages with the real clients: the C++ 4.x client's ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC``
(surviving a kill -9 of rocketpy), the 5.x Python client's delivery timestamp, and both across
protocol generations."""

from __future__ import annotations

import time

from twisted.trial.unittest import SkipTest

from tests.interop.test_cpp import _SKIP as CPP_SKIP
from tests.interop.test_cpp import CppHarness, Rocketpy
from tests.interop.test_v5 import V5Harness


def _now_ms() -> int:
    return int(time.time() * 1000)


class CppTimerTests(CppHarness):
    def test_timer_properties_survive_kill_9(self) -> None:
        """C++ sends with TIMER_DELIVER_MS (4 s ahead) and TIMER_DELAY_SEC=3; rocketpy is killed
        with SIGKILL while they wait and started again on the same store: both reach the C++
        consumer, not before their time, with Java's timer properties."""
        self.start()
        deliver_ms = _now_ms() + 4000
        self.produce("InteropTimer", "sync", 1, "--keys", "at", "--prop", f"TIMER_DELIVER_MS={deliver_ms}")
        self.produce("InteropTimer", "sync", 1, "--keys", "sec", "--body-prefix", "sec",
                     "--prop", "TIMER_DELAY_SEC=3")
        sent_ms = _now_ms()
        process = self.rocketpy.process
        assert process is not None
        process.kill()  # kill -9: no clean stop, no final checkpoint
        process.wait()
        restarted = Rocketpy(self.workdir)  # the same store directory, new ports
        self.addCleanup(restarted.stop)
        restarted.start()
        self.rocketpy = restarted
        got = self.consume("InteropTimer", "CID_INTEROP_TIMER", 2, "--timeout", "30", "--linger", "0.5",
                           "--show-prop", "TIMER_DELIVER_MS", "--show-prop", "TIMER_OUT_MS",
                           "--show-prop", "REAL_TOPIC", "--show-prop", "TIMER_DEQUEUE_MS")
        by_keys = {m["keys"]: m for m in got}
        self.assertEqual(sorted(by_keys), ["at-0", "sec-0"])
        at = by_keys["at-0"]
        self.assertEqual(at["topic"], "InteropTimer")
        self.assertEqual(at["props"]["TIMER_DELIVER_MS"], str(deliver_ms))
        self.assertEqual(at["props"]["REAL_TOPIC"], "")
        self.assertGreaterEqual(at["store_timestamp"], deliver_ms)
        self.assertGreaterEqual(int(at["props"]["TIMER_DEQUEUE_MS"]), deliver_ms)
        self.assertGreaterEqual(by_keys["sec-0"]["store_timestamp"], sent_ms + 3000 - 1000)  # 3 s after its send
        self.assertEqual(len(got), 2)


class V5TimerTests(V5Harness):
    def test_delivery_timestamp_across_generations(self) -> None:
        """5.x Producer with a delivery timestamp → 5.x SimpleConsumer (DELAY, its timestamp, not
        before it) and the C++ 4.x consumer (TIMER_DELIVER_MS); C++ TIMER_DELIVER_MS → 5.x consumer."""
        deliver_ms = _now_ms() + 3000
        self.v5("produce", "--topic", "TT5", "--count", "2", "--delivery-at", str(deliver_ms))
        got = self.received("TT5", "GT5", 2)
        self.assertEqual(sorted(e["body"] for e in got), ["v5-0", "v5-1"])
        for e in got:
            self.assertEqual(e["delivery_timestamp"], deliver_ms)
            self.assertGreaterEqual(e["received_ms"], deliver_ms)
        if CPP_SKIP is not None:
            raise SkipTest(CPP_SKIP)
        four = self.consume("TT5", "CID_TT5", 2, "--timeout", "30", "--show-prop", "TIMER_DELIVER_MS")
        self.assertEqual([m["props"]["TIMER_DELIVER_MS"] for m in four], [str(deliver_ms)] * 2)
        cpp_ms = _now_ms() + 3000
        self.produce("TC5", "sync", 1, "--body-prefix", "cpp", "--prop", f"TIMER_DELIVER_MS={cpp_ms}")
        [five] = self.received("TC5", "GC5", 1)
        self.assertEqual((five["body"], five["delivery_timestamp"]), ("cpp-0", cpp_ms))
        self.assertGreaterEqual(five["received_ms"], cpp_ms)

    def test_recall(self) -> None:
        """5.x Producer: two timer messages due together, the first recalled with its receipt's recall
        handle (Producer.recall_message answers its message id); the 5.x SimpleConsumer gets only the
        second, and nothing more while the rest of its 6 s pass."""
        deliver_ms = _now_ms() + 3000
        events = self.v5("produce", "--topic", "TR5", "--count", "2", "--delivery-at", str(deliver_ms), "--recall", "1")
        sent = [e for e in events if e["event"] == "sent"]
        self.assertTrue(all(e["recall_handle"] for e in sent), sent)
        recalled = [e for e in events if e["event"] == "recalled"]
        self.assertEqual([e["message_id"] for e in recalled], [sent[0]["message_id"]])
        got = self.received("TR5", "GR5", 2, "--timeout", "6")
        self.assertEqual([e["body"] for e in got], ["v5-1"])
        self.assertGreaterEqual(got[0]["received_ms"], deliver_ms)
