"""rocketpy.client.firing (C ``fire``, ``deliver`` and the member Deferred's ``addCallback`` family,
rocketpy/_speedups_producer.h) against Twisted's own Deferred: random callback chains -- callbacks
that return, raise, return fired, failed or waiting Deferreds, add links while running, return
their own Deferred -- give the same calls, results and state either way."""

from __future__ import annotations

import gc
import warnings
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.internet.defer import AlreadyCalledError, Deferred, fail, succeed
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import firing
from rocketpy.client.autobatch import _Waiting
from rocketpy.client.results import SendResult, SendStatus
from rocketpy.common.route import MessageQueue

C = firing.ACTIVE == "C"
NO_C = None if C else "no compiled accelerator or an unexpected Twisted (rocketpy.client.firing.ACTIVE is Python)"

#: what a link does with its input: kind, and a tag
ACTIONS = st.sampled_from(["return", "raise", "fired", "failed", "waiting", "add", "self", "recover", "none"])
LINKS = st.lists(st.tuples(st.sampled_from(["cb", "eb", "both", "cbs"]), ACTIONS, ACTIONS), max_size=6)


def shown(value: Any) -> Any:
    """Comparable form of a result: Failures by their exception, Deferreds by kind."""
    if isinstance(value, Failure):
        return ("failure", type(value.value).__name__, str(value.value))
    if isinstance(value, Deferred):
        return ("deferred",)
    if isinstance(value, SendResult):
        return ("send-result", value.msg_id, value.offset_msg_id, value.queue_offset, value.status)
    return value


class Run:
    """One Deferred with the links of a script; records what every link saw."""

    def __init__(self, d: Deferred[Any], links: list[tuple[str, str, str]]) -> None:
        self.d = d
        self.log: list[Any] = []
        self.waiting: list[Deferred[Any]] = []
        for i, (kind, on_result, on_failure) in enumerate(links):
            if kind == "cb":
                d.addCallback(self.link, f"{i}c", on_result)
            elif kind == "eb":
                d.addErrback(self.link, f"{i}e", on_failure)
            elif kind == "both":
                d.addBoth(self.link, f"{i}b", on_result)
            else:
                d.addCallbacks(self.link, self.link, callbackArgs=(f"{i}c", on_result),
                               errbackArgs=(f"{i}e", on_failure))

    def link(self, value: Any, tag: str, action: str) -> Any:
        self.log.append((tag, shown(value)))
        if action == "return":
            return f"{tag}"
        if action == "raise":
            raise ValueError(tag)
        if action == "fired":
            return succeed(f"{tag}-fired")
        if action == "failed":
            return fail(KeyError(tag))
        if action == "waiting":
            waiting: Deferred[Any] = Deferred()
            self.waiting.append(waiting)
            return waiting
        if action == "add":  # a link added while the chain runs: it runs after the others
            self.d.addCallback(self.link, f"{tag}+", "return")
            return value
        if action == "self":
            return self.d
        if action == "recover":
            return "recovered" if isinstance(value, Failure) else value
        return None

    def state(self) -> Any:
        d = self.d
        info = d._debugInfo
        return (self.log, shown(getattr(d, "result", "no result")), d.called, d.paused, len(d._callbacks),
                d._chainedTo is not None, d._runningCallbacks,
                None if info is None else shown(info.failResult))

    def finish(self) -> None:
        """Fire what the links left waiting, then let the chain's end be collected."""
        for i, waiting in enumerate(self.waiting):
            waiting.callback(f"late{i}")

    def silence(self) -> None:
        """Handle a Failure left at the end (both runs leave the same one: compared before)."""
        if isinstance(getattr(self.d, "result", None), Failure):
            self.d.addErrback(lambda _: None)


