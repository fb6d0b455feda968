"""The producer's lone send in C (``rocketpy._speedups`` ``client_lone_send`` and ``lone_answered``,
rocketpy/_speedups_clientsend.h) against its Python reference (``Producer._send_plain`` and what it calls):
a producer on a real :class:`RemotingClient` whose connections are in-memory transports; random runs of
sends, answers of every kind, timeouts and lost connections write the same bytes and give every caller the
same outcome either way."""

from __future__ import annotations

import random
import struct
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IProtocolFactory, IStreamClientEndpoint
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface import implementer

from rocketpy.client import producer as producer_module
from rocketpy.client import route
from rocketpy.client.instance import ClientInstance
from rocketpy.client.producer import Producer
from rocketpy.client.results import SendStatus
from rocketpy.client.route import TopicPublishInfo
from rocketpy.common import speedups
from rocketpy.common.message import Message
from rocketpy.common.route import BrokerData, QueueData, TopicRouteData
from rocketpy.interfaces import IRPCHook
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codec import decode, encode
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.protocol import RemotingProtocol
from rocketpy.remoting.server import RemotingServer
from tests.remoting.helpers import RecordingProcessor

from .fakes import NAMESRV

C_SEND = producer_module._plain_send
NO_C = (None if C_SEND is not Producer._send_plain and hasattr(speedups.compiled, "lone_answered")
        else "no compiled accelerator (client_lone_send)")
BROKER = "10.0.0.1:10911"
SENDS = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE)

KINDS = st.sampled_from(["plain", "plain", "plain", "uniq", "tags", "accented", "delayed", "short", "chain"])
ANSWERS = st.sampled_from(["ok", "ok", "ok", "flush-timeout", "other-queue", "system-error", "no-offset"])
#: the remoting client's and the producer's options: the usual ones, and those the C path leaves to Python
OPTIONS = st.sampled_from([{}, {}, {"queues": 1}, {"queues": 1}, {"async_permits": 1}, {"serialize_type": 1},
                           {"rpc_hooks": True}, {"send_smart_msg": False}, {"close_channel_on_timeout": False},
                           {"queues": 1, "linger": 0.5}])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["send", "send", "send_async"]), KINDS),
        st.tuples(st.just("answer"), st.tuples(st.integers(0, 3), ANSWERS)),
        st.tuples(st.just("advance"), st.sampled_from([0.0, 0.5, 1.0, 2.5])),
        st.tuples(st.just("lose"), st.just(0)),
    ),
    max_size=30,
)


@implementer(IStreamClientEndpoint)
class MemoryEndpoint:
    """Connects at once, over a new :class:`StringTransport` the wire keeps."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def connect(self, factory: IProtocolFactory) -> Deferred[Any]:
        protocol = factory.buildProtocol(IPv4Address("TCP", "10.0.0.1", 10911))
        assert isinstance(protocol, RemotingProtocol)
        transport = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.1", 10911))
        protocol.makeConnection(transport)
        self.wire.connections.append((protocol, transport))
        return succeed(protocol)


class Wire:
    """The broker's side of the connections: what was written, and answers to the send requests."""

    def __init__(self) -> None:
        self.connections: list[tuple[RemotingProtocol, StringTransport]] = []
        self.read_to: dict[int, int] = {}
        self.frames: list[bytes] = []  # every frame written, in order
        self.pending: list[tuple[RemotingProtocol, RemotingCommand]] = []  # send requests not answered yet

    def collect(self) -> None:
        for n, (protocol, transport) in enumerate(self.connections):
            data, at = transport.value(), self.read_to.get(n, 0)
            while len(data) - at >= 4:
                (length,) = struct.unpack_from(">I", data, at)
                frame = data[at + 4:at + 4 + length]
                self.frames.append(frame)
                request = decode(frame)
                if request.code in SENDS:
                    self.pending.append((protocol, request))
                at += 4 + length
            self.read_to[n] = at

    def answer(self, index: int, kind: str) -> None:
        self.collect()
        live = [(p, r) for p, r in self.pending if not p.closing]
        if not live:
            return
        protocol, request = live[index % len(live)]
        self.pending.remove((protocol, request))
        fields = request.ext_fields
        queue_id = fields.get("e", fields.get("queueId", "0"))
        ext = {"msgId": f"S{request.opaque}", "queueId": queue_id, "queueOffset": str(100 + request.opaque)}
        code = {"flush-timeout": 10, "system-error": 1}.get(kind, 0)
        if kind == "other-queue":
            ext["queueId"] = str((int(queue_id) + 1) % 4)
        elif kind == "no-offset":
            del ext["queueOffset"]
        protocol.dataReceived(encode(RemotingCommand(code, "JAVA", 401, request.opaque, 1, None, ext)))

    def lose(self) -> None:
        for protocol, _ in self.connections:
            if not protocol.closing:
                protocol.connectionLost(Failure(ConnectionDone()))


