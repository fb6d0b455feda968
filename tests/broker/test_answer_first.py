"""A lone send's answer leaves before the store's arrival notices (``rocketpy/_speedups_answerfirst.h``):
over a real loopback connection, the broker's ``socket.send`` of the answer comes before the arrival
listeners run, and the record is readable when they do."""

from __future__ import annotations

import socket
from typing import Any

from rocketpy.broker import send
from rocketpy.client import Message, SendStatus
from tests.client.test_integration import IntegrationTestCase

C_SKIP = None if send._lone_send is not None else "no compiled accelerator: the Python path answers after the put's notices"


class _NotedSocket:
    """A connected socket whose ``send`` calls are noted in ``events``; everything else is the socket's."""

    def __init__(self, sock: socket.socket, events: list[tuple[Any, ...]]) -> None:
        self._sock = sock
        self._events = events

    def send(self, data: bytes, *flags: int) -> int:
        sent = self._sock.send(data, *flags)
        self._events.append(("sent", bytes(data[:sent])))
        return sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class AnswerFirstTests(IntegrationTestCase):
    skip = C_SKIP

    async def test_answer_leaves_before_the_notices(self) -> None:
        cluster = await self.cluster()
        broker = cluster.brokers["broker-a"]
        producer = await self.producer(cluster)
        first = await producer.send(Message("AnswerFirst", b"first"))  # the topic made, route and peer learnt
        queue = first.queue
        for i in range(3):  # the queue's files made: the store appends in one call from here
            await producer.send_to_queue(Message("AnswerFirst", b"warm %d" % i), queue)
        events: list[tuple[Any, ...]] = []
        store = broker.store

        def arrived(topic: str, queue_id: int, max_offset: int) -> None:
            readable = store.get_max_offset_in_queue(topic, queue_id)
            events.append(("arrived", topic, queue_id, max_offset, readable))

        store.add_arrival_listener(arrived)
        for channel in broker.server.channels:
            channel.transport.socket = _NotedSocket(channel.transport.socket, events)
        second = await producer.send_to_queue(Message("AnswerFirst", b"second"), queue)
        self.assertEqual(second.status, SendStatus.SEND_OK)
        end = second.queue_offset + 1
        notice = ("arrived", "AnswerFirst", queue.queue_id, end, end)
        self.assertIn(notice, events, "notified once, the record readable")
        answers = [i for i, event in enumerate(events) if event[0] == "sent" and second.offset_msg_id.encode() in event[1]]
        self.assertEqual(len(answers), 1, "the answer written once, in one send")
        self.assertLess(answers[0], events.index(notice), "the answer before the arrival notices")
