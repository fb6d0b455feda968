"""rocketpy's client against the official C++ client (PyPI ``rocketmq`` 0.4.4), through a rocketpy process.

The C++ client runs in child processes (``tests/interop/cpp_client.py``); rocketpy's side uses
the blocking facade, so the test itself needs no reactor.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from typing import Any

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from rocketpy.blocking import Producer, PushConsumer
from rocketpy.client import new_message
from rocketpy.client.subscription import client_msg_id
from tests.interop.cpp_client import body_of
from tests.interop.test_cpp import _SKIP, CHILD_TIMEOUT, HARNESS, Rocketpy, child_events


class CppHarness(SynchronousTestCase):
    """A rocketpy process per test (with :meth:`rocketpy_options`) and the C++ harness in children."""

    def rocketpy_options(self, workdir: str) -> tuple[str, ...]:
        """More ``twist rocketpy`` options; files they name go in *workdir*."""
        return ()

    def setUp(self) -> None:
        if _SKIP is not None:
            raise SkipTest(_SKIP)
        workdir = os.path.abspath(self.mktemp())
        self.home = os.path.join(workdir, "home")
        os.makedirs(self.home)
        self.rocketpy = Rocketpy(workdir, extra=self.rocketpy_options(workdir))
        self.rocketpy.start()
        self.addCleanup(self.rocketpy.stop)

    def cpp(self, *args: str) -> list[dict[str, Any]]:
        """Run the C++ harness; its JSON events (fails with its stderr and rocketpy's log)."""
        child = subprocess.run(
            [sys.executable, HARNESS, *args, "--namesrv", self.rocketpy.namesrv], capture_output=True, text=True,
            env=dict(os.environ, HOME=self.home), timeout=CHILD_TIMEOUT,
        )
        events = child_events(child.returncode, child.stdout, child.stderr)
        if events is None:
            self.fail(f"C++ {args[0]} failed:\n{child.stderr[-2000:]}\n--- rocketpy ---\n{self.rocketpy.log_tail()}")
        return events


class CppInteropTests(CppHarness):
    def test_python_producer_to_cpp_consumer(self) -> None:
        """Messages from rocketpy's producer, one zlib-compressed, reach the C++ consumer intact."""
        bodies = [b"py-0", b"py-1", ("py-2|" + "abcdefghij" * 900).encode()]
        with Producer("PG_INTEROP", self.rocketpy.namesrv) as producer:
            ids = [producer.send(new_message("InteropPy", b, tags="TagA", keys=f"k{i}")).msg_id
                   for i, b in enumerate(bodies)]
        got = [e for e in self.cpp("consume", "--topic", "InteropPy", "--group", "CG_CPP", "--expect", "3")
               if e["event"] == "message"]
        self.assertEqual(sorted(base64.b64decode(e["body"]) for e in got), sorted(bodies))
        self.assertEqual({e["tags"] for e in got}, {"TagA"})
        self.assertEqual(sorted(e["keys"] for e in got), ["k0", "k1", "k2"])
        self.assertEqual(sorted(e["msg_id"] for e in got), sorted(ids))

    def test_cpp_producer_to_python_consumer(self) -> None:
        """Messages from the C++ producer, one compressed by it, reach rocketpy's push consumer."""
        sent = [e for e in self.cpp("produce", "--topic", "InteropCpp", "--mode", "sync", "--count", "2",
                                    "--tag", "TagC", "--keys", "cpp", "--body-prefix", "cpp")
                if e["event"] == "sent"]
        sent += [e for e in self.cpp("produce", "--topic", "InteropCpp", "--mode", "sync", "--count", "1",
                                     "--tag", "TagC", "--keys", "big", "--body-prefix", "big", "--size", "9000")
                 if e["event"] == "sent"]
        consumer = PushConsumer("CG_PY", self.rocketpy.namesrv).subscribe("InteropCpp", "TagC").start()
        try:
            got = [consumer.receive(timeout=30) for _ in range(3)]
        finally:
            consumer.shutdown()
        self.assertNotIn(None, got)
        received = {m.body: m for m in got if m is not None}
        expected = [body_of("cpp", 0, 0), body_of("cpp", 1, 0), body_of("big", 0, 9000)]
        self.assertEqual(sorted(received), sorted(b.encode() for b in expected))
        self.assertEqual({m.tags for m in received.values()}, {"TagC"})
        self.assertEqual(sorted(client_msg_id(m) for m in received.values()), sorted(e["msg_id"] for e in sent))