@implementer(IRPCHook)
class StampHook:
    """Adds a field to every request it sees (as the ACL hook signs them)."""

    def before_request(self, remote_address: str, request: RemotingCommand) -> None:
        request.ext_fields["stamped"] = "yes"

    def after_response(self, remote_address: str, request: RemotingCommand, response: RemotingCommand) -> None:
        pass


class Run:
    """One producer on a :class:`RemotingClient` over the wire, its route cached (4 queues)."""

    def __init__(self, test: SynchronousTestCase, options: dict[str, Any] | None = None) -> None:
        test.patch(route, "random", random.Random(0))  # RoundRobinIndex's start
        options = dict(options or {})
        smart = options.pop("send_smart_msg", True)
        queues = options.pop("queues", 4)
        linger = options.pop("linger", 0.0)
        if options.pop("rpc_hooks", False):
            options["rpc_hooks"] = [StampHook()]
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.wire = Wire()
        self.remoting = remoting = RemotingClient(
            self.clock, endpoint_factory=lambda address: MemoryEndpoint(self.wire), **options)
        instance = ClientInstance(self.clock, NAMESRV, remoting, client_id="10.0.0.9@1", poll_interval=1e6,
                                  heartbeat_interval=1e6)
        self.producer = Producer("PG", instance=instance, rng=random.Random(7), send_smart_msg=smart, linger=linger)
        self.producer.start()
        self.producer._publish["T"] = TopicPublishInfo("T", TopicRouteData([QueueData("b", queues, queues, 6)], [
            BrokerData("c", "b", {0: BROKER})]))
        instance.broker_addrs["b"] = {0: BROKER}
        self.outcomes: list[Any] = []
        self.sent = 0
        for _ in range(4):  # connected, each queue known and idle: the next sends may take the C path
            self.send("send", "plain")
            self.clock.advance(linger)
            self.wire.answer(0, "ok")

    def send(self, method: str, kind: str) -> None:
        n = self.sent
        self.sent += 1
        props = {"KEYS": f"k{n}"}
        if kind == "uniq":
            props["UNIQ_KEY"] = f"U{n}"
        elif kind == "tags":
            props["TAGS"] = "TagA"
        elif kind == "accented":
            props["KEYS"] = f"clé{n}"  # not plain JSON: the Python encoder writes the frame
        elif kind == "delayed":
            props["DELAY"] = "2"
        msg = Message("T", f"body{n}".encode(), 0, props)
        d = getattr(self.producer, method)(msg, 1.5 if kind == "short" else None)
        i = len(self.outcomes)
        self.outcomes.append(None)
        d.addBoth(self.outcome, i, msg, method if kind == "chain" else None)

    def outcome(self, result: Any, i: int, msg: Message, chain: str | None) -> None:
        if isinstance(result, Failure):
            self.outcomes[i] = ("failed", type(result.value).__name__)
        else:
            self.outcomes[i] = (result.status.name, result.msg_id, result.offset_msg_id, result.queue.queue_id,
                                result.queue_offset, msg.properties.get("UNIQ_KEY"))
        if chain is not None:  # the caller's next send, from the answer's read
            self.send(chain, "plain")

    def step(self, action: str, arg: Any) -> None:
        if action == "answer":
            self.wire.answer(*arg)
        elif action == "advance":
            self.clock.advance(arg)
        elif action == "lose":
            self.wire.lose()
        else:
            self.send(action, arg)
        self.wire.collect()

    def seen(self) -> Any:
        self.wire.collect()
        batcher = self.producer._batcher
        queues = batcher._queues.values() if batcher is not None else []
        return (self.wire.frames, [protocol.closing for protocol, _ in self.wire.connections], self.outcomes,
                self.producer._publish["T"].index._value,
                sorted((q.mq.queue_id, q.mode.name, q.in_flight, len(q.waiting)) for q in queues),
                self.remoting._async_permits.available)


