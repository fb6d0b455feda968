"""QueryRoute's queues and QueryAssignment's assignments for several brokers, and how an endpoint
learns the other brokers (route and published endpoints) from a name server."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.route import BrokerData, QueueData, TopicRouteData
from rocketpy.common.topic import PERM_READ, PERM_WRITE, TopicConfig
from rocketpy.grpc.cluster import (
    FRESH_S,
    GRPC_ENDPOINT_NAMESPACE,
    PUBLISH_PERIOD_S,
    ClusterView,
    parse_endpoint,
    peers_of,
)
from rocketpy.grpc.route import RouteBroker, assignments, endpoints_of, master, route_queues
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.namesrv.kvconfig import KVConfigManager
from rocketpy.namesrv.processor import NamesrvProcessor
from rocketpy.namesrv.routeinfo import RouteInfoManager
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingConnectError

RW = PERM_READ | PERM_WRITE
TOPIC = pb.Resource(name="T")


def _broker(name: str, port: int, perm: int = RW, read: int = 2, write: int = 2) -> RouteBroker:
    return RouteBroker(master(name, endpoints_of("127.0.0.1", port)), perm, read, write)


def _where(queues: list[Any]) -> list[tuple[str, int, int, str]]:
    return [(q.broker.name, q.broker.endpoints.addresses[0].port, q.id, pb.Permission.Name(q.permission))
            for q in queues]


class RouteBuildingTests(SynchronousTestCase):
    """Each broker's queues at its own endpoint, numbered as the Java proxy numbers them."""

    def test_every_broker_with_its_queues_and_endpoint(self) -> None:
        """Queues of each broker from 0, at that broker's endpoint: read-only, then write-only, then both."""
        queues = route_queues(TOPIC, [_broker("a", 1001), _broker("b", 1002, read=3, write=1),
                                      _broker("c", 1003, perm=0, read=1, write=2)])
        self.assertEqual(_where(queues), [
            ("a", 1001, 0, "READ_WRITE"), ("a", 1001, 1, "READ_WRITE"),
            ("b", 1002, 0, "READ"), ("b", 1002, 1, "READ"), ("b", 1002, 2, "READ_WRITE"),
            ("c", 1003, 0, "NONE"), ("c", 1003, 1, "NONE")])
        self.assertEqual({q.broker.id for q in queues}, {0})  # masters: the clients skip other ids
        self.assertEqual({q.topic.name for q in queues}, {"T"})
        self.assertEqual(len(queues[0].accept_message_types), 4)

    def test_assignments_one_per_readable_broker_or_per_queue_when_fifo(self) -> None:
        """A broker is popped as a whole (queue -1); a FIFO group gets each queue; write-only brokers none."""
        brokers = [_broker("a", 1001), _broker("b", 1002, perm=PERM_READ, read=2), _broker("w", 1003, perm=PERM_WRITE)]
        self.assertEqual(_where([a.message_queue for a in assignments(TOPIC, brokers, fifo=False)]),
                         [("a", 1001, -1, "READ_WRITE"), ("b", 1002, -1, "READ")])
        self.assertEqual(_where([a.message_queue for a in assignments(TOPIC, brokers, fifo=True)]),
                         [("a", 1001, 0, "READ_WRITE"), ("a", 1001, 1, "READ_WRITE"),
                          ("b", 1002, 0, "READ"), ("b", 1002, 1, "READ")])
        self.assertEqual(assignments(TOPIC, [_broker("x", 1, read=0)], fifo=False), [])

    def test_endpoint_schemes(self) -> None:
        """IP literals as IPv4 / IPv6, a name as DOMAIN_NAME (the clients dial dns: for it)."""
        self.assertEqual(endpoints_of("10.0.0.7", 8081).scheme, pb.AddressScheme.IPv4)
        self.assertEqual(endpoints_of("::1", 8081).scheme, pb.AddressScheme.IPv6)
        self.assertEqual(endpoints_of("broker-b.example", 8081).scheme, pb.AddressScheme.DOMAIN_NAME)

    def test_parse_endpoint(self) -> None:
        self.assertEqual(parse_endpoint("10.0.0.7:8081"), ("10.0.0.7", 8081))
        self.assertEqual(parse_endpoint("[::1]:8081"), ("::1", 8081))
        for bad in ("", "host", "host:", ":8081", "host:port", "host:0", "host:70000"):
            self.assertIsNone(parse_endpoint(bad), bad)

    def test_peers_from_route_and_published_endpoints(self) -> None:
        """The other masters, by name: at their published endpoint, else at their remoting host with this
        endpoint's port (the Java proxy's rule); this broker and a broker with no master are left out."""
        route = TopicRouteData(
            [QueueData(n, 4, 4, RW) for n in ("own", "d-slave-only", "c", "b")] + [QueueData("gone", 1, 1, RW)],
            [BrokerData("C", "own", {0: "10.0.0.1:10911"}), BrokerData("C", "b", {0: "10.0.0.2:10911"}),
             BrokerData("C", "c", {0: "10.0.0.3:10911", 1: "10.0.0.4:10911"}),
             BrokerData("C", "d-slave-only", {1: "10.0.0.5:10911"})])
        published = {"10.0.0.2:10911": "b.example:9999", "10.0.0.3:10912": "wrong:1", "10.0.0.3:10911": "bad"}
        peers = peers_of(route, published, "own", 8081)
        self.assertEqual([(p.broker.name, p.broker.endpoints.addresses[0].host, p.broker.endpoints.addresses[0].port,
                           p.read_queue_nums) for p in peers],
                         [("b", "b.example", 9999, 4), ("c", "10.0.0.3", 8081, 4)])


