"""ACL with the official C++ client (PyPI ``rocketmq`` 0.4.4, ``set_session_credentials``) against a
rocketpy process started with ``--acl-enable``."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from tests.acl.test_broker import ACL, REFUSED
from tests.interop.test_client_cpp import CppHarness


class CppAclTests(CppHarness):
    def rocketpy_options(self, workdir: str) -> tuple[str, ...]:
        acl_path = os.path.join(workdir, "plain_acl.yml")
        with open(acl_path, "w") as f:
            f.write(ACL)
        return ("--acl-enable", "--acl-file", acl_path)

    def refusals(self) -> list[tuple[int, str]]:
        """``(request code, remark)`` of every refusal in rocketpy's (JSON) log so far."""
        with open(self.rocketpy.log_path, encoding="utf-8") as f:
            records = [json.loads(r) for r in f.read().split("\x1e") if r.strip()]
        return [(r["code"], r["remark"]) for r in records if "refused: {remark}" in r.get("log_format", "")]

    def produce(self, topic: str, *credentials: str) -> list[dict[str, Any]]:
        keys = ["--access-key", credentials[0], "--secret-key", credentials[1]] if credentials else []
        return [e for e in self.cpp("produce", "--topic", topic, "--count", "2", "--report-errors",
                                    "--body-prefix", "acl", "--linger", "0", *keys)
                if e["event"] in ("sent", "error")]

    def test_right_key_works(self) -> None:
        """Signed by the C++ client with the right key: sent, and consumed by a C++ consumer of GroupA."""
        sent = self.produce("TopicA", "RocketMQ", "12345678")
        self.assertEqual([e["event"] for e in sent], ["sent", "sent"], sent)
        got = [e for e in self.cpp("consume", "--topic", "TopicA", "--group", "GroupA", "--expect", "2",
                                   "--timeout", "30", "--linger", "0.2",
                                   "--access-key", "RocketMQ", "--secret-key", "12345678")
               if e["event"] == "message"]
        self.assertEqual(sorted(base64.b64decode(e["body"]) for e in got), [b"acl-0", b"acl-1"])
        # only the producer's UNREGISTER_CLIENT, whose consumerGroup is "" (Java refuses it the same way)
        self.assertEqual({code for code, _ in self.refusals()}, {35})

    def test_wrong_secret_permission_and_no_credentials_are_refused(self) -> None:
        """Wrong secret, a topic without PUB, and no credentials: every send refused, with Java's remark."""
        cases = [
            (("RocketMQ", "wrong-secret"), "TopicA", "Check signature failed for accessKey=RocketMQ"),
            (("RocketMQ", "12345678"), "TopicB", "No default permission for topic:TopicB"),
            ((), "TopicA", "No acl config for "),  # the C++ client always sends AccessKey, here ""
        ]
        for credentials, topic, message in cases:
            events = self.produce(topic, *credentials)
            self.assertEqual([e["event"] for e in events], ["error", "error"], events)
            self.assertIn((10, REFUSED + message), self.refusals())  # SEND_MESSAGE
        self.assertNotIn("Traceback", self.rocketpy.log_tail(2000))

    def test_consumer_with_wrong_secret_gets_nothing(self) -> None:
        """A C++ push consumer with a wrong secret: its heartbeats are refused and no message reaches it."""
        sent = self.produce("TopicA", "RocketMQ", "12345678")
        self.assertEqual([e["event"] for e in sent], ["sent", "sent"], sent)
        events = self.cpp("consume", "--topic", "TopicA", "--group", "GroupA", "--expect", "1", "--timeout", "3",
                          "--linger", "0", "--access-key", "RocketMQ", "--secret-key", "wrong-secret")
        self.assertEqual([e for e in events if e["event"] == "message"], [])
        self.assertIn((34, REFUSED + "Check signature failed for accessKey=RocketMQ"), self.refusals())  # HEART_BEAT
