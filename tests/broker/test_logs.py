"""The log of ``twistd rocketpy`` after a crash: SIGKILL it after writes, restart, read what it says."""

from __future__ import annotations

import os
import re
import sys

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from rocketpy.client import Producer, SendStatus, new_message
from tests.ports import free_port
from tests.processes import LogWatcher
from tests.store.test_crash import ROOT


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
                "--max-hash-slot-num", "100", "--max-index-num", "400", "--grpc-listen", "none", "--http", "none"]
        env = {**os.environ, "PYTHONPATH": ROOT}
        reactor.spawnProcess(watcher, sys.executable, args, env=env, path=ROOT)
        self.addCleanup(watcher.kill)
        return watcher

    async def test_recovery_after_sigkill_is_logged(self) -> None:
        """After 300 sends and a SIGKILL, the restarted broker logs that it recovers after a crash of the
        process, then that it recovered: how long it took, the commit-log range and the 300 messages,
        and from where the crash recovery re-dispatched how many bytes (only what followed the
        checkpoint or the queues' newest record: doc/store.md, Recovery)."""
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
        self.assertIn(f"store {store}: recovering after a crash of the process (abort file names this boot)", log)
        recovered = re.search(rf"store {re.escape(store)} recovered after a crash of the process \(abort file names "
                              r"this boot\) in "
                              r"([\d.]+) s: commit log \[0, (\d+)\) in 1 files, (\d+) messages in (\d+) queues", log)
        self.assertIsNotNone(recovered, log[-3000:])
        assert recovered is not None
        seconds, end, messages, queues = recovered.groups()
        self.assertLess(float(seconds), 10)
        self.assertGreater(int(end), 300 * 100)
        self.assertEqual(int(messages), 300)
        self.assertGreaterEqual(int(queues), 1)
        walked = re.search(rf"crash recovery re-dispatched (\d+) bytes, from offset (\d+) to {end}", log)
        self.assertIsNotNone(walked, log[-3000:])
        assert walked is not None
        self.assertLess(int(walked.group(1)), int(end) // 2)  # not the whole log again
