"""The store's arrival listeners, and which of them an append to a topic calls.

A listener may listen to one topic only (the timer: its own), and may stop listening while it waits for
nothing (a long poll with no pull held, an HA master with no slave): :attr:`Arrival.wanted`. The
listeners an append of a topic calls are kept as a tuple per topic, rebuilt on a change, so an append of a
topic no listener wants now reads one dict and calls nothing (a lone send's path, doc/store.md "Arrival
notices").
"""

from __future__ import annotations

from typing import Callable

ArrivalListener = Callable[[str, int, int], None]


class Arrival:
    """One listener as added: set :attr:`wanted` False to stop its calls until it is set True again."""

    __slots__ = ("listener", "topic", "_wanted", "_owner")

    def __init__(self, owner: ArrivalListeners, listener: ArrivalListener, topic: str | None) -> None:
        self.listener = listener
        #: the only topic it is called for; None: every topic
        self.topic = topic
        self._wanted = True
        self._owner = owner

    @property
    def wanted(self) -> bool:
        """Whether the listener is called now."""
        return self._wanted

    @wanted.setter
    def wanted(self, wanted: bool) -> None:
        if wanted != self._wanted:
            self._wanted = wanted
            self._owner.changed()


class ArrivalListeners:
    """Listeners in the order added.

    :ivar every: the listeners an append of a topic without listeners of its own calls, in order.
    :ivar by_topic: for each topic some listener is for, the listeners an append of it calls, in order.
    """

    def __init__(self) -> None:
        self._added: list[Arrival] = []
        self.every: tuple[ArrivalListener, ...] = ()
        self.by_topic: dict[str, tuple[ArrivalListener, ...]] = {}

    def add(self, listener: ArrivalListener, topic: str | None = None) -> Arrival:
        """Call ``listener(topic, queue_id, new_max_offset)`` after appends (of ``topic`` only, when given)."""
        arrival = Arrival(self, listener, topic)
        self._added.append(arrival)
        self.changed()
        return arrival

    def of(self, topic: str) -> tuple[ArrivalListener, ...]:
        """The listeners an append of ``topic`` calls now, in the order added."""
        return self.by_topic.get(topic, self.every)

    def changed(self) -> None:
        """Rebuild the tuples (new objects: a notice going through the old ones goes on undisturbed)."""
        wanted = [arrival for arrival in self._added if arrival.wanted]
        self.every = tuple(arrival.listener for arrival in wanted if arrival.topic is None)
        self.by_topic = {
            topic: tuple(arrival.listener for arrival in wanted if arrival.topic in (None, topic))
            for topic in {arrival.topic for arrival in self._added if arrival.topic is not None}}

    def __len__(self) -> int:
        return len(self._added)