class LoneSendTests(SynchronousTestCase):
    skip = NO_C

    def both(self, steps: list[tuple[str, Any]], options: dict[str, Any]) -> tuple[Any, Any]:
        runs = []
        for plain in (C_SEND, Producer._send_plain):
            self.patch(producer_module, "_plain_send", plain)
            run = Run(self, options)
            for action, arg in steps:
                run.step(action, arg)
            for _ in range(4):  # everything answered or timed out
                run.wire.answer(0, "ok")
                run.clock.advance(1.0)
            runs.append(run.seen())
        return runs[0], runs[1]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(STEPS, OPTIONS)
    # a send that joined a one-queue topic's request in flight: its deadline passed before that answer
    # (it fails unsent), or not (it leaves with what is left of its timeout, and times out by then)
    @example([("send", "plain"), ("send", "short"), ("advance", 1.0), ("advance", 1.0), ("answer", (0, "ok"))],
             {"queues": 1})
    @example([("send", "plain"), ("send", "plain"), ("advance", 1.0), ("answer", (0, "ok")), ("advance", 1.0),
              ("advance", 1.0)], {"queues": 1})
    def test_same_as_python(self, steps: list[tuple[str, Any]], options: dict[str, Any]) -> None:
        """Any run of sends, answers (odd ones included), clock steps and lost connections, with the
        usual options or unusual ones (one async permit, MessagePack headers, RPC hooks, SEND_MESSAGE
        (10), channels kept on timeouts): the C path writes the same frames and gives the same outcomes,
        queue states and permits as the Python one."""
        c, python = self.both(steps, options)
        self.maxDiff = None
        self.assertEqual(c, python, (steps, options))

    def test_lone_send_in_c(self) -> None:
        """A usual send to an idle queue neither calls the Python steps nor reads the clock more than once;
        its answer fires the caller's Deferred with its SendResult, and the queue is idle again."""
        run = Run(self)
        python_steps = {"_join_or_request": 0, "_answered_alone": 0, "_answered": 0}
        for owner, name in ((Producer, "_join_or_request"), (producer_module.AutoBatcher, "_answered_alone"),
                            (producer_module.AutoBatcher, "_answered")):
            self.patch(owner, name, counting(getattr(owner, name), python_steps, name))
        readings: list[float] = []
        clock_seconds = run.clock.seconds

        def seconds() -> float:
            readings.append(clock_seconds())
            return readings[-1]

        self.patch(run.clock, "seconds", seconds)
        run.step("send", "chain")
        self.assertEqual(len(readings), 1)
        run.step("answer", (0, "ok"))  # the chained send leaves from inside the answer's read
        self.assertEqual(len(run.wire.pending), 1)
        run.step("answer", (0, "ok"))
        self.assertEqual(python_steps, {"_join_or_request": 0, "_answered_alone": 0, "_answered": 0})
        self.assertEqual([o[0] for o in run.outcomes], ["SEND_OK"] * 6)
        assert run.producer._batcher is not None
        self.assertEqual({q.in_flight for q in run.producer._batcher._queues.values()}, {0})
        self.assertEqual(len({o[1] for o in run.outcomes}), 6)

    def test_next_send_to_the_same_queue_in_c(self) -> None:
        """On a one-queue topic the caller's next send, made from the answer's callback, joins the queue's
        waiting sends (the answer is still being delivered) and leaves alone once it is, all in C."""
        run = Run(self, {"queues": 1})
        python_steps = {"_join_or_request": 0, "_answered_alone": 0, "_answered": 0, "_flush": 0}
        for owner, name in ((Producer, "_join_or_request"), (producer_module.AutoBatcher, "_answered_alone"),
                            (producer_module.AutoBatcher, "_answered"), (producer_module.AutoBatcher, "_flush")):
            self.patch(owner, name, counting(getattr(owner, name), python_steps, name))
        run.step("send", "chain")
        run.step("answer", (0, "ok"))
        self.assertEqual(len(run.wire.pending), 1)  # the chained send, alone
        run.step("answer", (0, "ok"))
        self.assertEqual(python_steps, {"_join_or_request": 0, "_answered_alone": 0, "_answered": 0, "_flush": 0})
        self.assertEqual([o[0] for o in run.outcomes], ["SEND_OK"] * 6)
        assert run.producer._batcher is not None
        ((queue),) = run.producer._batcher._queues.values()
        self.assertEqual((queue.in_flight, queue.waiting), (0, []))

    def test_unusual_answer_takes_python(self) -> None:
        """An answer naming another queue, and a refused send, go through the Python reference (the
        second retried on another queue, as a SYNC send is)."""
        run = Run(self)
        run.step("send", "plain")
        run.step("answer", (0, "other-queue"))
        run.step("send", "plain")
        run.step("answer", (0, "system-error"))
        run.step("answer", (0, "ok"))
        self.assertEqual([o[0] for o in run.outcomes], ["SEND_OK"] * 6)
        moved, retried = run.outcomes[4:]
        self.assertEqual(moved[3], (int(decode(run.wire.frames[4]).ext_fields["e"]) + 1) % 4)
        self.assertNotEqual(retried[3], int(decode(run.wire.frames[5]).ext_fields["e"]))


