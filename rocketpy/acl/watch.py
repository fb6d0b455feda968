"""Keeps the broker's ACL in step with its ``plain_acl.yml`` (RocketMQ watches the file too).

Every ``interval`` seconds the file's modification time and size are read (in a pool
thread); when they change the file is parsed again. A file that cannot be read or
parsed leaves the last good ACL in place, and the log says why.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel

from rocketpy.acl.plain import AclConfigError, PlainAcl, parse_acl

#: ``(f, *args) -> Deferred`` of ``f(*args)`` run off the reactor thread.
RunBlocking = Callable[..., "Deferred[Any]"]


def file_stamp(path: str) -> tuple[int, int] | None:
    """What tells a changed file (modification time, size); None when it cannot be read (blocking)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def load_acl_file(path: str) -> PlainAcl:
    """Read and parse *path* (blocking).

    :raises AclConfigError: the file cannot be read or is not a valid ``plain_acl.yml``.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
            modified_ms = os.fstat(f.fileno()).st_mtime_ns // 1_000_000
    except (OSError, UnicodeDecodeError) as e:
        raise AclConfigError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    return parse_acl(text, modified_ms)  # a file without dataVersion: its modification time


class AclFileWatcher:
    """Loads *path* at :meth:`start` and again whenever it changes, handing each good ACL to *use*."""

    log = Logger()

    def __init__(self, path: str, use: Callable[[PlainAcl], None], clock: IReactorTime, run_blocking: RunBlocking,
                 interval: float = 1.0) -> None:
        self.path = path
        self._use = use
        self._run = run_blocking
        self._interval = interval
        self._stamp: tuple[int, int] | None = None
        self._loop = LoopingCall(self._check)
        self._loop.clock = clock
        self._looping: Deferred[Any] | None = None

    async def start(self) -> None:
        """Load the file (failing with :class:`AclConfigError` if it is bad), then watch it."""
        self._stamp = await self._run(file_stamp, self.path)
        acl = await self._run(load_acl_file, self.path)
        self._apply(acl)
        self._looping = self._loop.start(self._interval, now=False)

    def stop(self) -> Deferred[Any] | None:
        """Stop watching; the returned Deferred (if any) fires once a running check ended."""
        if self._loop.running:
            self._loop.stop()
        return self._looping

    def adopt(self, acl: PlainAcl, stamp: tuple[int, int] | None) -> None:
        """Use *acl*, just written to the file by the broker (its new :func:`file_stamp` is *stamp*):
        the next check sees no change and does not load it again."""
        self._stamp = stamp
        self._apply(acl)

    def _apply(self, acl: PlainAcl) -> None:
        self._use(acl)
        self.log.info("ACL {path}: {accounts} accounts, {white} global white addresses", path=self.path,
                      accounts=len(acl.accounts), white=len(acl.global_white))

    async def _check(self) -> None:
        try:
            stamp = await self._run(file_stamp, self.path)
            if stamp == self._stamp:
                return
            self._stamp = stamp
            acl = await self._run(load_acl_file, self.path)
            if self._stamp != stamp:  # the broker wrote the file meanwhile (adopt): its ACL stays
                return
        except AclConfigError as e:
            self.log.warn("ACL {path} not applied, the last good one stays: {error}", path=self.path, error=e)
            return
        except Exception:  # an escaping exception would end the LoopingCall
            self.log.failure("ACL {path} check failed", level=LogLevel.error, path=self.path)
            return
        self._apply(acl)
