"""Tests for rocketpy.remoting.pending.ResponseTable."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectionLost, RemotingTimeoutError
from rocketpy.remoting import pending
from rocketpy.remoting.pending import PythonResponseTable, ResponseTable

INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)


class Releases:
    """Counts release calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def response(opaque: int) -> RemotingCommand:
    return RemotingCommand(code=0, opaque=opaque, flag=1)


class ResponseTableTests(SynchronousTestCase):
    #: the table under test: with the C module built, its add_then and resolve are C
    table_class: type[ResponseTable] = ResponseTable

    def test_opaques_count_up(self) -> None:
        """Opaques start at the first one and increase by one."""
        table = self.table_class()
        self.assertEqual([table.next_opaque() for _ in range(3)], [0, 1, 2])

    def test_wrap_around_skips_pending(self) -> None:
        """After 2**31-1 comes -2**31, and opaques still pending are skipped."""
        table = self.table_class(first_opaque=INT32_MAX)
        table.add(INT32_MAX, 10.0)
        table.add(INT32_MIN, 10.0)
        self.assertEqual(table.next_opaque(), INT32_MIN + 1)
        self.assertEqual(table.next_opaque(), INT32_MIN + 2)
        fresh = self.table_class(first_opaque=INT32_MAX)
        self.assertEqual([fresh.next_opaque(), fresh.next_opaque()], [INT32_MAX, INT32_MIN])

    def test_resolve_fires_once_and_releases_once(self) -> None:
        """A response fires its Deferred and releases; a second one is reported as late."""
        table, release = self.table_class(), Releases()
        d = table.add(4, 10.0, release)
        self.assertTrue(table.resolve(response(4)))
        self.assertEqual(self.successResultOf(d).opaque, 4)
        self.assertFalse(table.resolve(response(4)))
        self.assertEqual((release.count, len(table)), (1, 0))

    def test_expire_fails_only_overdue(self) -> None:
        """Entries at or past their deadline fail with RemotingTimeoutError; the rest stay."""
        table, release = self.table_class(), Releases()
        overdue = table.add(1, 5.0, release)
        fresh = table.add(2, 9.0, release)
        self.assertEqual(table.expire(5.0), (1, False))
        self.failureResultOf(overdue, RemotingTimeoutError)
        self.assertNoResult(fresh)
        self.assertEqual((release.count, 2 in table, 1 in table), (1, True, False))
        self.assertFalse(table.resolve(response(1)))

    def test_expire_reports_close_on_timeout(self) -> None:
        """expire says whether an entry added with close_on_timeout was among the expired."""
        table = self.table_class()
        keep, close = table.add(1, 5.0), table.add(2, 7.0, close_on_timeout=True)
        self.assertEqual(table.expire(6.0), (1, False))
        self.assertEqual(table.expire(7.0), (1, True))
        self.assertEqual(table.expire(8.0), (0, False))
        for d in (keep, close):
            self.failureResultOf(d, RemotingTimeoutError)

    def test_fail_all_at_once(self) -> None:
        """fail_all fails every entry with the one error; an errback may register a new request."""
        table, release = self.table_class(), Releases()
        error = RemotingConnectionLost("127.0.0.1:1", "gone")
        first, second = table.add(1, 9.0, release), table.add(2, 9.0, release)
        first.addErrback(lambda _: table.add(3, 9.0))
        table.fail_all(error)
        self.assertIs(self.failureResultOf(second, RemotingConnectionLost).value, error)
        self.assertEqual((release.count, list(table._pending)), (2, [3]))

    def test_cancel_removes_and_releases(self) -> None:
        """Cancelling a pending Deferred frees its slot and permit exactly once."""
        table, release = self.table_class(), Releases()
        d = table.add(1, 9.0, release)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        table.expire(100.0)
        self.assertEqual((release.count, len(table)), (1, 0))

    def test_fail_one(self) -> None:
        """fail() fails one entry and ignores unknown opaques."""
        table, release = self.table_class(), Releases()
        d = table.add(1, 9.0, release)
        table.fail(2, ValueError("x"))
        table.fail(1, ValueError("y"))
        self.failureResultOf(d, ValueError)
        self.assertEqual(release.count, 1)

    def test_then_entries(self) -> None:
        """add_then takes the next opaque (set on the request); the outcome goes to ``then`` with its
        arguments exactly once, after the release: a response, a timeout, or a lost connection."""
        table = self.table_class(first_opaque=7)
        seen: list[tuple[Any, ...]] = []
        releases = Releases()

        def then(result: Any, tag: str) -> None:
            seen.append((tag, releases.count, result if isinstance(result, RemotingCommand) else result.value))

        answered, timed_out, lost = (RemotingCommand.request(10) for _ in range(3))
        opaques = [table.add_then(request, deadline, then, (tag,), releases)
                   for request, deadline, tag in ((answered, 9.0, "a"), (timed_out, 5.0, "t"), (lost, 9.0, "l"))]
        self.assertEqual((opaques, [r.opaque for r in (answered, timed_out, lost)]), ([7, 8, 9], [7, 8, 9]))
        self.assertTrue(table.resolve(response(7)))
        self.assertEqual(table.expire(5.0), (1, False))
        error = RemotingConnectionLost("127.0.0.1:1", "gone")
        table.fail_all(error)
        self.assertFalse(table.resolve(response(8)))
        self.assertEqual([(tag, count) for tag, count, _ in seen], [("a", 1), ("t", 2), ("l", 3)])
        self.assertEqual(seen[0][2].opaque, 7)
        self.assertIsInstance(seen[1][2], RemotingTimeoutError)
        self.assertIs(seen[2][2], error)
        self.assertEqual(len(table), 0)

    def test_then_arguments(self) -> None:
        """``then`` gets its arguments after the outcome, however many."""
        table = self.table_class()
        seen: list[tuple[Any, ...]] = []
        for args in ((), (1, 2), tuple(range(20))):
            opaque = table.add_then(RemotingCommand.request(10), 9.0, lambda result, *rest: seen.append(rest), args)
            table.resolve(response(opaque))
        self.assertEqual(seen, [(), (1, 2), tuple(range(20))])

    def test_raising_then_is_logged(self) -> None:
        """A ``then`` that raises is logged with its error; the entry is gone and released once."""
        table, release = self.table_class(), Releases()

        def broken(result: Any) -> None:
            raise ZeroDivisionError("in then")

        opaque = table.add_then(RemotingCommand.request(10), 9.0, broken, (), release)
        with capturedLogs() as events:
            self.assertTrue(table.resolve(response(opaque)))
        (event,) = events
        self.assertIsInstance(event["log_failure"].value, ZeroDivisionError)
        self.assertIs(event["then"], broken)
        self.assertEqual((release.count, len(table)), (1, 0))
        self.flushLoggedErrors(ZeroDivisionError)


class PythonResponseTableTests(ResponseTableTests):
    """The same on the Python base (the reference of the C one)."""

    table_class = PythonResponseTable

    def test_active_implementation(self) -> None:
        """With the C module built the channels' table has the C base; without it, the Python one."""
        self.assertEqual(pending._compiled_base is None, ResponseTable is PythonResponseTable)
