"""``assert_logs``: unittest's ``assertLogs`` for :mod:`twisted.logger` events."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

_ORDER = [LogLevel.debug, LogLevel.info, LogLevel.warn, LogLevel.error, LogLevel.critical]


@contextmanager
def assert_logs(test: SynchronousTestCase, namespace: str, level: LogLevel = LogLevel.info) -> Iterator[list[str]]:
    """Fail unless the block logs an event of ``level`` or above from ``namespace`` (a prefix).

    Yields a list that holds those events' texts once the block ended; failures logged that way
    (``log.failure``) are flushed, so trial does not report them as errors.
    """
    texts: list[str] = []
    with capturedLogs() as events:
        yield texts
    matched = [e for e in events if e.get("log_namespace", "").startswith(namespace)
               and _ORDER.index(e["log_level"]) >= _ORDER.index(level)]
    if not matched:
        test.fail(f"no logs of level {level.name} or higher from {namespace}")
    texts.extend(str(formatEvent(e)) for e in matched)
    if any("log_failure" in e for e in matched):
        test.flushLoggedErrors()