def counting(python: Any, calls: dict[str, int], name: str) -> Any:
    def count(*args: Any) -> Any:
        calls[name] += 1
        return python(*args)
    return count


class LoopbackLoneSendTests(TestCase):
    """The lone send in C over a real TCP connection (the global reactor): a send made in an answer's
    callback leaves from that read at once when nothing else is pending on its channel, and is collected
    with the read's other writes otherwise."""

    skip = NO_C

    def setUp(self) -> None:
        from twisted.internet import reactor  # real I/O: this TestCase runs the global reactor

        self.reactor: Any = reactor
        self.server = RemotingServer(reactor)
        self.server.register_processor(RequestCode.SEND_MESSAGE_V2, RecordingProcessor(Stored()))
        self.held: list[Deferred[RemotingCommand]] = []
        self.server.register_processor(HELD, RecordingProcessor(lambda channel, request: self.hold()))
        self.client = RemotingClient(reactor)
        self.collected: list[RemotingProtocol] = []  # the client channels' reads that wrote what they collected
        collect = RemotingProtocol._write_collected

        def counting(channel: RemotingProtocol) -> bool:
            if channel._owner is self.client and channel._out:
                self.collected.append(channel)
            return collect(channel)

        self.patch(RemotingProtocol, "_write_collected", counting)

    def hold(self) -> Deferred[RemotingCommand]:
        d: Deferred[RemotingCommand] = Deferred()
        self.held.append(d)
        return d

    async def producer(self) -> tuple[Producer, str]:
        port = await TCP4ServerEndpoint(self.reactor, 0, interface="127.0.0.1").listen(self.server.factory())
        self.addCleanup(port.stopListening)
        self.addCleanup(self.server.close)
        self.addCleanup(self.client.close)
        address = f"127.0.0.1:{port.getHost().port}"
        instance = ClientInstance(self.reactor, NAMESRV, self.client, poll_interval=1e6, heartbeat_interval=1e6)
        producer = Producer("PG", instance=instance)
        producer._publish["T"] = TopicPublishInfo("T", TopicRouteData([QueueData("b", 4, 4, 6)], [BrokerData(
            "c", "b", {0: address})]))
        instance.broker_addrs["b"] = {0: address}
        producer.running = True  # no start(): no timers, nothing sent but the sends
        for _ in range(4):  # connected, every queue known
            await producer.send(Message("T", b"warm"))
        return producer, address

    def test_sent_at_once_when_alone(self) -> None:
        """Sends awaited one at a time each leave from the read of the previous one's answer, at once."""

        async def run() -> None:
            producer, _ = await self.producer()
            self.collected.clear()
            results = [await producer.send(Message("T", b"one at a time")) for _ in range(20)]
            self.assertEqual({r.status for r in results}, {SendStatus.SEND_OK})
            self.assertEqual(len({r.queue_offset for r in results}), 20)
            self.assertEqual(self.collected, [])

        return Deferred.fromCoroutine(run())  # type: ignore[return-value]

    def test_collected_when_another_is_pending(self) -> None:
        """With another request of the channel pending (its answer could come in the same read), the
        send is collected and written at the read's end, as RemotingProtocol._send_request does."""

        async def run() -> None:
            producer, address = await self.producer()
            other = self.client.invoke_sync(address, RemotingCommand.request(HELD), 10.0)
            self.collected.clear()
            results = [await producer.send(Message("T", b"one at a time")) for _ in range(5)]
            self.assertEqual({r.status for r in results}, {SendStatus.SEND_OK})
            self.assertEqual(len(self.collected), 5)
            (held,) = self.held
            held.callback(RemotingCommand(0, flag=1))
            self.assertEqual((await other).code, 0)

        return Deferred.fromCoroutine(run())  # type: ignore[return-value]


HELD = 9999  # a request code the test server answers only when told


class Stored:
    """A broker's answers to sends: each stored in the queue it names, at the next offset."""

    def __init__(self) -> None:
        self.offset = 0

    def __call__(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        self.offset += 1
        fields = {"msgId": f"S{self.offset}", "queueId": request.ext_fields["e"], "queueOffset": str(self.offset)}
        return request.make_response(0, ext_fields=fields)
