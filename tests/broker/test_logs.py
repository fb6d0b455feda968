"""The log of ``twistd rocketpy`` after a crash: SIGKILL it after writes, restart, read what it says."""

from __future__ import annotations

import os
import re
import sys

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessTerminated
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from rocketpy.client import Producer, SendStatus, new_message
from tests.ports import free_port
from tests.store.test_crash import ROOT


class LogWatcher(ProcessProtocol):
    """Keeps a process's output and fires :meth:`wait_for` Deferreds when a text shows up in it."""

    def __init__(self) -> None:
        self.output = ""
        self._waiting: list[tuple[str, Deferred[None]]] = []
        self._ended: list[Deferred[int | None]] = []
        self.exit_signal: int | None = None
        self.running = True

    def outReceived(self, data: bytes) -> None:
        self.output += data.decode(errors="replace")
        still = []
        for text, d in self._waiting:
            if text in self.output:
                d.callback(None)
            else:
                still.append((text, d))
        self._waiting = still

    errReceived = outReceived

    def wait_for(self, text: str, timeout: float = 30.0) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        if text in self.output:
            d.callback(None)
        else:
            self._waiting.append((text, d))
            d.addTimeout(timeout, reactor)
        return d

    def when_ended(self) -> Deferred[int | None]:
        """Fires with the signal that ended the process (None: it exited)."""
        d: Deferred[int | None] = Deferred()
        if self.running:
            self._ended.append(d)
        else:
            d.callback(self.exit_signal)
        return d

    def kill(self) -> Deferred[int | None]:
        if self.running and self.transport is not None:
            self.transport.signalProcess("KILL")
        return self.when_ended()

    def processEnded(self, reason: Failure) -> None:
        value = reason.value
        self.running = False
        self.exit_signal = value.signal if isinstance(value, ProcessTerminated) else None
        for d in self._ended:
            d.callback(self.exit_signal)


class CrashLogTests(TestCase):
    timeout = 120

    def start(self, root: str, namesrv_port: int, broker_port: int) -> LogWatcher:
        """``twistd -n rocketpy`` logging to stdout, on a store in ``root``."""
        watcher = LogWatcher()
        args = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n", "--logfile=-",
                "--pidfile=", "rocketpy",
                "--namesrv-listen", f"tcp:{namesrv_port}:interface=127.0.0.1",
                "--listen", f"tcp:{broker_port}:interface=127.0.0.1",
                "--ha-listen", f"tcp:{free_port()}:interface=127.0.0.1",
                "--store-dir", os.path.join(root, "store"), "--namesrv-config-dir", os.path.join(root, "ns"),
                "--commit-log-file-size", str(1024 * 1024), "--consume-queue-file-size", "6000",
                "--max-hash-slot-num", "100", "--max-index-num", "400"]
        env = {**os.environ, "PYTHONPATH": ROOT}
        reactor.spawnProcess(watcher, sys.executable, args, env=env, path=ROOT)
        self.addCleanup(watcher.kill)
        return watcher

    async def test_recovery_after_sigkill_is_logged(self) -> None:
        """After 300 sends and a SIGKILL, the restarted broker logs that it recovers after a crash, then
        that it recovered: how long it took, the commit-log range and the 300 messages, and from where
        the crash recovery re-dispatched how many bytes."""
        root = os.path.abspath(self.mktemp())
        ports = free_port(), free_port()
        first = self.start(root, *ports)
        await first.wait_for("broker broker-a listening")
        self.assertIn("recovering after a clean shutdown", first.output)
        producer = Producer("PG", f"127.0.0.1:{ports[0]}", reactor)
        await producer.start()
        for i in range(300):
            sent = await producer.send(new_message("CrashLog", b"m%d" % i))
            self.assertEqual(sent.status, SendStatus.SEND_OK)
        await producer.shutdown()
        self.assertEqual(await first.kill(), 9)

        second = self.start(root, *ports)
        await second.wait_for("broker broker-a listening")
        log = second.output
        store = os.path.join(root, "store")
        self.assertIn(f"store {store}: recovering after a crash (abort file present)", log)
        recovered = re.search(rf"store {re.escape(store)} recovered after a crash \(abort file present\) in "
                              r"([\d.]+) s: commit log \[0, (\d+)\) in 1 files, (\d+) messages in (\d+) queues", log)
        self.assertIsNotNone(recovered, log[-3000:])
        assert recovered is not None
        seconds, end, messages, queues = recovered.groups()
        self.assertLess(float(seconds), 10)
        self.assertGreater(int(end), 300 * 100)
        self.assertEqual(int(messages), 300)
        self.assertGreaterEqual(int(queues), 1)
        walked = re.search(r"crash recovery re-dispatched (\d+) bytes, from \S+00000000000000000000 \(offset 0\) to "
                           rf"{end}", log)
        self.assertIsNotNone(walked, log[-3000:])
