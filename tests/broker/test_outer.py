"""Tests for :mod:`rocketpy.broker.outer`: registration body, header and timing."""

from __future__ import annotations

import json
import zlib

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.config import BrokerConfig
from rocketpy.broker.outer import NameServerRegistration, registration_period
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.namesrv.bodies import decode_register_body
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingTimeoutError


class RecordingClient:
    """Records invoke_sync calls; each gets a Deferred the test fires."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, RemotingCommand, float, Deferred[RemotingCommand]]] = []

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        d: Deferred[RemotingCommand] = Deferred()
        self.calls.append((address, request, timeout, d))
        return d

    def answer_all(self, code: int = ResponseCode.SUCCESS) -> None:
        for _, request, _, d in list(self.calls):
            if not d.called:
                d.callback(request.make_response(code, "nope" if code else None))


class RegistrationTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(100)
        self.config = BrokerConfig(
            advertised_address="10.1.2.3:10911", namesrv_addr=["ns1:9876", "ns2:9876"], broker_name="b1"
        )
        self.topics = TopicConfigManager(self.clock, broker_name="b1")
        self.client = RecordingClient()
        self.reg = NameServerRegistration(self.clock, self.client, self.config, self.topics)

    def test_request_shape(self) -> None:
        """REGISTER_BROKER goes to every name server with the Java header and a RegisterBrokerBody with CRC."""
        self.reg.start()
        self.assertEqual([c[0] for c in self.client.calls], ["ns1:9876", "ns2:9876"])
        _, request, timeout, _ = self.client.calls[0]
        self.assertEqual(request.code, RequestCode.REGISTER_BROKER)
        self.assertEqual(timeout, 6.0)
        self.assertEqual(
            request.ext_fields,
            {
                "brokerName": "b1",
                "brokerAddr": "10.1.2.3:10911",
                "clusterName": "DefaultCluster",
                "haServerAddr": "10.1.2.3:10912",
                "brokerId": "0",
                "compressed": "false",
                "bodyCrc32": str(zlib.crc32(request.body) & 0x7FFFFFFF),
            },
        )
        obj = json.loads(request.body)
        self.assertEqual(obj["filterServerList"], [])
        self.assertEqual(obj["topicConfigSerializeWrapper"]["topicConfigTable"]["TBW102"]["perm"], 7)
        parsed = decode_register_body(request.body)  # the name server's own decoder reads it
        self.assertEqual(parsed.topic_configs["TBW102"].write_queue_nums, 8)
        self.assertEqual(parsed.data_version.counter, self.topics.data_version.counter)
        self.client.answer_all()

    def test_periodic_and_clamped(self) -> None:
        """Registration repeats every period, clamped to 10..60 s; a pending one delays the next."""
        self.assertEqual((registration_period(1), registration_period(30), registration_period(600)), (10, 30, 60))
        self.reg.start()
        self.clock.advance(30)
        self.assertEqual(len(self.client.calls), 2)  # still waiting for the first answers
        self.client.answer_all()
        self.clock.advance(30)
        self.assertEqual(len(self.client.calls), 4)
        self.client.answer_all()

    def test_failures_are_not_fatal(self) -> None:
        """Error responses and timeouts are logged; the timer keeps going."""
        self.reg.start()
        self.client.calls[0][3].errback(RemotingTimeoutError("slow"))
        self.client.calls[1][3].callback(self.client.calls[1][1].make_response(ResponseCode.SYSTEM_ERROR, "bad"))
        self.clock.advance(30)
        self.assertEqual(len(self.client.calls), 4)
        self.client.answer_all()

    def test_topic_change_registers_at_once_coalesced(self) -> None:
        """Topic creations trigger one immediate registration per burst."""
        self.reg.start()
        self.client.answer_all()
        self.topics.create_topic_in_send_message_method("T1", "TBW102", "peer", 4)
        self.topics.create_topic_in_send_message_method("T2", "TBW102", "peer", 4)
        self.assertEqual(len(self.client.calls), 2)
        self.clock.advance(0)
        self.assertEqual(len(self.client.calls), 4)
        self.assertIn(b'"T2"', self.client.calls[-1][1].body)
        self.client.answer_all()

    def test_no_registration_before_start(self) -> None:
        """A topic change before start sends nothing."""
        self.topics.create_topic_in_send_message_method("T1", "TBW102", "peer", 4)
        self.clock.advance(0)
        self.assertEqual(self.client.calls, [])

    def test_stop_unregisters(self) -> None:
        """Stop waits for the running registration, then sends UNREGISTER_BROKER to every name server."""
        self.reg.start()
        d = Deferred.fromCoroutine(self.reg.stop())
        self.assertNoResult(d)
        self.client.answer_all()
        unregister = self.client.calls[2:]
        self.assertEqual([c[1].code for c in unregister], [RequestCode.UNREGISTER_BROKER] * 2)
        self.assertEqual(set(unregister[0][1].ext_fields), {"brokerName", "brokerAddr", "clusterName", "brokerId"})
        self.assertNoResult(d)
        self.client.answer_all()
        self.successResultOf(d)
        self.clock.advance(60)
        self.assertEqual(len(self.client.calls), 4)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_stop_waits_for_a_registration_of_a_topic_change(self) -> None:
        """A registration a topic change started is answered before UNREGISTER_BROKER goes out."""
        self.reg.start()
        self.client.answer_all()
        self.topics.create_topic_in_send_message_method("T1", "TBW102", "peer", 4)
        self.clock.advance(0)
        d = Deferred.fromCoroutine(self.reg.stop())
        self.assertEqual([c[1].code for c in self.client.calls[2:]], [RequestCode.REGISTER_BROKER] * 2)
        self.client.answer_all()
        self.assertEqual([c[1].code for c in self.client.calls[4:]], [RequestCode.UNREGISTER_BROKER] * 2)
        self.client.answer_all()
        self.successResultOf(d)

    def test_no_name_servers(self) -> None:
        """Without name servers nothing is sent and stop finishes at once."""
        self.config.namesrv_addr = []
        self.reg.start()
        self.successResultOf(Deferred.fromCoroutine(self.reg.stop()))
        self.assertEqual(self.client.calls, [])
