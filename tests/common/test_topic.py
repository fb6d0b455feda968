"""Topic names: what every layer checks before a send (TopicValidator)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.topic import is_send_forbidden, send_topic_problem, topic_problem


class ValidationTests(SynchronousTestCase):
    def test_topic_problem(self) -> None:
        """Valid names pass; blank, bad characters and over-long names are named."""
        self.assertIsNone(topic_problem("%RETRY%G_1-a|b"))
        self.assertIn("blank", topic_problem(" "))
        self.assertIn("illegal characters", topic_problem("a b"))
        self.assertIn("longer", topic_problem("a" * 128))
        self.assertIsNone(topic_problem("a" * 127))

    def test_send_forbidden(self) -> None:
        """System topics such as SCHEDULE_TOPIC_XXXX cannot be sent to; TBW102 can."""
        self.assertTrue(is_send_forbidden("SCHEDULE_TOPIC_XXXX"))
        self.assertTrue(is_send_forbidden("RMQ_SYS_TRANS_HALF_TOPIC"))
        self.assertFalse(is_send_forbidden("TBW102"))
        self.assertIn("forbidden", send_topic_problem("SELF_TEST_TOPIC"))
        self.assertIsNone(send_topic_problem("T1"))
        self.assertIn("illegal", send_topic_problem("T 1"))
