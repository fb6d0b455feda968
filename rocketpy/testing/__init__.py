"""A real name server and broker inside the test process, for application tests (doc/testing.md).

No container and no fixed port: both listen on a free loopback port in the caller's reactor,
on a temporary store of small files (about 5 MB of disk), and everything (ports, thread
pools, the store directory) is gone once the block ends. Three faces:

- Twisted code (trial): ``async with BrokerFixture(reactor) as namesrv_addr: ...``
- a plain script or test: ``with rocketpy.testing.broker() as namesrv_addr: ...`` (the
  broker runs on :mod:`rocketpy.blocking`'s reactor thread, with the blocking clients)
- pytest: the ``rocketpy_broker`` fixture (:mod:`rocketpy.testing.pytest_plugin`)
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rocketpy.broker.controller import BrokerService
from rocketpy.tap import Options, build_tree
from rocketpy.util.service import OrderedMultiService

__all__ = ["BrokerFixture", "broker", "SMALL_STORE"]

#: ``twistd rocketpy`` options of the fixture's small store: a 4 MiB commit-log file,
#: 300-entry consume-queue files and 84 KB index files (4000 entries).
SMALL_STORE: dict[str, str] = {
    "commit-log-file-size": str(4 * 1024 * 1024),
    "consume-queue-file-size": "6000",
    "max-hash-slot-num": "1000",
    "max-index-num": "4000",
}


def _listening_socket() -> socket.socket:
    """A TCP socket listening on a free loopback port, which the service adopts (``fd:N``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)  # shared with the duplicate the reactor accepts on
    return sock


class BrokerFixture:
    """A name server and a broker (``twistd rocketpy``'s service tree) in ``reactor``.

    :param reactor: a running reactor (trial's, or the one of :mod:`rocketpy.blocking`).
    :param options: more ``twistd rocketpy`` options by their long name, e.g.
        ``{"default-topic-queue-nums": "4"}``; they override :data:`SMALL_STORE`.
    """

    def __init__(self, reactor: Any, options: dict[str, str] | None = None) -> None:
        self._reactor = reactor
        # no 5.x gRPC endpoint unless asked for: its default port 8081 is one per machine
        self._options = {**SMALL_STORE, "grpc-listen": "none", **(options or {})}
        #: the temporary directory of the store and the name server's config, while running
        self.root: str | None = None
        self._tree: OrderedMultiService | None = None
        self.namesrv_addr = ""
        self.broker_addr = ""

    async def start(self) -> str:
        """Start both (the broker registered with the name server); the name server's ``ip:port``."""
        self.root = tempfile.mkdtemp(prefix="rocketpy-")
        namesrv_socket, broker_socket = _listening_socket(), _listening_socket()
        try:
            self.namesrv_addr = "127.0.0.1:%d" % namesrv_socket.getsockname()[1]
            self.broker_addr = "127.0.0.1:%d" % broker_socket.getsockname()[1]
            args = {
                "http": "none",  # no fixed port in tests (give {"http": "tcp:0:interface=127.0.0.1"} for one)
                **self._options,
                "namesrv-listen": f"fd:{namesrv_socket.fileno()}",
                "namesrv-config-dir": os.path.join(self.root, "namesrv"),
                "namesrv-addr": self.namesrv_addr,
                "listen": f"fd:{broker_socket.fileno()}",
                "advertised-address": self.broker_addr,
                "ha-listen": "tcp:0:interface=127.0.0.1",
                "store-dir": os.path.join(self.root, "store"),
                "gc-threshold": "0",  # leave the test process's garbage collector alone
            }
            options = Options()
            options.parseOptions([f"--{name}={value}" for name, value in args.items()])
            # Not makeService's top: on a failed start that one stops the reactor and ends the
            # process (right for twistd, not for a test).
            self._tree = build_tree(options, self._reactor, OrderedMultiService())
            await self._tree.startService()
            broker = self._tree.getServiceNamed("broker")
            assert isinstance(broker, BrokerService)
            await broker.registration.register_all()  # routes are there once the name server answered
        except BaseException:
            await self.stop()
            raise
        finally:  # the services listen on duplicates of these
            namesrv_socket.close()
            broker_socket.close()
        return self.namesrv_addr

    async def stop(self) -> None:
        """Stop the broker, then the name server, and delete the store."""
        tree, self._tree = self._tree, None
        if tree is not None:
            await tree.stopService()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    async def __aenter__(self) -> str:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@contextmanager
def broker(options: dict[str, str] | None = None, timeout: float = 30.0) -> Iterator[str]:
    """A name server and broker on :mod:`rocketpy.blocking`'s reactor thread; yields the
    name server's ``ip:port``. For scripts and tests without a reactor of their own."""
    from twisted.internet.defer import Deferred

    from rocketpy.blocking import reactor_thread

    runner = reactor_thread()
    fixture = BrokerFixture(runner.reactor, options)
    namesrv_addr = runner.call(lambda: Deferred.fromCoroutine(fixture.start()), timeout=timeout)
    try:
        yield namesrv_addr
    finally:
        runner.call(lambda: Deferred.fromCoroutine(fixture.stop()), timeout=timeout)
