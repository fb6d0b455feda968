"""``ArrivalListeners`` (rocketpy/store/arrivals.py): which listeners an append of a topic calls, in the
order added, as their topics and ``wanted`` change."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.store.arrivals import ArrivalListeners


class ArrivalListenersTests(SynchronousTestCase):
    def test_of_topic_in_order(self) -> None:
        listeners = ArrivalListeners()
        every, timer, late = (lambda *a: None), (lambda *a: None), (lambda *a: None)
        self.assertEqual(listeners.of("T"), ())
        first = listeners.add(every)
        listeners.add(timer, "RMQ_SYS_WHEEL_TIMER")
        third = listeners.add(late)
        self.assertEqual((listeners.of("T"), listeners.of("RMQ_SYS_WHEEL_TIMER")), ((every, late), (every, timer, late)))
        first.wanted = False
        self.assertEqual((listeners.of("T"), listeners.of("RMQ_SYS_WHEEL_TIMER")), ((late,), (timer, late)))
        third.wanted = False
        self.assertEqual((listeners.of("T"), listeners.of("RMQ_SYS_WHEEL_TIMER")), ((), (timer,)))
        first.wanted = True
        self.assertEqual(listeners.of("T"), (every,))
        self.assertEqual(len(listeners), 3)

    def test_a_notice_under_way_goes_on(self) -> None:
        """A change made while a notice goes through the listeners applies from the next notice."""
        listeners = ArrivalListeners()
        called: list[str] = []
        second = None

        def first(*args: object) -> None:
            called.append("first")
            assert second is not None
            second.wanted = False

        listeners.add(first)
        second = listeners.add(lambda *args: called.append("second"))
        for listener in listeners.of("T"):
            listener("T", 0, 1)
        for listener in listeners.of("T"):
            listener("T", 0, 2)
        self.assertEqual(called, ["first", "second", "first"])