def both_ways(links: list[tuple[str, str, str]], result: Any, cls: type[Deferred[Any]] = Deferred) -> tuple[Run, Run]:
    """The same script fired by Twisted's callback and by firing.fire."""
    twisted, ours = Run(cls(), links), Run(cls(), links)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        twisted.d.callback(result)
        firing.fire(ours.d, result)
    return twisted, ours


class FireTests(SynchronousTestCase):
    skip = NO_C

    def check(self, links: list[tuple[str, str, str]], result: Any, cls: type[Deferred[Any]] = Deferred) -> None:
        twisted, ours = both_ways(links, result, cls)
        self.assertEqual(ours.state(), twisted.state())
        twisted.finish()
        ours.finish()
        self.assertEqual(ours.state(), twisted.state())
        twisted.silence()
        ours.silence()

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(LINKS, st.sampled_from(["value", "failure", None]))
    def test_same_as_twisted(self, links: list[tuple[str, str, str]], start: str | None) -> None:
        result = Failure(RuntimeError("start")) if start == "failure" else start
        self.check(links, result)

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(LINKS)
    def test_member_class(self, links: list[tuple[str, str, str]]) -> None:
        """The batcher's member Deferred, with its C addCallback family."""
        self.check(links, "value", _Waiting)

    def test_raise_makes_failure_with_traceback(self) -> None:
        def boom(_: object) -> None:
            raise ValueError("boom")

        seen: list[Failure] = []
        d: Deferred[Any] = Deferred()
        d.addCallback(boom).addErrback(seen.append)
        firing.fire(d, 1)
        self.assertEqual(seen[0].type, ValueError)
        self.assertIn("boom", seen[0].getTraceback())
        self.assertEqual(seen[0].frames[-1][0], "boom")

    def test_unhandled_failure_is_reported(self) -> None:
        """A Failure left at the chain's end is logged when the Deferred goes, as with Twisted's."""
        d: Deferred[Any] = Deferred()
        d.addCallback(lambda _: 1 / 0)
        firing.fire(d, 1)
        del d
        gc.collect()
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    def test_already_called(self) -> None:
        d: Deferred[Any] = Deferred()
        firing.fire(d, 1)
        self.assertRaises(AlreadyCalledError, firing.fire, d, 2)
        self.assertEqual(d.result, 1)

    def test_cancelled_then_fired(self) -> None:
        """A cancelled Deferred (no canceller) swallows the later result, as Twisted's does."""
        d: Deferred[Any] = Deferred()
        d.addErrback(lambda f: f.trap(defer.CancelledError))
        d.cancel()
        firing.fire(d, 1)
        self.assertIs(d.result, defer.CancelledError)

    def test_paused(self) -> None:
        seen: list[Any] = []
        d: Deferred[Any] = Deferred()
        d.addCallback(seen.append)
        d.pause()
        firing.fire(d, 1)
        self.assertEqual(seen, [])
        d.unpause()
        self.assertEqual(seen, [1])

    def test_chained(self) -> None:
        """A Deferred another one waits on (a continuation link) hands its result over as Twisted's does."""
        for fire in (Deferred.callback, firing.fire):
            inner: Deferred[Any] = Deferred()
            outer: Deferred[Any] = Deferred()
            seen: list[Any] = []
            outer.addCallback(lambda _: inner).addCallback(seen.append)
            outer.callback(0)
            fire(inner, 1)
            self.assertEqual(seen, [1])
            self.assertIsNone(inner.result)
            self.assertIsNone(outer._chainedTo)

    def test_debugging(self) -> None:
        """With Deferred debugging on, Twisted's own code runs (it records the invoker)."""
        defer.setDebugging(True)
        self.addCleanup(defer.setDebugging, False)
        d: Deferred[Any] = Deferred()
        firing.fire(d, 1)
        assert d._debugInfo is not None
        self.assertIsNotNone(d._debugInfo.invoker)

    def test_self_returned_warns(self) -> None:
        d: Deferred[Any] = Deferred()

        def same(_: object) -> Deferred[Any]:
            return d

        d.addCallback(same)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            firing.fire(d, 1)
        self.assertTrue(any("returned the Deferred it was attached to" in str(w.message) for w in caught))

    def test_keywords(self) -> None:
        seen: list[Any] = []
        d: Deferred[Any] = _Waiting()
        def three(x: int, y: int, z: int = 0) -> None:
            seen.append((x, y, z))

        def one(x: object) -> str:
            seen.append(x)
            return "ok"

        d.addCallback(three, 2, z=3)
        d.addCallbacks(one, callbackKeywords={})
        firing.fire(d, 1)
        self.assertEqual(seen, [(1, 2, 3), None])
        self.assertEqual(d.result, "ok")

    def test_added_after_firing(self) -> None:
        """addCallback on a fired member Deferred runs the link at once, as Twisted's does."""
        d = _Waiting()
        firing.fire(d, 1)
        seen: list[Any] = []
        self.assertIs(d.addCallback(seen.append), d)
        d.addErrback(seen.append).addBoth(seen.append)
        self.assertEqual(seen, [1, None])


