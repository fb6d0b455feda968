"""Tests for rocketpy.client.instance.ClientInstance: name servers, route cache, heartbeats."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import errors
from rocketpy.client.instance import ClientInstance, JoiningMember, default_client_id, parse_namesrv_addrs
from rocketpy.common.route import BrokerData, QueueData, TopicRouteData
from rocketpy.namesrv.bodies import encode_topic_route
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand

from .fakes import NAMESRV, FakeCluster, response


class Member(JoiningMember):
    """A member that reads one topic and, if asked, declares a consumer group."""

    def __init__(self, instance: ClientInstance, topic: str, consumer: bool = False) -> None:
        self.instance, self.topic, self.consumer = instance, topic, consumer
        self.routes: list[tuple[str, TopicRouteData]] = []

    def topics(self) -> list[str]:
        return [self.topic]

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        self.routes.append((topic, route))

    def heartbeat_data(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return ([], [{"groupName": "CG"}]) if self.consumer else ([{"groupName": "PG"}], [])

    def unregister_groups(self) -> tuple[str | None, str | None]:
        return (None, "CG") if self.consumer else ("PG", None)


def route_with_slave(addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
    route = TopicRouteData([QueueData("b", 2, 2, 6)], [BrokerData("C", "b", {0: "m:1", 1: "s:1"})])
    return response(body=encode_topic_route(route))


class InstanceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.cluster = FakeCluster(self.clock)
        self.cluster.add_broker("broker-a", "10.0.0.1:10911")
        self.cluster.add_topic("T")
        self.remoting = self.cluster.remoting

    def test_name_server_failover(self) -> None:
        """A name server that cannot be reached is skipped; the one that answered is asked first next time."""
        instance = ClientInstance(self.clock, ["down:9876", NAMESRV], self.remoting, client_id="c")
        self.assertIsNotNone(self.successResultOf(Deferred.fromCoroutine(instance.fetch_route("T"))))
        self.successResultOf(Deferred.fromCoroutine(instance.fetch_route("T")))
        asked = [a for a, _ in self.remoting.sent(RequestCode.GET_ROUTEINFO_BY_TOPIC)]
        self.assertEqual(asked, ["down:9876", NAMESRV, NAMESRV])

    def test_all_name_servers_down(self) -> None:
        """With every name server unreachable, the last error is raised."""
        instance = ClientInstance(self.clock, "a:1;b:2", self.remoting, client_id="c")
        self.failureResultOf(Deferred.fromCoroutine(instance.fetch_route("T")), errors.RemotingConnectError)

    def test_offline_broker_forgotten(self) -> None:
        """After a refresh, brokers no route mentions any more leave the address table."""
        instance = ClientInstance(self.clock, NAMESRV, self.remoting, client_id="c")
        member = Member(instance, "T")
        member.start()
        self.successResultOf(Deferred.fromCoroutine(instance.update_topic_route("T")))
        self.assertEqual(instance.master_address("broker-a"), "10.0.0.1:10911")
        self.assertEqual(member.routes[0][0], "T")
        self.cluster.add_broker("broker-b", "10.0.0.2:10911")
        self.cluster.add_topic("T", "broker-b")
        self.clock.advance(30)
        self.assertIsNone(instance.master_address("broker-a"))
        self.assertEqual(instance.master_address("broker-b"), "10.0.0.2:10911")
        self.successResultOf(member.shutdown())

    def test_heartbeat_targets(self) -> None:
        """Producers only heartbeat masters; with a consumer the slaves get heartbeats too."""
        self.remoting.on(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_with_slave, NAMESRV)
        instance = ClientInstance(self.clock, NAMESRV, self.remoting, client_id="c")
        producer = Member(instance, "T")
        producer.start()
        self.successResultOf(Deferred.fromCoroutine(instance.update_topic_route("T")))
        self.successResultOf(Deferred.fromCoroutine(instance.send_heartbeat()))
        self.assertEqual([a for a, _ in self.remoting.sent(RequestCode.HEART_BEAT)], ["m:1"])
        Member(instance, "T", consumer=True).start()
        self.successResultOf(Deferred.fromCoroutine(instance.send_heartbeat()))
        beats = self.remoting.sent(RequestCode.HEART_BEAT)[1:]
        self.assertEqual(sorted(a for a, _ in beats), ["m:1", "s:1"])
        body = json.loads(beats[0][1].body)
        self.assertEqual((body["producerDataSet"], body["consumerDataSet"]), ([{"groupName": "PG"}], [{"groupName": "CG"}]))

    def test_last_member_stops_timers(self) -> None:
        """The timers run while members exist; the last one to leave stops them and closes an owned client."""
        instance = ClientInstance(self.clock, NAMESRV, self.remoting, client_id="c")
        a, b = Member(instance, "T"), Member(instance, "T")
        a.start()
        b.start()
        self.successResultOf(a.shutdown())
        self.assertEqual(len(self.clock.getDelayedCalls()), 2)
        self.successResultOf(b.shutdown())
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertFalse(self.remoting.closed)  # not owned: the caller closes it


class HelperTests(SynchronousTestCase):
    def test_namesrv_addrs(self) -> None:
        """Name server lists come as ';'-separated text or a list; blanks are dropped."""
        self.assertEqual(parse_namesrv_addrs(" a:1; ;b:2 "), ["a:1", "b:2"])
        self.assertEqual(parse_namesrv_addrs(["a:1", ""]), ["a:1"])

    def test_client_ids_distinct(self) -> None:
        """Client ids are ip@pid style and distinct within the process."""
        first, second = default_client_id(), default_client_id()
        self.assertNotEqual(first, second)
        self.assertIn("@", first)
        self.assertEqual(default_client_id("inst").split("@")[1], "inst")
