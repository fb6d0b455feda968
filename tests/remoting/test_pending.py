"""Tests for rocketpy.remoting.pending.ResponseTable."""

from __future__ import annotations

from twisted.internet.defer import CancelledError
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectionLost, RemotingTimeoutError
from rocketpy.remoting.pending import ResponseTable

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
    def test_opaques_count_up(self) -> None:
        """Opaques start at the first one and increase by one."""
        table = ResponseTable()
        self.assertEqual([table.next_opaque() for _ in range(3)], [0, 1, 2])

    def test_wrap_around_skips_pending(self) -> None:
        """After 2**31-1 comes -2**31, and opaques still pending are skipped."""
        table = ResponseTable(first_opaque=INT32_MAX)
        table.add(INT32_MAX, 10.0)
        table.add(INT32_MIN, 10.0)
        self.assertEqual(table.next_opaque(), INT32_MIN + 1)
        self.assertEqual(table.next_opaque(), INT32_MIN + 2)
        fresh = ResponseTable(first_opaque=INT32_MAX)
        self.assertEqual([fresh.next_opaque(), fresh.next_opaque()], [INT32_MAX, INT32_MIN])

    def test_resolve_fires_once_and_releases_once(self) -> None:
        """A response fires its Deferred and releases; a second one is reported as late."""
        table, release = ResponseTable(), Releases()
        d = table.add(4, 10.0, release)
        self.assertTrue(table.resolve(response(4)))
        self.assertEqual(self.successResultOf(d).opaque, 4)
        self.assertFalse(table.resolve(response(4)))
        self.assertEqual((release.count, len(table)), (1, 0))

    def test_expire_fails_only_overdue(self) -> None:
        """Entries at or past their deadline fail with RemotingTimeoutError; the rest stay."""
        table, release = ResponseTable(), Releases()
        overdue = table.add(1, 5.0, release)
        fresh = table.add(2, 9.0, release)
        self.assertEqual(table.expire(5.0), (1, False))
        self.failureResultOf(overdue, RemotingTimeoutError)
        self.assertNoResult(fresh)
        self.assertEqual((release.count, 2 in table, 1 in table), (1, True, False))
        self.assertFalse(table.resolve(response(1)))

    def test_expire_reports_close_on_timeout(self) -> None:
        """expire says whether an entry added with close_on_timeout was among the expired."""
        table = ResponseTable()
        keep, close = table.add(1, 5.0), table.add(2, 7.0, close_on_timeout=True)
        self.assertEqual(table.expire(6.0), (1, False))
        self.assertEqual(table.expire(7.0), (1, True))
        self.assertEqual(table.expire(8.0), (0, False))
        for d in (keep, close):
            self.failureResultOf(d, RemotingTimeoutError)

    def test_fail_all_at_once(self) -> None:
        """fail_all fails every entry with the one error; an errback may register a new request."""
        table, release = ResponseTable(), Releases()
        error = RemotingConnectionLost("127.0.0.1:1", "gone")
        first, second = table.add(1, 9.0, release), table.add(2, 9.0, release)
        first.addErrback(lambda _: table.add(3, 9.0))
        table.fail_all(error)
        self.assertIs(self.failureResultOf(second, RemotingConnectionLost).value, error)
        self.assertEqual((release.count, list(table._pending)), (2, [3]))

    def test_cancel_removes_and_releases(self) -> None:
        """Cancelling a pending Deferred frees its slot and permit exactly once."""
        table, release = ResponseTable(), Releases()
        d = table.add(1, 9.0, release)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        table.expire(100.0)
        self.assertEqual((release.count, len(table)), (1, 0))

    def test_fail_one(self) -> None:
        """fail() fails one entry and ignores unknown opaques."""
        table, release = ResponseTable(), Releases()
        d = table.add(1, 9.0, release)
        table.fail(2, ValueError("x"))
        table.fail(1, ValueError("y"))
        self.failureResultOf(d, ValueError)
        self.assertEqual(release.count, 1)
