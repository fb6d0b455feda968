"""The ACL file watcher, driven by a Clock with the file work run inline."""

from __future__ import annotations

import os
from typing import Any, Callable

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.acl.plain import AclConfigError, PlainAcl
from rocketpy.broker.acl import PlainAccessValidator
from rocketpy.acl.watch import AclFileWatcher, file_stamp, load_acl_file
from tests.acl.test_broker import ACL


def inline(f: Callable[..., Any], *args: Any) -> Deferred[Any]:
    return maybeDeferred(f, *args)


class WatcherTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.path = os.path.abspath(self.mktemp())
        self.write(ACL)
        self.clock = Clock()
        self.validator = PlainAccessValidator(PlainAcl())
        self.watcher = AclFileWatcher(self.path, self.validator.use, self.clock, inline, interval=1.0)

    def write(self, text: str, mtime_ns: int | None = None) -> None:
        with open(self.path, "w") as f:
            f.write(text)
        if mtime_ns is not None:  # a distinct modification time, whatever the file system's resolution
            os.utime(self.path, ns=(mtime_ns, mtime_ns))

    def test_load_reload_and_keep_last_good(self) -> None:
        """Loaded at start; an unchanged file is not re-read; a changed one applies; a broken one is
        logged once and the last good ACL stays; the watcher stops cleanly."""
        self.successResultOf(Deferred.fromCoroutine(self.watcher.start()))
        first = self.validator.acl
        self.assertEqual(sorted(first.accounts), ["RocketMQ", "rocketmq2"])
        self.clock.advance(1)
        self.assertIs(self.validator.acl, first)  # unchanged: not parsed again
        self.write(ACL.replace("rocketmq2", "rocketmq3"), mtime_ns=10**18)
        self.clock.advance(1)
        self.assertEqual(sorted(self.validator.acl.accounts), ["RocketMQ", "rocketmq3"])
        good = self.validator.acl
        with capturedLogs() as logs:
            self.write("accounts: [", mtime_ns=2 * 10**18)
            self.clock.advance(1)
            self.clock.advance(1)  # the same broken file is not reported again
            os.remove(self.path)
            self.clock.advance(1)
        self.assertIs(self.validator.acl, good)
        warnings = [str(e["error"]) for e in logs if "not applied" in e["log_format"]]
        self.assertEqual(len(warnings), 2)
        self.assertIn("not valid YAML", warnings[0])
        self.assertIn("cannot read", warnings[1])
        self.successResultOf(maybeDeferred(self.watcher.stop))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_bad_file_at_start(self) -> None:
        """A broken file at start fails the start (the broker then does not listen)."""
        self.write("accounts:\n  - accessKey: short\n")
        self.failureResultOf(Deferred.fromCoroutine(self.watcher.start()), AclConfigError)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_adopted_acl_wins_over_a_load_under_way(self) -> None:
        """The broker writes the file and adopts its ACL while a check's load is under way: that load's
        result is dropped, and the next check sees the adopted file as unchanged."""
        held: list[Deferred[Any]] = []

        def run(f: Callable[..., Any], *args: Any) -> Deferred[Any]:
            if f is load_acl_file and self.watcher_started:
                held.append(Deferred())
                return held[-1].addCallback(lambda _: f(*args))
            return maybeDeferred(f, *args)

        self.watcher_started = False
        watcher = AclFileWatcher(self.path, self.validator.use, self.clock, run, interval=1.0)
        self.successResultOf(Deferred.fromCoroutine(watcher.start()))
        self.watcher_started = True
        self.write(ACL.replace("rocketmq2", "rocketmq3"), mtime_ns=10**18)
        self.clock.advance(1)  # the check's load waits in `held`
        adopted = PlainAcl()
        self.write(ACL.replace("rocketmq2", "rocketmq4"), mtime_ns=2 * 10**18)
        watcher.adopt(adopted, file_stamp(self.path))
        held.pop().callback(None)
        self.assertIs(self.validator.acl, adopted)
        self.clock.advance(1)
        self.assertEqual((self.validator.acl, held), (adopted, []))
        watcher.stop()
