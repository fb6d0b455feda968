"""A bounded property-based fuzz of a live name server and broker on loopback (``hypothesis``).

Generated frames and field values go to each server, one fresh connection per example. A frame
the codec can place (a request, or a whole frame with an invalid header) must be answered with its
opaque; any other frame must close the connection. After every example a canary connection must
still be served, and no error or traceback may have been logged. Hypothesis runs in a thread of
its own and waits on the reactor with ``blockingCallFromThread``, so failing examples shrink.
``derandomize`` and no example database keep the run the same on every machine.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Callable, cast

import msgpack  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import blockingCallFromThread, deferToThreadPool
from twisted.logger import ILogObserver, LogLevel, globalLogPublisher
from twisted.python.threadpool import ThreadPool
from zope.interface import provider

from rocketpy.remoting.codec import MalformedRequestError, ProtocolError, decode, encode
from rocketpy.remoting.codes import ONEWAY_FLAG, RESPONSE_FLAG, RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.client.test_integration import IntegrationTestCase
from tests.security.raw import RawConnection, connect, json_frame

#: Codes left out: they reconfigure the server under test (a fuzzed listen address or store path).
RECONFIGURING = {RequestCode.UPDATE_BROKER_CONFIG, RequestCode.UPDATE_NAMESRV_CONFIG}
#: Codes that may rightly answer nothing: a long-polling pull is held until its (fuzzed) timeout,
#: and END_TRANSACTION answers nothing, as in Java, when the state is "unknown".
MAY_NOT_ANSWER = {RequestCode.PULL_MESSAGE, RequestCode.END_TRANSACTION}
CODES = sorted(int(c) for c in RequestCode if c not in RECONFIGURING)
#: Codes whose fields reach deep (the store's record encoder, tables, replies quoting a field).
HOT_CODES = [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
             RequestCode.HEART_BEAT, RequestCode.GET_PRODUCER_CONNECTION_LIST, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
             RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.REGISTER_BROKER, RequestCode.LOCK_BATCH_MQ,
             RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.QUERY_MESSAGE,
             RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.VIEW_MESSAGE_BY_ID]
FIELD_NAMES = ["topic", "producerGroup", "consumerGroup", "group", "queueId", "flag", "sysFlag", "bornTimestamp",
               "reconsumeTimes", "properties", "defaultTopic", "defaultTopicQueueNums", "queueOffset", "maxMsgNums",
               "commitOffset", "suspendTimeoutMillis", "subscription", "subVersion", "offset", "delayLevel",
               "originMsgId", "maxReconsumeTimes", "brokerName", "brokerAddr", "clusterName", "brokerId",
               "namespace", "key", "value", "clientId", "msgId", "timestamp", "isForce", "key", "unitMode",
               "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "l", "m"]
NASTY_TEXT = ["\ud800", "x\udfff", "\udc80", "", " ", "-1", "0", "2147483648", "-493370966749666776861",
              "9" * 30, "TopicTest", "%RETRY%G", "TBW102", "SCHEDULE_TOPIC_XXXX", "\x01\x02", "1.5", "true",
              "a" * 300, "*", "||", "127.0.0.1:10911"]
MAX_EXAMPLES = 100  # per server; a few seconds in all

#: the kinds of value behind the findings of issue 13 (text that is no UTF-8, integers beyond 64
#: bits), often; any text or integer otherwise
HOSTILE = ["\ud800", "x\udfff", "\udc80", "-493370966749666776861", "9" * 30, "2147483648"]
values = st.one_of(st.sampled_from(HOSTILE), st.sampled_from(NASTY_TEXT), st.text(max_size=12),
                   st.integers(-2**70, 2**70).map(str))
#: mostly a plausible send header with a few fields replaced, sometimes anything
SEND_FIELDS = {"producerGroup": "PG", "topic": "Fuzzed", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
               "queueId": "0", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0", "properties": "",
               "reconsumeTimes": "0", "consumerGroup": "CG", "group": "CG", "offset": "0", "delayLevel": "0",
               "brokerName": "broker-a", "brokerAddr": "127.0.0.1:1", "clusterName": "c", "brokerId": "0"}
#: the fields most requests read first
KEY_FIELDS = ["topic", "producerGroup", "consumerGroup", "group", "properties", "flag", "sysFlag", "bornTimestamp",
              "reconsumeTimes", "queueId", "b", "h", "i"]
changes = st.dictionaries(st.one_of(st.sampled_from(KEY_FIELDS), st.sampled_from(KEY_FIELDS),
                                    st.sampled_from(FIELD_NAMES), st.text(max_size=4)), values, min_size=1, max_size=3)
fields = st.one_of(changes.map(lambda c: {**SEND_FIELDS, **c}), changes)
nested = st.sampled_from([10, 999, 1500, 5000]).map(lambda n: b"[" * n + b"]" * n)
json_bodies = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=8).map(lambda v: json.dumps(v).encode())
bodies = st.one_of(st.just(b"x"), st.binary(max_size=64), nested, json_bodies)


def json_text(value: Any) -> bytes:
    """JSON that may carry lone surrogates (as ``\\ud800`` escapes)."""
    return json.dumps(value).encode()


#: a request every server answers, sent before a damaged frame in the same write
GOOD_SEND = json_frame(RequestCode.SEND_MESSAGE, 2**31 - 1, {**SEND_FIELDS, "topic": "Fuzzed"}, b"before")


@st.composite
def frames(draw: Any) -> bytes:
    """One frame, a request in JSON or msgpack, maybe damaged (then maybe after a good request)."""
    code = st.one_of(st.sampled_from(HOT_CODES), st.sampled_from(HOT_CODES), st.sampled_from(CODES),
                     st.integers(-2**15, 2**15))
    header: dict[str, Any] = {"code": draw(code),
                              "opaque": draw(st.integers(1, 2**31 - 2)),  # 2**31 - 1: GOOD_SEND
                              "flag": draw(st.sampled_from([0, 0, 0, ONEWAY_FLAG, RESPONSE_FLAG])),
                              "language": "JAVA", "version": 399, "extFields": draw(fields)}
    if draw(st.booleans()):
        header[draw(st.sampled_from(["code", "opaque", "flag", "extFields", "remark", "language"]))] = draw(
            st.one_of(values, st.integers(-2**40, 2**40), st.none(), st.lists(st.integers(), max_size=2)))
    body = draw(bodies)
    encoding = draw(st.sampled_from(["json", "json", "json", "msgpack"]))
    raw, kind = json_text(header), 0
    if encoding == "msgpack":
        try:
            raw, kind = msgpack.packb(header, unicode_errors="surrogatepass"), 2
        except OverflowError:  # an integer beyond 64 bits: JSON only
            pass
    data = struct.pack(">iI", 4 + len(raw) + len(body), (kind << 24) | len(raw)) + raw + body
    damage = draw(st.sampled_from(["none"] * 6 + ["zero length", "short header", "cut header", "garbage"]))
    if damage == "none":
        return data
    before = draw(st.sampled_from([b"", GOOD_SEND]))
    if damage == "zero length":
        return before + b"\0\0\0\0"
    if damage == "short header":
        return before + struct.pack(">iI", 4 + len(raw) + len(body), (kind << 24) | (len(raw) + len(body) + 1)) \
            + raw + body
    if damage == "cut header":
        cut = draw(st.integers(0, max(0, len(raw) - 1)))
        return before + struct.pack(">iI", 4 + cut, (kind << 24) | cut) + raw[:cut]
    junk = draw(st.binary(min_size=1, max_size=40))
    return before + struct.pack(">I", 4 + len(junk)) + draw(st.binary(min_size=4, max_size=4)) + junk


def expectation(frame: bytes) -> tuple[list[int], bool]:
    """The opaques the server must answer for ``frame`` (one frame, or the good send and a damaged
    one), and whether it must then close the connection."""
    answered = []
    if frame.startswith(GOOD_SEND):
        answered.append(2**31 - 1)
        frame = frame[len(GOOD_SEND):]
    try:
        command = decode(frame[4:]) if len(frame) >= 8 and struct.unpack_from(">I", frame)[0] == len(frame) - 4 \
            else None
    except MalformedRequestError as e:
        command = e.command
    except ProtocolError:
        command = None
    if command is None:
        return answered, True
    if not (command.flag & (ONEWAY_FLAG | RESPONSE_FLAG) or command.code in MAY_NOT_ANSWER):
        answered.append(command.opaque)
    return answered, False


class FuzzTests(IntegrationTestCase):
    timeout = 180

    async def test_every_frame_answered_or_closed_no_traceback(self) -> None:
        """Generated frames at the name server and the broker: answers, closes and canaries as promised."""
        cluster = await self.cluster()
        broker = next(iter(cluster.brokers.values())).config.advertised_address
        errors: list[dict[str, Any]] = []

        @provider(ILogObserver)
        def observe(event: dict[str, Any]) -> None:
            if "log_failure" in event or event.get("log_level") in (LogLevel.error, LogLevel.critical):
                errors.append(event)

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        pool = ThreadPool(1, 1, "fuzz")
        pool.start()
        self.addCleanup(pool.stop)
        for address, canary_code in ((cluster.namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO),
                                     (broker, RequestCode.GET_BROKER_RUNTIME_INFO)):
            canary = await connect(address)
            self.addCleanup(canary.abort)
            await deferToThreadPool(cast(IReactorFromThreads, reactor), pool, self.fuzz, address, canary,
                                    canary_code, errors)

    def fuzz(self, address: str, canary: RawConnection, canary_code: int, errors: list[dict[str, Any]]) -> None:
        """In a pool thread: run hypothesis, each example waiting on the reactor."""
        counter = iter(range(1, 2**31))
        failed: list[tuple[bytes, str]] = []

        @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(frames())
        def one(frame: bytes) -> None:
            try:
                def run() -> Deferred[None]:
                    return Deferred.fromCoroutine(self.check(address, frame, canary, canary_code, next(counter)))

                # (Any: Twisted's annotation cannot pick a T out of a Deferred[None]-returning callable)
                blockingCallFromThread(cast(IReactorFromThreads, reactor), cast(Callable[[], Any], run))
                if errors:
                    event = errors.pop()
                    raise AssertionError(f"logged: {event.get('log_format')} {event.get('log_failure', '')}")
            except BaseException as e:
                failed.append((frame, repr(e)))
                raise

        try:
            one()
        except BaseException as e:  # the shrunk examples come last
            shown = "\n".join(f"{frame[:300]!r}: {problem}" for frame, problem in failed[-3:])
            raise AssertionError(f"{address}: {e!r}; {len(failed)} failing frames, the last:\n{shown}") from None

    async def check(self, address: str, frame: bytes, canary: RawConnection, canary_code: int, n: int) -> None:
        answered, closes = expectation(frame)
        connection = await connect(address)
        try:
            connection.write(frame)
            for opaque in answered:
                await connection.answer(opaque, timeout=5)
            if closes:
                await connection.closed.addTimeout(5, reactor)
        finally:
            connection.abort()
        canary.write(encode(RemotingCommand(canary_code, opaque=n)))
        self.assertEqual((await canary.answer(n)).code, ResponseCode.SUCCESS)
