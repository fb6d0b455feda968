"""Test doubles at the network edge of the client: a fake remoting client and
a scripted cluster (name server + brokers) that answers through it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, fail, maybeDeferred, succeed
from twisted.internet.task import Clock

from rocketpy.common.headers import expand_send_v2, get_int
from rocketpy.common.message import MessageExt, decode_batch, encode_record, string_to_properties
from rocketpy.common.route import BrokerData, QueueData, TopicRouteData
from rocketpy.namesrv.bodies import encode_topic_route
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectError
from rocketpy.remoting.pending import Then, call_then

#: ``(address, request, timeout) -> response`` (or a Deferred of one, or raise).
Handler = Callable[[str, RemotingCommand, float], Any]
NAMESRV = "ns:9876"


class FakeRemotingClient:
    """Follows :class:`rocketpy.remoting.client.RemotingClient`'s API; answers with handlers.

    :ivar requests: every request as ``(kind, address, request, timeout)``.
    """

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, RemotingCommand, float]] = []
        self.handlers: dict[tuple[str | None, int], Handler] = {}
        self.processors: dict[int, Any] = {}
        self.closed = False

    def on(self, code: int, handler: Handler, addr: str | None = None) -> None:
        self.handlers[(addr, int(code))] = handler

    def sent(self, code: int, kind: str | None = None) -> list[tuple[str, RemotingCommand]]:
        """``(address, request)`` of the requests with ``code`` (and ``kind``)."""
        return [(a, r) for k, a, r, _ in self.requests if r.code == code and kind in (None, k)]

    def _dispatch(self, kind: str, addr: str, request: RemotingCommand, timeout: float) -> Deferred[Any]:
        self.requests.append((kind, addr, request, timeout))
        if self.closed:
            return fail(RemotingConnectError(addr, "client closed"))
        handler = self.handlers.get((addr, request.code)) or self.handlers.get((None, request.code))
        if handler is None:
            return fail(RemotingConnectError(addr, f"no fake handler for code {request.code}"))
        return maybeDeferred(handler, addr, request, timeout)

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        return self._dispatch("sync", address, request, timeout)

    def invoke_async(self, address: str, request: RemotingCommand, timeout: float, callback: Any = None) -> Deferred[Any]:
        return self._dispatch("async", address, request, timeout)

    def invoke_then(self, address: str, request: RemotingCommand, timeout: float, then: Then,
                    args: tuple[Any, ...] = (), bounded: bool = False) -> None:
        """The same dispatch, its outcome to ``then(outcome, *args)`` (the producer's lone sends)."""
        self._dispatch("async" if bounded else "sync", address, request, timeout).addBoth(call_then, then, args)

    def invoke_oneway(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[None]:
        request.mark_oneway()
        return self._dispatch("oneway", address, request, timeout).addCallback(lambda _: None)

    def register_processor(self, code: int, processor: Any, executor: Any = None) -> None:
        self.processors[int(code)] = processor

    def close(self) -> Deferred[None]:
        self.closed = True
        return succeed(None)


def hold_sends(remoting: FakeRemotingClient, held: list[Deferred[Any]]) -> None:
    """Send requests (single and batch) are answered only when their Deferred, appended to ``held``,
    is fired (with anything)."""
    for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        remoting.on(code, _held(remoting.handlers[(None, code)], held))


def _held(send: Handler, held: list[Deferred[Any]]) -> Handler:
    def handler(addr: str, request: RemotingCommand, timeout: float) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        d.addCallback(lambda _: send(addr, request, timeout))
        held.append(d)
        return d
    return handler


def response(code: int = 0, remark: str | None = None, body: bytes = b"", **ext: Any) -> RemotingCommand:
    return RemotingCommand(code=code, flag=1, remark=remark, ext_fields={k: str(v) for k, v in ext.items()}, body=body)


@dataclass
class FakeBroker:
    name: str
    addr: str
    queues: int = 4
    #: (topic, queue id) -> stored messages
    store: dict[tuple[str, int], list[MessageExt]] = field(default_factory=dict)
    #: queued send outcomes: a response code, an exception, or a callable(request) run first
    send_script: list[Any] = field(default_factory=list)
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    commit_log_offset: int = 0


class FakeCluster:
    """A name server and brokers answering through a :class:`FakeRemotingClient`."""

    def __init__(self, clock: Clock, remoting: FakeRemotingClient | None = None) -> None:
        self.clock = clock
        self.remoting = remoting or FakeRemotingClient()
        self.brokers: dict[str, FakeBroker] = {}
        self.topics: dict[str, list[str]] = {}  # topic -> broker names
        self.consumer_ids: list[str] = []
        self.locks: dict[Any, str] = {}
        self.sent_back: list[dict[str, str]] = []
        self.holds: list[tuple[Any, Deferred[RemotingCommand], Any]] = []
        r = self.remoting
        r.on(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route, NAMESRV)
        for code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            r.on(code, lambda a, req, t: response())
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            r.on(code, self._send)
        r.on(RequestCode.PULL_MESSAGE, self._pull)
        r.on(RequestCode.QUERY_CONSUMER_OFFSET, self._query_offset)
        r.on(RequestCode.UPDATE_CONSUMER_OFFSET, self._update_offset)
        r.on(RequestCode.GET_MAX_OFFSET, self._max_offset)
        r.on(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self._search_offset)
        r.on(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self._consumer_list)
        r.on(RequestCode.LOCK_BATCH_MQ, self._lock)
        r.on(RequestCode.UNLOCK_BATCH_MQ, self._unlock)
        r.on(RequestCode.CONSUMER_SEND_MSG_BACK, self._send_back)

    def add_broker(self, name: str, addr: str, queues: int = 4) -> FakeBroker:
        self.brokers[name] = FakeBroker(name, addr, queues)
        return self.brokers[name]

    def add_topic(self, topic: str, *broker_names: str) -> None:
        self.topics[topic] = list(broker_names or self.brokers)

    def publish(self, broker_name: str, topic: str, qid: int, body: bytes, sys_flag: int = 0, born: int = 0,
                **props: str) -> MessageExt:
        """Store a message as if a producer had sent it; wakes held pulls."""
        broker = self.brokers[broker_name]
        queue = broker.store.setdefault((topic, qid), [])
        msg = MessageExt(topic=topic, body=body, properties=dict(props), queue_id=qid, sys_flag=sys_flag,
                         born_timestamp=born, store_host=("127.0.0.1", 10911), queue_offset=len(queue),
                         commit_log_offset=broker.commit_log_offset)
        broker.commit_log_offset += 100
        queue.append(msg)
        self.wake_holds(broker.addr, topic, qid)
        return msg

    def broker_at(self, addr: str) -> FakeBroker:
        return next(b for b in self.brokers.values() if b.addr == addr)

    def _route(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        topic = request.ext_fields["topic"]
        if topic not in self.topics:
            return response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}")
        brokers = [self.brokers[n] for n in self.topics[topic]]
        route = TopicRouteData(
            [QueueData(b.name, b.queues, b.queues, 7 if topic == "TBW102" else 6) for b in brokers],
            [BrokerData("C", b.name, {0: b.addr}) for b in brokers],
        )
        return response(body=encode_topic_route(route))

    def _send(self, addr: str, request: RemotingCommand, timeout: float) -> Any:
        broker = self.broker_at(addr)
        if broker.send_script:
            outcome = broker.send_script.pop(0)
            if callable(outcome):
                outcome = outcome(request)
            if isinstance(outcome, Exception):
                raise outcome
            if outcome not in (0, 10, 11, 12):
                return response(outcome, "scripted failure")
        else:
            outcome = 0
        fields = expand_send_v2(request.ext_fields) if request.code != RequestCode.SEND_MESSAGE else request.ext_fields
        topic, qid = fields["topic"], get_int(fields, "queueId")
        props = string_to_properties(fields.get("properties"))
        if fields.get("batch") == "true":
            items = [(m.body, m.flag, m.properties) for m in decode_batch(request.body, topic)]
        else:
            items = [(request.body, get_int(fields, "flag"), props)]
        queue = broker.store.setdefault((topic, qid), [])
        first = len(queue)
        for body, flag, p in items:
            msg = MessageExt(topic=topic, body=body, flag=flag, properties=p, queue_id=qid,
                             sys_flag=get_int(fields, "sysFlag"), born_timestamp=get_int(fields, "bornTimestamp"),
                             store_host=("127.0.0.1", 10911), queue_offset=len(queue),
                             commit_log_offset=broker.commit_log_offset,
                             reconsume_times=get_int(fields, "reconsumeTimes", 0))
            broker.commit_log_offset += 100
            queue.append(msg)
        self.wake_holds(addr, topic, qid)
        msg_id = ",".join(m.msg_id for m in queue[first:])  # a batch answers with every id, as Java's broker
        return response(outcome, msgId=msg_id, queueId=qid, queueOffset=first)

    def _pull(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand | Deferred[RemotingCommand]:
        f = request.ext_fields
        queue = self.broker_at(addr).store.get((f["topic"], int(f["queueId"])), [])
        offset, count = int(f["queueOffset"]), int(f["maxMsgNums"])
        ext: dict[str, Any] = {"minOffset": 0, "maxOffset": len(queue), "suggestWhichBrokerId": 0}
        if offset > len(queue):
            return response(ResponseCode.PULL_OFFSET_MOVED, nextBeginOffset=len(queue), **ext)
        if offset == len(queue):
            if int(f["sysFlag"]) & 0x2:  # long polling: answer on a new message or after the suspend time
                return self._hold(addr, request, timeout)
            return response(ResponseCode.PULL_NOT_FOUND, nextBeginOffset=offset, **ext)
        picked = queue[offset : offset + count]
        body = b"".join(bytes(encode_record(m)) for m in picked)
        return response(body=body, nextBeginOffset=offset + len(picked), **ext)

    def _hold(self, addr: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        f = request.ext_fields
        key = (addr, f["topic"], int(f["queueId"]))
        no_flag = RemotingCommand(code=request.code, ext_fields={**f, "sysFlag": "0"})

        def cancel(_: object) -> None:
            call.cancel()
            self.holds.remove((key, d, call))

        d: Deferred[RemotingCommand] = Deferred(cancel)

        def wake() -> None:
            self.holds.remove((key, d, call))
            answer = self._pull(addr, no_flag, timeout)  # without the suspend flag: never held
            assert isinstance(answer, RemotingCommand)
            d.callback(answer)

        call = self.clock.callLater(int(f["suspendTimeoutMillis"]) / 1000, wake)
        self.holds.append((key, d, call))
        return d

    def wake_holds(self, addr: str, topic: str, qid: int) -> None:
        for key, d, call in list(self.holds):
            if key == (addr, topic, qid):
                call.reset(0)

    def _query_offset(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        f = request.ext_fields
        key = (f["consumerGroup"], f["topic"], int(f["queueId"]))
        if key not in self.broker_at(addr).offsets:
            return response(ResponseCode.QUERY_NOT_FOUND, "Not found")
        return response(offset=self.broker_at(addr).offsets[key])

    def _update_offset(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        f = request.ext_fields
        self.broker_at(addr).offsets[(f["consumerGroup"], f["topic"], int(f["queueId"]))] = int(f["commitOffset"])
        return response()

    def _max_offset(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        f = request.ext_fields
        return response(offset=len(self.broker_at(addr).store.get((f["topic"], int(f["queueId"])), [])))

    def _search_offset(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """The first message stored at or after the timestamp (ms), by born timestamp."""
        f = request.ext_fields
        queue = self.broker_at(addr).store.get((f["topic"], int(f["queueId"])), [])
        ts = int(f["timestamp"])
        return response(offset=next((m.queue_offset for m in queue if m.born_timestamp >= ts), len(queue)))

    def _consumer_list(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        return response(body=json.dumps({"consumerIdList": self.consumer_ids}).encode())

    def _lock(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        body = json.loads(request.body)
        ok = []
        for q in body["mqSet"]:
            key = (q["topic"], q["brokerName"], q["queueId"])
            if self.locks.setdefault(key, body["clientId"]) == body["clientId"]:
                ok.append(q)
        return response(body=json.dumps({"lockOKMQSet": ok}).encode())

    def _unlock(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        body = json.loads(request.body)
        for q in body["mqSet"]:
            key = (q["topic"], q["brokerName"], q["queueId"])
            if self.locks.get(key) == body["clientId"]:
                del self.locks[key]
        return response()

    def _send_back(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        self.sent_back.append(dict(request.ext_fields))
        return response()


def one_broker_cluster(clock: Clock, topic: str = "T") -> tuple[FakeCluster, FakeBroker]:
    """A fake cluster at ``clock``'s time 1.7e9 s with one broker of one queue serving ``topic``."""
    clock.advance(1_700_000_000)
    cluster = FakeCluster(clock)
    broker = cluster.add_broker("broker-a", "10.0.0.1:10911", queues=1)
    cluster.add_topic(topic)
    return cluster, broker

