"""Roles in the service: twistd options, the registration answer, the slave's config copies."""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.config import BrokerConfig
from rocketpy.broker.offsets import ConsumerOffsetManager
from rocketpy.broker.outer import NameServerRegistration
from rocketpy.broker.schedule import DelayOffsetTable
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.common.topic import TopicConfig
from rocketpy.ha.sync import SlaveSynchronize
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.util.fileio import write_atomically
from tests.test_tap import _parse as parse


class OptionTests(SynchronousTestCase):
    def test_master_defaults(self) -> None:
        """A master listens for slaves on its port + 1; slave reads stay off."""
        o = parse("--listen", "tcp:20911:interface=127.0.0.1")
        self.assertEqual((o["ha-listen"], o["ha-master-address"], o["slave-read-enable"]),
                         ("tcp:20912:interface=127.0.0.1", None, False))

    def test_slave_options(self) -> None:
        """A slave takes an id >= 1, an optional master HA address, and opens no HA port."""
        o = parse("--broker-role", "SLAVE", "--broker-id", "2", "--ha-master-address", "10.0.0.1:10912")
        self.assertEqual((o["broker-id"], o["ha-master-address"], o["ha-listen"]), (2, "10.0.0.1:10912", None))
        self.assertRaises(usage.UsageError, parse, "--broker-role", "SLAVE")
        self.assertRaises(usage.UsageError, parse, "--broker-role", "SLAVE", "--broker-id", "1",
                          "--ha-master-address", "10.0.0.1")
        self.assertEqual(parse("--broker-role", "SYNC_MASTER", "--broker-id", "3")["broker-id"], 0)

    def test_config_file_keys(self) -> None:
        """brokerRole, brokerId, haListenPort, haMasterAddress and slaveReadEnable come from broker.conf."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("brokerRole=SYNC_MASTER\nbrokerId=0\nhaListenPort=30912\nslaveReadEnable=true\n")
        o = parse("--config", path)
        self.assertEqual((o["broker-role"], o["ha-listen"], o["slave-read-enable"]),
                         ("SYNC_MASTER", "tcp:30912:interface=127.0.0.1", True))
        with open(path, "w") as f:
            f.write("brokerRole=SLAVE\nbrokerId=1\nhaMasterAddress=192.0.2.1:30912\n")
        o = parse("--config", path)
        self.assertEqual((o["broker-role"], o["broker-id"], o["ha-master-address"]), ("SLAVE", 1, "192.0.2.1:30912"))

    def test_ha_server_addr(self) -> None:
        """The registered HA address follows ha_listen, else the listen port + 1."""
        config = BrokerConfig(advertised_address="192.0.2.5:10911")
        self.assertEqual(config.ha_server_addr, "192.0.2.5:10912")
        config.ha_listen = "tcp:port=40000:interface=0.0.0.0"
        self.assertEqual(config.ha_server_addr, "192.0.2.5:40000")


class Answering:
    """An invoker answering every request from a table of code -> (response code, body)."""

    def __init__(self, answers: dict[int, tuple[int, Any]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        self.asked.append((address, request.code))
        code, body = self.answers.get(request.code, (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, None))
        ext = body if isinstance(body, dict) and request.code == RequestCode.REGISTER_BROKER else {}
        raw = b"" if body is None or ext else json.dumps(body).encode()
        return succeed(request.make_response(code, None, ext, raw))


class RegistrationAnswerTests(SynchronousTestCase):
    def test_master_listener(self) -> None:
        """A successful registration answer hands masterAddr and haServerAddr to the listeners."""
        clock = Clock()
        client = Answering({RequestCode.REGISTER_BROKER: (
            ResponseCode.SUCCESS, {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:10912"})})
        reg = NameServerRegistration(clock, client, BrokerConfig(namesrv_addr=["ns:9876"], broker_id=1),
                                     TopicConfigManager(clock))
        seen: list[tuple[str | None, str | None]] = []
        reg.add_master_listener(lambda master, ha: seen.append((master, ha)))
        self.successResultOf(reg.register_all())
        client.answers[RequestCode.REGISTER_BROKER] = (ResponseCode.SUCCESS, {"x": "1"})
        self.successResultOf(reg.register_all())
        self.assertEqual(seen, [("10.0.0.1:10911", "10.0.0.1:10912"), (None, None)])


class SlaveSynchronizeTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        root = self.mktemp()
        os.makedirs(root)
        self.topics = TopicConfigManager(self.clock, os.path.join(root, "topics.json"))
        self.offsets = ConsumerOffsetManager(os.path.join(root, "consumerOffset.json"))
        self.groups = SubscriptionGroupManager(self.clock, os.path.join(root, "subscriptionGroup.json"))
        self.delays = DelayOffsetTable(os.path.join(root, "delayOffset.json"))
        master = TopicConfigManager(self.clock)
        master.update_topic_config(TopicConfig("Orders", 4, 4))
        self.master_topics = master.to_json()
        self.client = Answering({
            RequestCode.GET_ALL_TOPIC_CONFIG: (ResponseCode.SUCCESS, self.master_topics),
            RequestCode.GET_ALL_CONSUMER_OFFSET: (ResponseCode.SUCCESS, {"offsetTable": {"Orders@G": {"1": 7}}}),
            RequestCode.GET_ALL_DELAY_OFFSET: (ResponseCode.SUCCESS, {"offsetTable": {"3": 12}}),
        })
        self.writes: list[str] = []
        for table in (self.topics, self.offsets, self.groups, self.delays):
            table.writer = self.write
        self.sync = SlaveSynchronize(self.clock, self.client, self.topics, self.offsets, self.groups, self.delays)

    def write(self, path: str, data: bytes) -> Deferred[None]:
        self.writes.append(os.path.basename(path))
        write_atomically(path, data)
        return succeed(None)

    def test_nothing_without_master(self) -> None:
        """No master address: nothing is asked."""
        self.successResultOf(self.sync.sync_all())
        self.assertEqual(self.client.asked, [])

    def test_copies_tables(self) -> None:
        """Topics, offsets and delay offsets are copied; a refused request (groups) is skipped."""
        self.sync.master_address = "m:10911"
        self.successResultOf(self.sync.sync_all())
        self.assertEqual([code for _, code in self.client.asked], [21, 43, 201, 45])
        self.assertEqual(self.topics.select_topic_config("Orders").read_queue_nums, 4)  # type: ignore[union-attr]
        self.assertEqual(self.topics.data_version.to_json(), self.master_topics["dataVersion"])
        self.assertEqual(self.offsets.query_offset("G", "Orders", 1), 7)
        self.assertEqual(self.delays.offsets, {3: 12})
        self.assertEqual(self.writes, ["topics.json", "delayOffset.json"])
        with open(self.topics.path) as f:  # type: ignore[arg-type]
            self.assertIn("Orders", json.load(f)["topicConfigTable"])

    def test_unchanged_version_not_rewritten(self) -> None:
        """A second round with the same topic data version writes no topics file."""
        self.sync.master_address = "m:10911"
        self.successResultOf(self.sync.sync_all())
        self.successResultOf(self.sync.sync_all())
        self.assertEqual(self.writes.count("topics.json"), 1)

    def test_timer(self) -> None:
        """start syncs now and every interval; stop ends the timer."""
        self.sync.master_address = "m:10911"
        self.sync.start(10)
        self.clock.advance(10)
        self.assertEqual(len(self.client.asked), 8)
        self.successResultOf(Deferred.fromCoroutine(self.sync.stop()))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_timer_checkpoint_round(self) -> None:
        """With a timer checkpoint taker, GET_TIMER_CHECK_POINT (60) comes last and its body goes to
        the taker; a master that does not know the code is logged and the next round asks again."""
        taken: list[bytes] = []

        async def take(body: bytes) -> None:
            taken.append(body)

        sync = SlaveSynchronize(self.clock, self.client, self.topics, self.offsets, self.groups, self.delays, take)
        sync.master_address = "m:10911"
        with capturedLogs() as events:
            self.successResultOf(sync.sync_all())
        self.assertEqual([code for _, code in self.client.asked][-1], RequestCode.GET_TIMER_CHECK_POINT)
        self.assertEqual(taken, [])
        self.assertTrue(any(e.get("what") == "the timer checkpoint" for e in events))
        self.client.answers[RequestCode.GET_TIMER_CHECK_POINT] = (ResponseCode.SUCCESS, {"lowOffset": 1})
        self.successResultOf(sync.sync_all())
        self.assertEqual(taken, [b'{"lowOffset": 1}'])

    def test_stop_waits_for_a_round_outside_the_timer(self) -> None:
        """A round started by sync_now (a new master address) is waited for by stop, as the timer's is."""
        held: Deferred[RemotingCommand] = Deferred()
        asked: list[RemotingCommand] = []

        class Silent:
            def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
                asked.append(request)
                return held if len(asked) == 1 else succeed(request.make_response(ResponseCode.SYSTEM_ERROR, "no"))

        sync = SlaveSynchronize(self.clock, Silent(), self.topics, self.offsets, self.groups, self.delays)
        sync.master_address = "m:10911"
        sync.sync_now()
        stopped = Deferred.fromCoroutine(sync.stop())
        self.assertNoResult(stopped)
        held.callback(asked[0].make_response(ResponseCode.SYSTEM_ERROR, "no"))
        self.successResultOf(stopped)
        self.assertEqual(len(asked), 4)

    def test_deleted_on_the_master_deleted_on_the_slave(self) -> None:
        """A changed topic or group table replaces the slave's (Java 5): what the master deleted goes,
        a topic the slave learnt from records newer than the copy stays."""
        self.clock.advance(1)  # a data version of its own
        self.topics.update_topic_config(TopicConfig("Old", 4, 4))
        self.groups.update_subscription_group_config(SubscriptionGroupConfig("OldG"))
        self.topics.learn_queue("Fresh", 1)
        self.clock.advance(1)
        master_groups = SubscriptionGroupManager(self.clock)
        master_groups.update_subscription_group_config(SubscriptionGroupConfig("G"))
        self.client.answers[RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG] = (ResponseCode.SUCCESS,
                                                                             master_groups.to_json())
        self.sync.master_address = "m:10911"
        self.successResultOf(self.sync.sync_all())
        self.assertIsNone(self.topics.select_topic_config("Old"))
        self.assertIsNotNone(self.topics.select_topic_config("Orders"))
        self.assertIsNotNone(self.topics.select_topic_config("Fresh"))
        self.assertEqual(set(self.groups.groups()), set(master_groups.groups()))
        self.assertNotIn("OldG", self.groups.groups())
        with open(self.groups.path) as f:  # type: ignore[arg-type]
            self.assertEqual(set(json.load(f)["subscriptionGroupTable"]), set(master_groups.groups()))

    def test_timer_checkpoint_more_often(self) -> None:
        """start(10, 3): everything now and every 10 s, the timer checkpoint also every 3 s; stop ends both timers."""
        self.client.answers[RequestCode.GET_TIMER_CHECK_POINT] = (ResponseCode.SUCCESS, {})
        taken: list[float] = []

        async def take(body: bytes) -> None:
            taken.append(self.clock.seconds())

        sync = SlaveSynchronize(self.clock, self.client, self.topics, self.offsets, self.groups, self.delays, take)
        sync.master_address = "m:10911"
        sync.start(10, 3)
        self.clock.pump([1] * 10)
        self.assertEqual(taken, [0, 3, 6, 9, 10])
        self.assertEqual([code for _, code in self.client.asked].count(RequestCode.GET_ALL_TOPIC_CONFIG), 2)
        self.successResultOf(Deferred.fromCoroutine(sync.stop()))
        self.assertEqual(self.clock.getDelayedCalls(), [])
