"""Hostile input against a live name server and broker on loopback: every request whose frame is
well formed gets an answer naming the bad field, the connection keeps serving, and the log gets a
warning line, never a traceback (the fuzz findings of issue 13)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twisted.logger import LogLevel, capturedLogs

from rocketpy.remoting.codes import RequestCode, ResponseCode
from tests.client.test_integration import IntegrationTestCase
from tests.security.raw import RawConnection, connect, json_frame

LONE = '"\\ud800"'  # JSON text of a string holding a lone surrogate

SEND_FIELDS = {"producerGroup": "PG", "topic": "Fuzzed", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
               "queueId": "0", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0", "properties": "",
               "reconsumeTimes": "0"}


def fields_with(base: dict[str, str], name: str, raw_value: str) -> str:
    """``base`` as JSON text with ``name`` set to the raw JSON ``raw_value``."""
    parts = [f'"{k}":{raw_value if k == name else repr_json(v)}' for k, v in base.items()]
    if name not in base:
        parts.append(f'"{name}":{raw_value}')
    return "{" + ",".join(parts) + "}"


def repr_json(value: str) -> str:
    import json
    return json.dumps(value)


def tracebacks(events: Sequence[dict[str, Any]]) -> list[str]:
    """The text of logged failures (events carrying a traceback) and errors."""
    return [str(e.get("log_format")) for e in events
            if "log_failure" in e or e.get("log_level") in (LogLevel.error, LogLevel.critical)]


class MalformedInputTests(IntegrationTestCase):
    async def serve(self) -> tuple[str, str]:
        cluster = await self.cluster()
        return cluster.namesrv_addr, next(iter(cluster.brokers.values())).config.advertised_address

    async def raw(self, address: str) -> RawConnection:
        connection = await connect(address)
        self.addCleanup(connection.abort)
        return connection

    async def assert_answered(self, connection: RawConnection, frames: list[tuple[int, bytes]],
                              field: str | None) -> None:
        """Each frame (opaque, bytes) is answered with an error whose remark names ``field``; then a
        heartbeat-free CHECK_CLIENT_CONFIG-style request on the same connection is still served."""
        with capturedLogs() as events:
            for opaque, frame in frames:
                connection.write(frame)
                response = await connection.answer(opaque)
                self.assertNotEqual(response.code, ResponseCode.SUCCESS, response)
                if field is not None:
                    self.assertIn(field, response.remark or "", response)
        self.assertEqual(tracebacks(events), [])

    async def test_lone_surrogate_in_header_fields(self) -> None:
        """A lone surrogate as SEND topic or properties, as 204's producerGroup, in code 38's fields and as
        the name server's 105 topic: answered SYSTEM_ERROR naming the field, connection still serving."""
        namesrv, broker = await self.serve()
        b = await self.raw(broker)
        await self.assert_answered(b, [
            (1, json_frame(RequestCode.SEND_MESSAGE, 1, fields_with(SEND_FIELDS, "topic", LONE), b"x")),
            (2, json_frame(RequestCode.SEND_MESSAGE, 2, fields_with(SEND_FIELDS, "properties", LONE), b"x")),
            (3, json_frame(RequestCode.GET_PRODUCER_CONNECTION_LIST, 3, '{"producerGroup":%s}' % LONE)),
            (4, json_frame(RequestCode.GET_CONSUMER_LIST_BY_GROUP, 4, '{"consumerGroup":%s}' % LONE)),
        ], "header field")
        n = await self.raw(namesrv)
        await self.assert_answered(n, [(5, json_frame(RequestCode.GET_ROUTEINFO_BY_TOPIC, 5, '{"topic":%s}' % LONE))],
                                   "'topic'")
        for connection, code, opaque in ((b, RequestCode.GET_BROKER_RUNTIME_INFO, 6),
                                         (n, RequestCode.GET_BROKER_CLUSTER_INFO, 7)):
            connection.write(json_frame(code, opaque, {}))
            self.assertEqual((await connection.answer(opaque)).code, ResponseCode.SUCCESS)

    async def test_out_of_range_integers(self) -> None:
        """Integers beyond their Java type in SEND fields are refused naming the field, before the store."""
        _, broker = await self.serve()
        b = await self.raw(broker)
        for opaque, name in enumerate(("flag", "sysFlag", "bornTimestamp", "reconsumeTimes", "queueId"), 10):
            frame = json_frame(RequestCode.SEND_MESSAGE, opaque,
                               fields_with(SEND_FIELDS, name, '"-493370966749666776861"'), b"x")
            await self.assert_answered(b, [(opaque, frame)], f"'{name}'")

    async def test_deeply_nested_json_bodies(self) -> None:
        """A body of 5,000 nested arrays gets SYSTEM_ERROR naming the body, at the broker and the name server."""
        namesrv, broker = await self.serve()
        nested = b"[" * 5000 + b"]" * 5000
        b = await self.raw(broker)
        codes = (RequestCode.HEART_BEAT, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.LOCK_BATCH_MQ,
                 RequestCode.UNLOCK_BATCH_MQ)
        await self.assert_answered(b, [(20 + i, json_frame(code, 20 + i, {"consumerGroup": "G"}, nested))
                                       for i, code in enumerate(codes)], "body")
        n = await self.raw(namesrv)
        register = {"brokerName": "b", "brokerAddr": "127.0.0.1:1", "clusterName": "c", "haServerAddr": "",
                    "brokerId": "0", "compressed": "false"}
        await self.assert_answered(n, [(30, json_frame(RequestCode.REGISTER_BROKER, 30, register, nested))], "body")

    async def test_requests_before_a_malformed_frame_are_answered(self) -> None:
        """Three SENDs and a frame of length 0 in one write: the three are stored and answered, then the
        connection closes, with a warning and no traceback."""
        _, broker = await self.serve()
        b = await self.raw(broker)
        sends = b"".join(json_frame(RequestCode.SEND_MESSAGE, 40 + i, SEND_FIELDS, b"m%d" % i) for i in range(3))
        with capturedLogs() as events:
            b.write(sends + b"\0\0\0\0")
            await b.closed
        self.assertEqual([b.responses[40 + i].code for i in range(3)], [ResponseCode.SUCCESS] * 3)
        self.assertEqual(tracebacks(events), [])
        self.assertTrue(any(e.get("log_level") == LogLevel.warn for e in events))
