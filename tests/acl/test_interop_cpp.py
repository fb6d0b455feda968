"""ACL with the official C++ client (PyPI ``rocketmq`` 0.4.4, ``set_session_credentials``) against a
rocketpy process started with ``--acl-enable``."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from typing import Any

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from tests.acl.test_broker import ACL
from tests.interop.test_cpp import _SKIP, CHILD_TIMEOUT, HARNESS, Rocketpy, child_events

REFUSED = "org.apache.rocketmq.acl.common.AclException: "


class CppAclTests(SynchronousTestCase):
    def setUp(self) -> None:
        if _SKIP is not None:
            raise SkipTest(_SKIP)
        workdir = os.path.abspath(self.mktemp())
        self.home = os.path.join(workdir, "home")
        os.makedirs(self.home)
        acl_path = os.path.join(workdir, "plain_acl.yml")
        with open(acl_path, "w") as f:
            f.write(ACL)
        self.rocketpy = Rocketpy(workdir, extra=("--acl-enable", "--acl-file", acl_path))
        self.rocketpy.start()
        self.addCleanup(self.rocketpy.stop)

    def cpp(self, *args: str) -> list[dict[str, Any]]:
        child = subprocess.run(
            [sys.executable, HARNESS, *args, "--namesrv", self.rocketpy.namesrv], capture_output=True, text=True,
            env=dict(os.environ, HOME=self.home), timeout=CHILD_TIMEOUT,
        )
        events = child_events(child.returncode, child.stdout, child.stderr)
        if events is None:
            self.fail(f"C++ {args[0]} failed:\n{child.stderr[-2000:]}\n--- rocketpy ---\n{self.rocketpy.log_tail()}")
        return events

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