class _NameServer:
    """An in-memory name server (its real request processor) that the view reaches as its remoting client."""

    def __init__(self, clock: Clock) -> None:
        kv = KVConfigManager("unused-kvConfig.json")
        kv.writer = lambda path, data: None
        self.routes = RouteInfoManager()
        self.kv = kv
        self.processor = NamesrvProcessor(self.routes, kv, clock)
        self.down = False
        self.calls: list[int] = []

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        self.calls.append(request.code)
        if self.down:
            return fail(RemotingConnectError(address, "connection refused"))
        answer = self.processor.responders()[request.code](None, request)
        return answer if isinstance(answer, Deferred) else succeed(answer)

    def register(self, name: str, address: str, topic: str, queues: int) -> None:
        self.routes.register_broker("C", address, name, 0, "", 0.0,
                                    topic_configs={topic: TopicConfig(topic, queues, queues, RW)})


class ClusterViewTests(SynchronousTestCase):
    """Publishing this endpoint and looking the other brokers up, against the name server's own processor."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.namesrv = _NameServer(self.clock)
        self.view = ClusterView(self.clock, self.namesrv, lambda: ["ns:9876"], "a", "10.0.0.1:10911")

    def test_publishes_while_listening(self) -> None:
        """Listening publishes broker address → broker host and the endpoint's port, again every period;
        stopping takes it out."""
        self.view.listening(18081)
        self.assertEqual(self.namesrv.kv.namespace(GRPC_ENDPOINT_NAMESPACE), {"10.0.0.1:10911": "10.0.0.1:18081"})
        self.namesrv.kv.delete(GRPC_ENDPOINT_NAMESPACE, "10.0.0.1:10911")  # a name server restarted empty
        self.clock.advance(PUBLISH_PERIOD_S)
        self.assertEqual(self.namesrv.kv.namespace(GRPC_ENDPOINT_NAMESPACE), {"10.0.0.1:10911": "10.0.0.1:18081"})
        self.successResultOf(Deferred.fromCoroutine(self.view.stop()))
        self.assertIsNone(self.namesrv.kv.namespace(GRPC_ENDPOINT_NAMESPACE))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_advertised_address_is_published(self) -> None:
        view = ClusterView(self.clock, self.namesrv, lambda: ["ns:9876"], "a", "10.0.0.1:10911", ("gw.example", 443))
        view.listening(18081)
        self.addCleanup(lambda: Deferred.fromCoroutine(view.stop()))
        self.assertEqual(self.namesrv.kv.get(GRPC_ENDPOINT_NAMESPACE, "10.0.0.1:10911"), "gw.example:443")

    def test_other_brokers_from_the_name_server(self) -> None:
        """The other brokers at their published endpoints; reused for FRESH_S, then asked again; the last
        answer while the name server is down; none for a topic it does not know."""
        self.view.listening(18081)
        self.addCleanup(lambda: Deferred.fromCoroutine(self.view.stop()))
        for name, host in (("a", "10.0.0.1"), ("b", "10.0.0.2"), ("c", "10.0.0.3")):
            self.namesrv.register(name, f"{host}:10911", "T", 2)
        self.namesrv.kv.put(GRPC_ENDPOINT_NAMESPACE, "10.0.0.2:10911", "10.0.0.2:28081")

        def peers(topic: str = "T") -> list[tuple[str, str, int]]:
            found = self.successResultOf(self.view.peers(topic))
            return [(p.broker.name, p.broker.endpoints.addresses[0].host, p.broker.endpoints.addresses[0].port)
                    for p in found]

        self.assertEqual(peers(), [("b", "10.0.0.2", 28081), ("c", "10.0.0.3", 18081)])
        self.namesrv.kv.put(GRPC_ENDPOINT_NAMESPACE, "10.0.0.3:10911", "10.0.0.3:38081")
        calls = len(self.namesrv.calls)
        self.assertEqual(peers()[1], ("c", "10.0.0.3", 18081))  # still the fresh answer: nothing asked
        self.assertEqual(len(self.namesrv.calls), calls)
        self.clock.advance(FRESH_S)
        self.assertEqual(peers()[1], ("c", "10.0.0.3", 38081))
        self.namesrv.down = True
        self.clock.advance(FRESH_S)
        self.assertEqual(peers()[1], ("c", "10.0.0.3", 38081))
        self.assertEqual(peers("Unknown"), [])
        self.namesrv.down = False
        self.assertEqual(peers("Unknown"), [])

    def test_name_servers_in_turn(self) -> None:
        """A name server that cannot be reached is skipped; the one that answered is asked first next time."""
        view = ClusterView(self.clock, self.namesrv, lambda: ["dead:1", "ns:9876"], "a", "10.0.0.1:10911")
        self.namesrv.register("b", "10.0.0.2:10911", "T", 2)
        reached: list[str] = []
        invoke = self.namesrv.invoke_sync

        def invoke_sync(address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
            reached.append(address)
            return fail(RemotingConnectError(address, "refused")) if address == "dead:1" else invoke(
                address, request, timeout)

        self.namesrv.invoke_sync = invoke_sync  # type: ignore[method-assign]
        self.assertEqual([p.broker.name for p in self.successResultOf(view.peers("T"))], ["b"])
        self.assertEqual(reached, ["dead:1", "ns:9876", "ns:9876"])  # the route, then the KV list
        self.clock.advance(FRESH_S)
        self.successResultOf(view.peers("T"))
        self.assertEqual(reached[3:], ["ns:9876", "ns:9876"])

    def test_no_name_server(self) -> None:
        """A broker without name servers is alone: no peers, nothing published, no warning."""
        view = ClusterView(self.clock, self.namesrv, lambda: [], "a", "10.0.0.1:10911")
        view.listening(18081)
        self.assertEqual(self.successResultOf(view.peers("T")), [])
        self.successResultOf(Deferred.fromCoroutine(view.stop()))
        self.assertEqual(self.namesrv.calls, [])

    def test_route_body_of_a_java_name_server(self) -> None:
        """Broker ids as bare numbers and a KV table as Java writes them are read too."""
        body = json.dumps({"queueDatas": [{"brokerName": "b", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}],
                           "brokerDatas": [{"cluster": "C", "brokerName": "b", "brokerAddrs": {"0": "h:1"}}]})
        from rocketpy.common.route import decode_topic_route
        from rocketpy.grpc.cluster import decode_kv_table

        peers = peers_of(decode_topic_route(body.encode()), decode_kv_table(b'{"table":{"h:1":"h:2"}}'), "a", 3)
        self.assertEqual([(p.broker.name, p.broker.endpoints.addresses[0].port) for p in peers], [("b", 2)])
