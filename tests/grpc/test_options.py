"""``--grpc-listen`` and ``--grpc-advertised-address``: defaults per role, mistakes as usage errors."""

from __future__ import annotations

import asyncio
import os
import threading

from twisted.internet.testing import MemoryReactorClock
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.grpc.endpoint import listen_address
from rocketpy.grpc.server import GrpcService, _new_event_loop
from rocketpy.tap import makeService
from tests.acl.test_broker import ACL
from tests.test_tap import _parse


class GrpcOptionsTests(SynchronousTestCase):
    def test_defaults_per_role(self) -> None:
        """On at 127.0.0.1:8081 with --role all; off with --role broker and namesrv, and with none."""
        self.assertEqual(_parse()["grpc-listen"], "tcp:8081:interface=127.0.0.1")
        self.assertIsNone(_parse("--role", "broker")["grpc-listen"])
        self.assertIsNone(_parse("--role", "namesrv")["grpc-listen"])
        self.assertIsNone(_parse("--grpc-listen", "none")["grpc-listen"])
        self.assertEqual(_parse("--role", "broker", "--grpc-listen", "tcp:9081")["grpc-listen"], "tcp:9081")
        self.assertIsNone(_parse()["grpc-advertised"])
        self.assertEqual(_parse("--grpc-advertised-address", "proxy.example:8081")["grpc-advertised"],
                         ("proxy.example", 8081))

    def test_mistakes(self) -> None:
        """Endpoints grpcio cannot bind and malformed addresses are usage errors naming the option."""
        for argv, words in ((["--grpc-listen", "unix:/tmp/x"], "tcp:PORT"),
                            (["--grpc-listen", "tcp:80a"], "port must be a number"),
                            (["--grpc-listen", "tcp:8081:backlog=5"], "interface=HOST"),
                            (["--grpc-advertised-address", "nope"], "host:port")):
            error = self.assertRaises(usage.UsageError, _parse, *argv)
            self.assertIn(words, str(error))

    def test_listen_address(self) -> None:
        """The endpoint string as grpcio binds it (IPv6 hosts in brackets, all interfaces by default)."""
        self.assertEqual(listen_address("tcp:8081:interface=127.0.0.1"), "127.0.0.1:8081")
        self.assertEqual(listen_address("tcp:port=0"), "0.0.0.0:0")
        self.assertEqual(listen_address("tcp6:0"), "[::]:0")
        self.assertEqual(listen_address("tcp6:8081:interface=\\:\\:1"), "[::1]:8081")

    def test_acl_keeps_it_on(self) -> None:
        """With --acl-enable the endpoint stays on (it checks the ACL), by default and when asked for."""
        acl = os.path.abspath(self.mktemp())
        with open(acl, "w") as f:
            f.write(ACL)
        self.assertEqual(_parse("--acl-enable", "--acl-file", acl)["grpc-listen"], "tcp:8081:interface=127.0.0.1")
        self.assertEqual(_parse("--acl-enable", "--acl-file", acl, "--grpc-listen", "tcp:9081")["grpc-listen"],
                         "tcp:9081")

    def test_service_built_without_io(self) -> None:
        """makeService adds the endpoint after the broker, with no thread or port yet."""
        before = set(threading.enumerate())
        top = makeService(_parse("--store-dir", self.mktemp(), "--namesrv-config-dir", self.mktemp()),
                          MemoryReactorClock())
        self.assertIn(GrpcService, [type(s) for s in top])
        self.assertEqual(set(threading.enumerate()) - before, set())  # none started (others may have ended)
        top = makeService(_parse("--store-dir", self.mktemp(), "--grpc-listen", "none"), MemoryReactorClock())
        self.assertNotIn(GrpcService, [type(s) for s in top])

    def test_uvloop_when_installed(self) -> None:
        """The endpoint's loop thread runs uvloop when it is installed (the grpc extra), else asyncio's loop."""
        try:
            import uvloop
        except ImportError:
            expected: type = asyncio.AbstractEventLoop
        else:
            expected = uvloop.Loop
        loop = _new_event_loop()
        self.addCleanup(loop.close)
        self.assertIsInstance(loop, expected)

    def test_stop_before_start(self) -> None:
        """Stopping an endpoint that never started does nothing (no loop, no thread)."""
        service = GrpcService(MemoryReactorClock(), "tcp:0:interface=127.0.0.1", lambda: None)  # type: ignore
        self.successResultOf(service.stopService())
