"""Tests for rocketpy.namesrv.routeinfo: the pure route tables."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.topic import DataVersion, TopicConfig
from rocketpy.namesrv.routeinfo import FLAG_UNIT, FLAG_UNIT_SUB, RegisterResult, RouteInfoManager
from tests.fakes import FakeChannel

MASTER = "10.0.0.5:10911"
SLAVE = "10.0.0.6:10911"


def topics(*names: str, queues: int = 4, sys_flag: int = 0) -> dict[str, TopicConfig]:
    return {n: TopicConfig(n, queues, queues, 6, topic_sys_flag=sys_flag) for n in names}


class RegisterTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.routes = RouteInfoManager()

    def register(self, **kwargs: object) -> RegisterResult:
        args: dict[str, object] = dict(
            cluster_name="DefaultCluster",
            broker_addr=MASTER,
            broker_name="broker-a",
            broker_id=0,
            ha_server_addr="10.0.0.5:10912",
            now=0.0,
            data_version=DataVersion(1, 1),
            topic_configs=topics("T"),
        )
        args.update(kwargs)
        return self.routes.register_broker(**args)  # type: ignore[arg-type]

    def test_master_registration_creates_route(self) -> None:
        """A master's registration makes its topics routable with its address under id 0."""
        self.assertEqual(self.register(), RegisterResult())
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual([b.broker_addrs for b in route.broker_datas], [{0: MASTER}])
        self.assertEqual([(q.broker_name, q.read_queue_nums, q.perm) for q in route.queue_datas], [("broker-a", 4, 6)])
        self.assertEqual(route.filter_server_table, {})

    def test_unknown_topic_has_no_route(self) -> None:
        """A topic no broker registered has no route."""
        self.register()
        self.assertIsNone(self.routes.pickup_topic_route_data("other"))

    def test_slave_learns_master(self) -> None:
        """A slave registering after its master gets the master's address and HA address."""
        self.register()
        result = self.register(broker_addr=SLAVE, broker_id=1, ha_server_addr="10.0.0.6:10912")
        self.assertEqual(result, RegisterResult("10.0.0.5:10912", MASTER))
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual(route.broker_datas[0].broker_addrs, {0: MASTER, 1: SLAVE})

    def test_slave_without_master(self) -> None:
        """A slave without a registered master learns nothing and adds no queue data."""
        self.assertEqual(self.register(broker_addr=SLAVE, broker_id=1), RegisterResult())
        self.assertIsNone(self.routes.pickup_topic_route_data("T"))

    def test_same_address_under_new_id_replaces_old_id(self) -> None:
        """An address re-registering under another id is removed from its old id."""
        self.register()
        self.register(broker_id=1)
        brokers, _ = self.routes.cluster_info()
        self.assertEqual(brokers["broker-a"].broker_addrs, {1: MASTER})

    def test_same_data_version_keeps_queue_data(self) -> None:
        """A re-registration with an unchanged data version does not touch queue data."""
        self.register()
        self.register(topic_configs=topics("T", queues=8))
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual(route.queue_datas[0].write_queue_nums, 4)

    def test_changed_data_version_replaces_queue_data(self) -> None:
        """A re-registration with a new data version replaces queue data."""
        self.register()
        self.register(topic_configs=topics("T", queues=8), data_version=DataVersion(2, 2))
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual(route.queue_datas[0].write_queue_nums, 8)

    def test_slave_topics_ignored(self) -> None:
        """Only a master's registration changes queue data, whatever the slave's version."""
        self.register()
        self.register(broker_addr=SLAVE, broker_id=1, topic_configs=topics("T", "S", queues=8), data_version=DataVersion(9, 9))
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual(route.queue_datas[0].write_queue_nums, 4)
        self.assertIsNone(self.routes.pickup_topic_route_data("S"))

    def test_filter_servers(self) -> None:
        """Filter servers appear in the route, and an empty list removes them."""
        self.register(filter_servers=["10.0.0.5:30000"])
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual(route.filter_server_table, {MASTER: ["10.0.0.5:30000"]})
        self.register()
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual(route.filter_server_table, {})

    def test_route_is_a_copy(self) -> None:
        """Mutating a returned route does not change the tables."""
        self.register()
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        route.queue_datas[0].perm = 0
        route.broker_datas[0].broker_addrs.clear()
        again = self.routes.pickup_topic_route_data("T")
        assert again is not None
        self.assertEqual((again.queue_datas[0].perm, again.broker_datas[0].broker_addrs), (6, {0: MASTER}))

    def test_unregister_last_address_drops_everything(self) -> None:
        """Unregistering the only address removes broker, cluster entry and topics."""
        self.register()
        self.routes.unregister_broker("DefaultCluster", MASTER, "broker-a", 0)
        self.assertIsNone(self.routes.pickup_topic_route_data("T"))
        self.assertEqual(self.routes.cluster_info(), ({}, {}))
        self.assertEqual(self.routes.topic_list(), [])

    def test_unregister_master_keeps_slave(self) -> None:
        """Unregistering the master leaves the broker name (with its slave) and its queues."""
        self.register()
        self.register(broker_addr=SLAVE, broker_id=1)
        self.routes.unregister_broker("DefaultCluster", MASTER, "broker-a", 0)
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual(route.broker_datas[0].broker_addrs, {1: SLAVE})

    def test_route_needs_live_broker_of_topic(self) -> None:
        """A topic on two brokers stays routed while one of them is alive."""
        self.register()
        self.register(broker_name="broker-b", broker_addr=SLAVE)
        self.routes.unregister_broker("DefaultCluster", MASTER, "broker-a", 0)
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual([q.broker_name for q in route.queue_datas], ["broker-b"])


class ExpiryTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.routes = RouteInfoManager()
        self.channel = FakeChannel("10.0.0.5:40000")
        self.routes.register_broker(
            "DefaultCluster", MASTER, "broker-a", 0, "", 0.0, DataVersion(1, 1), topics("T"), channel=self.channel
        )

    def test_scan_keeps_recent_broker(self) -> None:
        """A broker heard from 120 s ago is still alive."""
        self.assertEqual(self.routes.scan_not_active_broker(120.0), [])
        self.assertIsNotNone(self.routes.pickup_topic_route_data("T"))
        self.assertFalse(self.channel.closed)

    def test_scan_drops_silent_broker(self) -> None:
        """A broker silent for over 120 s is dropped with its topics and its channel closed."""
        self.assertEqual(self.routes.scan_not_active_broker(120.5), [MASTER])
        self.assertIsNone(self.routes.pickup_topic_route_data("T"))
        self.assertTrue(self.channel.closed)
        self.assertIsNone(self.routes.query_data_version(MASTER))

    def test_scan_custom_expiry(self) -> None:
        """The expiry is a parameter."""
        self.assertEqual(self.routes.scan_not_active_broker(31.0, expiry=30.0), [MASTER])

    def test_reregistration_refreshes(self) -> None:
        """Re-registering resets the silence timer."""
        self.routes.register_broker("DefaultCluster", MASTER, "broker-a", 0, "", 100.0, DataVersion(1, 1), topics("T"))
        self.assertEqual(self.routes.scan_not_active_broker(200.0), [])

    def test_touch_refreshes(self) -> None:
        """touch_broker resets the silence timer (QUERY_DATA_VERSION)."""
        self.routes.touch_broker(MASTER, 100.0)
        self.assertEqual(self.routes.scan_not_active_broker(200.0), [])

    def test_channel_destroy_by_channel(self) -> None:
        """Closing the channel a broker registered over drops that broker at once."""
        self.assertEqual(self.routes.on_channel_destroy("10.0.0.5:40000", self.channel), [MASTER])
        self.assertIsNone(self.routes.pickup_topic_route_data("T"))

    def test_channel_destroy_by_address(self) -> None:
        """Without a matching channel the remote address is taken as the broker address."""
        self.assertEqual(self.routes.on_channel_destroy(MASTER, FakeChannel()), [MASTER])
        self.assertEqual(self.routes.topic_list(), [])

    def test_client_channel_destroy_is_ignored(self) -> None:
        """A closed client connection changes nothing."""
        self.assertEqual(self.routes.on_channel_destroy("10.0.0.9:5555", FakeChannel("10.0.0.9:5555")), [])
        self.assertIsNotNone(self.routes.pickup_topic_route_data("T"))


class QueryAndAdminTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.routes = RouteInfoManager()
        reg = self.routes.register_broker
        reg("c1", "a:1", "broker-a", 0, "", 0.0, DataVersion(1, 1), topics("T", "A"))
        reg("c1", "b:1", "broker-b", 0, "", 0.0, DataVersion(1, 1), topics("T", "U", sys_flag=FLAG_UNIT))
        reg("c2", "c:1", "broker-c", 0, "", 0.0, DataVersion(1, 1), topics("C", "S", sys_flag=FLAG_UNIT_SUB))

    def test_cluster_info(self) -> None:
        """Cluster info lists every broker by name and the names in each cluster."""
        brokers, clusters = self.routes.cluster_info()
        self.assertEqual(sorted(brokers), ["broker-a", "broker-b", "broker-c"])
        self.assertEqual(brokers["broker-c"].cluster, "c2")
        self.assertEqual(clusters, {"c1": ["broker-a", "broker-b"], "c2": ["broker-c"]})

    def test_topic_lists(self) -> None:
        """All topics, and topics by cluster."""
        self.assertEqual(self.routes.topic_list(), ["A", "C", "S", "T", "U"])
        self.assertEqual(self.routes.topics_by_cluster("c1"), ["A", "T", "U"])
        self.assertEqual(self.routes.topics_by_cluster("nope"), [])

    def test_system_topics(self) -> None:
        """System topics are the cluster and broker names, with one broker address."""
        names, addr = self.routes.system_topic_list()
        self.assertEqual(names, ["broker-a", "broker-b", "broker-c", "c1", "c2"])
        self.assertIn(addr, ["a:1", "b:1", "c:1"])

    def test_unit_topics(self) -> None:
        """Unit-topic queries filter by topicSysFlag bits of any of a topic's queues."""
        self.assertEqual(self.routes.topics_with_sys_flag(FLAG_UNIT), ["T", "U"])
        self.assertEqual(self.routes.topics_with_sys_flag(FLAG_UNIT_SUB, FLAG_UNIT), ["C", "S"])

    def test_delete_topic(self) -> None:
        """Deleting a topic removes its route."""
        self.routes.delete_topic("T")
        self.assertIsNone(self.routes.pickup_topic_route_data("T"))

    def test_delete_topic_in_cluster(self) -> None:
        """Deleting within a cluster removes only that cluster's queues."""
        self.routes.register_broker("c2", "c:1", "broker-c", 0, "", 0.0, DataVersion(2, 2), topics("T"))
        self.routes.delete_topic("T", "c1")
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual([q.broker_name for q in route.queue_datas], ["broker-c"])

    def test_write_perm(self) -> None:
        """Wiping clears the write bit of a broker's queues; adding restores read+write."""
        self.assertEqual(self.routes.wipe_write_perm_of_broker("broker-a"), 2)
        route = self.routes.pickup_topic_route_data("T")
        assert route is not None
        self.assertEqual({q.broker_name: q.perm for q in route.queue_datas}, {"broker-a": 4, "broker-b": 6})
        self.assertEqual(self.routes.add_write_perm_of_broker("broker-a"), 2)
        route = self.routes.pickup_topic_route_data("A")
        assert route is not None
        self.assertEqual(route.queue_datas[0].perm, 6)
        self.assertEqual(self.routes.wipe_write_perm_of_broker("nope"), 0)

    def test_data_version(self) -> None:
        """The stored data version is returned and compared."""
        self.assertEqual(self.routes.query_data_version("a:1"), DataVersion(1, 1))
        self.assertFalse(self.routes.is_broker_topic_config_changed("a:1", DataVersion(1, 1)))
        self.assertTrue(self.routes.is_broker_topic_config_changed("a:1", DataVersion(1, 2)))
        self.assertTrue(self.routes.is_broker_topic_config_changed("x:1", DataVersion(1, 1)))