class DeliverTests(SynchronousTestCase):
    def members(self, n: int) -> tuple[list[Deferred[Any]], list[Any]]:
        seen: list[Any] = []
        members: list[Deferred[Any]] = [_Waiting() for _ in range(n)]
        for m in members:
            m.addCallback(seen.append)
        return members, seen

    def test_each_its_result(self) -> None:
        q = MessageQueue("T", "b", 1)
        for deliver in (firing.deliver, firing.python_deliver):
            members, seen = self.members(3)
            self.assertTrue(deliver(members, SendStatus.SEND_OK, ["a", "b", "c"], ["x", "y", "z"], q, 7, None, "R"))
            self.assertEqual(seen, [SendResult(SendStatus.SEND_OK, i, s, q, o, None, "R")
                                    for i, s, o in [("a", "x", 7), ("b", "y", 8), ("c", "z", 9)]])

    def test_shortest_list(self) -> None:
        """Fewer ids than members: the members after them get nothing (as zip stops)."""
        q = MessageQueue("T", "b", 1)
        for deliver in (firing.deliver, firing.python_deliver):
            members, seen = self.members(3)
            deliver(members, SendStatus.SEND_OK, ["a", "b"], ["x", "y", "z"], q, 0, "t", "R")
            self.assertEqual([r.msg_id for r in seen], ["a", "b"])
            self.assertFalse(members[2].called)

    def test_unusual_arguments_left_to_python(self) -> None:
        """A huge offset (or a tuple of members) is left to the Python loop: nothing fired."""
        if not C:
            raise self.skipTest(NO_C)
        q = MessageQueue("T", "b", 1)
        members, seen = self.members(1)
        self.assertFalse(firing.deliver(members, SendStatus.SEND_OK, ["a"], ["x"], q, 1 << 70, None, "R"))
        self.assertFalse(firing.deliver(tuple(members), SendStatus.SEND_OK, ["a"], ["x"], q, 0, None, "R"))
        self.assertEqual(seen, [])

    def test_failing_callback_stops_nothing_else(self) -> None:
        """A member's raising callback becomes its Failure; the next members still get theirs."""
        q = MessageQueue("T", "b", 1)
        members, seen = self.members(2)
        failures: list[Failure] = []
        members[0].addCallback(lambda _: 1 / 0).addErrback(failures.append)
        firing.deliver(members, SendStatus.SEND_OK, ["a", "b"], ["x", "y"], q, 0, None, "R")
        self.assertEqual(len(seen), 2)
        self.assertEqual(failures[0].type, ZeroDivisionError)

    def test_twisted_fits(self) -> None:
        """The installed Twisted keeps the Deferred state the C code reads (else ACTIVE is Python)."""
        self.assertEqual(firing.twisted_fits() and firing._module is not None, C)
