"""The official 5.x client against a two-master cluster: a name server and two brokers in this process, each
with its own gRPC endpoint on port 0; the client is told only broker-a's endpoint (doc/grpc.md, "Clusters")."""

from __future__ import annotations

import json
import os
from functools import partial
from typing import Any, cast

from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import SkipTest, TestCase

from rocketpy.broker.controller import BrokerService
from rocketpy.common.topic import TopicConfig
from rocketpy.grpc.cluster import GRPC_ENDPOINT_NAMESPACE, decode_kv_table
from rocketpy.grpc.messaging import CallContext, Messaging
from rocketpy.grpc.server import GrpcService, broker_messaging
from rocketpy.grpc.transaction import TransactionId
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.client.test_integration import LoopbackCluster, pause
from tests.interop.test_v5 import HARNESS
from tests.interop.v5venv import v5_python

TOPIC = "TCluster"
BROKERS = ("broker-a", "broker-b")
SENT = 8


class V5ClusterTests(TestCase):
    """A 5.x client pointed at broker-a sees, writes to, and reads and acks from both brokers."""

    timeout = 120

    async def _cluster(self) -> None:
        try:
            self.python5 = v5_python()
        except RuntimeError as e:
            raise SkipTest(f"cannot install the RocketMQ 5.x client in a venv: {e}") from None
        self.cluster = LoopbackCluster(self)
        self.addCleanup(self.cluster.close)
        self.endpoints: dict[str, GrpcService] = {}
        for name in BROKERS:
            # undecided transactions checked after 1 s, as in tests.interop.test_v5
            await self.cluster.add_broker(name, transaction_check_interval=1.0, transaction_timeout=1.0)
            # one queue each: the client's first two receives cover both brokers
            self.cluster.brokers[name].topics.update_topic_config(TopicConfig(TOPIC, 1, 1))
            await self._endpoint(name)
        await self.cluster.wait_for_route(TOPIC, brokers=2)
        await self._until_published()

    async def _endpoint(self, name: str) -> None:
        """Start the gRPC endpoint of broker ``name`` on port 0."""
        service = GrpcService(reactor, "tcp:0:interface=127.0.0.1",
                              partial(broker_messaging, reactor, self.cluster.brokers[name], [1000, 5000]))
        service.startService()
        self.addCleanup(service.stopService)
        await service.when_started()
        self.endpoints[name] = service

    async def _until_published(self) -> None:
        """Until the name server's KV config holds every endpoint (published when each started listening)."""
        request = RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": GRPC_ENDPOINT_NAMESPACE})
        for _ in range(200):
            response = await self.cluster.admin.invoke_sync(self.cluster.namesrv_addr, request, 5)
            if response.code == ResponseCode.SUCCESS and len(decode_kv_table(response.body)) == len(self.endpoints):
                self.assertEqual(sorted(decode_kv_table(response.body).values()),
                                 sorted(f"127.0.0.1:{s.port}" for s in self.endpoints.values()))
                return
            await pause()
        self.fail("the gRPC endpoints were not published")

    def _route(self, name: str, topic: str = TOPIC) -> Deferred[Any]:
        """QueryRoute of ``topic`` at broker ``name``'s endpoint, reached at port 1."""
        return self._messaging(name).query_route(CallContext("c@1"), rpc.QueryRouteRequest(
            topic=pb.Resource(name=topic), endpoints=pb.Endpoints(addresses=[pb.Address(host="127.0.0.1", port=1)])))

    def _broker(self, name: str) -> BrokerService:
        return self.cluster.brokers[name]

    def _messaging(self, name: str) -> Messaging:
        messaging = self.endpoints[name].messaging
        assert messaging is not None
        return messaging

    def _v5(self, *args: str) -> Deferred[list[dict[str, Any]]]:
        return Deferred.fromCoroutine(self._run_v5(*args))

    async def _run_v5(self, *args: str) -> list[dict[str, Any]]:
        """Run the official client's harness against broker-a's endpoint only; its JSON events."""
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        env["HOME"] = os.path.abspath(self.mktemp())
        os.makedirs(env["HOME"])
        endpoint = f"127.0.0.1:{self.endpoints['broker-a'].port}"
        out, err, code = await getProcessOutputAndValue(self.python5, (HARNESS, *args, "--endpoint", endpoint),
                                                        env=env, reactor=cast(Any, reactor))
        events = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
        if code != 0 or not events or events[-1]["event"] != "done":
            self.fail(f"5.x client {args!r} failed ({code}):\n{err.decode()[-3000:]}")
        return events

    def _stored(self, name: str) -> int:
        return cast(int, self._broker(name).store.get_max_offset_in_queue(TOPIC, 0))

    async def test_route_send_receive_ack_across_brokers(self) -> None:
        """QueryRoute at broker-a lists both brokers at their own endpoints; the Producer's sends reach both
        stores; a SimpleConsumer and a PushConsumer (QueryAssignment) told only broker-a's endpoint receive
        every message and ack it at the broker that stored it: both brokers' committed offsets reach the end."""
        await self._cluster()
        route = await self._route("broker-a")
        self.assertEqual([(q.broker.name, q.broker.endpoints.addresses[0].port, q.id) for q in route.message_queues],
                         [("broker-a", 1, 0), ("broker-b", self.endpoints["broker-b"].port, 0)])

        sent = [e for e in await self._v5("produce", "--topic", TOPIC, "--count", str(SENT)) if e["event"] == "sent"]
        self.assertEqual(len(sent), SENT)
        # the Producer goes round the queues of both brokers
        self.assertEqual((self._stored("broker-a"), self._stored("broker-b")), (SENT // 2, SENT // 2))

        # seed 1: the client's first two random queue picks are its two queues, one per broker (without a
        # seed a receive may pick the broker it drained already and long-poll it for 5 s)
        simple, push = await gatherResults([
            self._v5("consume", "--topic", TOPIC, "--group", "GS", "--expect", str(SENT), "--timeout", "40",
                     "--seed", "1"),
            self._v5("push", "--topic", TOPIC, "--group", "GP", "--expect", str(SENT), "--timeout", "40")])
        ids = {e["message_id"] for e in sent}
        for events in (simple, push):
            self.assertEqual({e["message_id"] for e in events if e["event"] == "message"}, ids)
        for group in ("GS", "GP"):
            self.assertEqual([self._broker(name).offsets.query_offset(group, TOPIC, 0) for name in BROKERS],
                             [SENT // 2, SENT // 2], group)

    async def test_transactions_on_both_brokers(self) -> None:
        """A Producer told broker-a's endpoint keeps transactions on both brokers: each commit goes to the
        broker holding its half message, and each broker's check of an undecided one reaches the producer
        over its Telemetry stream to that broker, whose answer commits it there."""
        await self._cluster()
        events = await self._v5("transaction", "--topic", TOPIC, "--bodies", "commit-1", "commit-2", "unknown-3",
                                "unknown-4")
        self.assertEqual(sorted(e["body"] for e in events if e["event"] == "checked"), ["unknown-3", "unknown-4"])
        self.assertEqual(events[-1]["unchecked"], [])
        holder = {e["body"]: TransactionId.decode(e["transaction_id"]).broker_name for e in events
                  if e["event"] == "sent"}
        # the Producer goes round the two queues: one commit and one undecided transaction on each broker
        self.assertEqual({holder["commit-1"], holder["commit-2"]}, set(BROKERS))
        self.assertEqual({holder["unknown-3"], holder["unknown-4"]}, set(BROKERS))
        self.assertEqual((self._stored("broker-a"), self._stored("broker-b")), (2, 2))

    async def test_topic_of_another_broker_is_not_created_here(self) -> None:
        """A topic only broker-b has is routed to broker-b alone, not auto-created at broker-a; one nobody
        has is auto-created at the broker asked (from TBW102), as with a single broker."""
        await self._cluster()
        self._broker("broker-b").topics.update_topic_config(TopicConfig("OnlyB", 2, 2))
        await self.cluster.wait_for_route("OnlyB")
        route = await self._route("broker-a", "OnlyB")
        self.assertEqual([(q.broker.name, q.id) for q in route.message_queues], [("broker-b", 0), ("broker-b", 1)])
        self.assertIsNone(self._broker("broker-a").topics.select_topic_config("OnlyB"))
        route = await self._route("broker-a", "Nobody")
        self.assertEqual({q.broker.name for q in route.message_queues}, {"broker-a"})
        self.assertIsNotNone(self._broker("broker-a").topics.select_topic_config("Nobody"))

    async def test_slave_endpoint_lists_the_masters(self) -> None:
        """QueryRoute at a slave's endpoint lists the two masters at their endpoints, its own master's
        included, not the slave (the clients write to and pop from masters)."""
        await self._cluster()
        await self.cluster.add_broker("broker-a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1)
        await self._endpoint("broker-a-slave")
        await self._until_published()
        route = await self._route("broker-a-slave")
        self.assertEqual([(q.broker.name, q.broker.endpoints.addresses[0].port) for q in route.message_queues],
                         [(name, self.endpoints[name].port) for name in BROKERS])

    async def test_queue_of_another_broker_is_refused(self) -> None:
        """A receive naming broker-b's queue at broker-a's endpoint is BAD_REQUEST naming both brokers
        (the official clients receive from each broker at its own endpoint)."""
        await self._cluster()
        request = rpc.ReceiveMessageRequest(
            group=pb.Resource(name="G"), batch_size=1, invisible_duration={"seconds": 10},
            message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0, broker=pb.Broker(name="broker-b")))
        [answer, _] = await self._messaging("broker-a").receive_message(CallContext("c@1"), request, None)
        self.assertEqual(answer.status.code, pb.Code.BAD_REQUEST)
        self.assertIn("serves broker broker-a, not broker-b", answer.status.message)

