"""Tests for :mod:`rocketpy.tap` and the broker service wiring, with a real loopback run."""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
import threading
from unittest import mock

from twisted.application.service import Service
from twisted.internet.defer import Deferred, fail
from twisted.internet.task import deferLater
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.resource import Resource

from rocketpy.broker.clients import ClientChannelInfo
from rocketpy.broker.heartbeat import parse_heartbeat
from rocketpy.broker.config import BrokerConfig
from rocketpy.broker.controller import BrokerService
from rocketpy.namesrv.service import NamesrvService
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.config import MessageStoreConfig
from rocketpy.tap import Options, OrderedServices, _broker_configs, endpoint_port, makeService
from rocketpy.util.gctuning import GCThresholdService
from rocketpy.util.heaptuning import HeapKeepService
from tests.broker.test_clients import CPP_HEARTBEAT
from tests.fakes import CannedStoreService, FakeChannel
from tests.ports import free_port
from tests.store.fakes import InlinePool, ThreadlessReactor


def _parse(*argv: str) -> Options:
    options = Options()
    options.parseOptions(list(argv))
    return options


class OptionsTests(SynchronousTestCase):
    def test_defaults(self) -> None:
        """No options: both roles on loopback, the broker advertised as 127.0.0.1:10911 and registering locally."""
        o = _parse()
        self.assertEqual(o["role"], "all")
        self.assertEqual(o["namesrv-listen"], "tcp:9876:interface=127.0.0.1")
        self.assertEqual(o["listen"], "tcp:10911:interface=127.0.0.1")
        self.assertEqual(o["advertised-address"], "127.0.0.1:10911")
        self.assertEqual(o["namesrv-addr-list"], ["127.0.0.1:9876"])
        self.assertEqual(o["store-dir"], os.path.join("~", ".rocketpy", "store"))
        self.assertEqual((o["flush-disk-type"], o["broker-id"], o["commit-log-file-size"]),
                         ("ASYNC_FLUSH", 0, 1024 ** 3))
        self.assertIs(o["auto-create-topic-enable"], True)
        self.assertIsNone(o["fast-listen"])

    def test_command_line(self) -> None:
        """Options override defaults; the advertised port follows --listen; name servers split on ';'."""
        o = _parse("--listen", "tcp:20911", "--namesrv-addr", "a:1;b:2", "--role", "broker",
                   "--fast-listen", "tcp:20909", "--flush-disk-type", "SYNC_FLUSH", "--broker-id", "1",
                   "--broker-role", "SLAVE")
        self.assertEqual(o["advertised-address"], "127.0.0.1:20911")
        self.assertEqual(o["namesrv-addr-list"], ["a:1", "b:2"])
        self.assertEqual(o["fast-listen"], "tcp:20909")
        self.assertEqual((o["role"], o["flush-disk-type"], o["broker-id"], o["broker-role"]),
                         ("broker", "SYNC_FLUSH", 1, "SLAVE"))

    def test_config_file(self) -> None:
        """A broker.conf with option names and RocketMQ names is read; the command line still wins."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("# a RocketMQ broker.conf\n\nbrokerClusterName = C1\nbrokerName=b9\nbrokerId=0\n"
                    "namesrvAddr=10.0.0.1:9876;10.0.0.2:9876\nstorePathRootDir=/data/store\n"
                    "flushDiskType=SYNC_FLUSH\nlistenPort=30911\nbrokerIP1=192.0.2.7\n"
                    "deleteWhen=04\ncommit-log-file-size: 4096\nbroker_role=SYNC_MASTER\n"
                    "maxHashSlotNum=1000\nmaxIndexNum=4000\n")
        o = _parse("--config", path, "--broker-name", "cli")
        self.assertEqual((o["cluster-name"], o["broker-name"], o["broker-role"]), ("C1", "cli", "SYNC_MASTER"))
        self.assertEqual(o["namesrv-addr-list"], ["10.0.0.1:9876", "10.0.0.2:9876"])
        self.assertEqual((o["store-dir"], o["flush-disk-type"], o["commit-log-file-size"]),
                         ("/data/store", "SYNC_FLUSH", 4096))
        self.assertEqual((o["max-hash-slot-num"], o["max-index-num"]), (1000, 4000))
        self.assertEqual(o["listen"], "tcp:30911:interface=127.0.0.1")
        self.assertEqual(o["advertised-address"], "192.0.2.7:30911")
        self.assertEqual(o["ignored-config-keys"], ["deleteWhen"])

    def test_bad_values(self) -> None:
        """Bad choices, numbers, addresses and config files are usage errors naming the problem."""
        missing = os.path.join(self.mktemp(), "nope.conf")
        bad_line = self.mktemp()
        with open(bad_line, "w") as f:
            f.write("justakey\n")
        for argv, text in [
            (["--role", "proxy"], "--role"),
            (["--flush-disk-type", "NEVER"], "--flush-disk-type"),
            (["--sync-flush-completion", "aio"], "--sync-flush-completion"),
            (["--broker-role", "BOSS"], "--broker-role"),
            (["--broker-id", "x"], "--broker-id"),
            (["--auto-create-topic-enable", "maybe"], "auto-create"),
            (["--advertised-address", "nohost"], "ip:port"),
            (["--listen", "unix:/tmp/s"], "--advertised-address"),
            (["--config", missing], "cannot read"),
            (["--config", bad_line], "expected key=value"),
        ]:
            e = self.assertRaises(usage.UsageError, _parse, *argv)
            self.assertIn(text, str(e))

    def test_transaction_check_timing(self) -> None:
        """--transaction-check-interval / --transaction-timeout (ms, broker.conf names too) reach the BrokerConfig."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("transactionCheckInterval=2500\n")
        o = _parse("--config", path, "--transaction-timeout", "0")
        config, _ = _broker_configs(o)
        self.assertEqual((config.transaction_check_interval, config.transaction_timeout), (2.5, 0.0))
        default, _ = _broker_configs(_parse())
        self.assertEqual((default.transaction_check_interval, default.transaction_timeout), (60.0, 6.0))
        for argv in (["--transaction-check-interval", "0"], ["--transaction-timeout", "-1"],
                     ["--transaction-timeout", "soon"]):
            self.assertIn("--transaction-", str(self.assertRaises(usage.UsageError, _parse, *argv)))

    def test_message_delay_level(self) -> None:
        """--message-delay-level (messageDelayLevel in a config file) sets the delay levels; bad units are refused."""
        self.assertEqual(_parse()["message-delay-level"], "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
        self.assertEqual(_parse("--message-delay-level", "1s 2s 1d")["message-delay-level"], "1s 2s 1d")
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("messageDelayLevel=3s 4m\n")
        self.assertEqual(_parse("--config", path)["message-delay-level"], "3s 4m")
        e = self.assertRaises(usage.UsageError, _parse, "--message-delay-level", "1s 5x")
        self.assertIn("--message-delay-level", str(e))

    def test_timer_options(self) -> None:
        """--timer-max-delay-sec / --timer-precision-ms / --timer-wheel-enable (broker.conf timerMaxDelaySec …)
        reach the store config; RocketMQ 5's defaults: 3 days, 1000 ms, on."""
        _config, store = _broker_configs(_parse())
        self.assertEqual((store.timer_max_delay_sec, store.timer_precision_ms, store.timer_wheel_enable),
                         (259200, 1000, True))
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("timerMaxDelaySec=60\ntimerPrecisionMs=500\ntimerWheelEnable=false\n")
        _config, store = _broker_configs(_parse("--config", path))
        self.assertEqual((store.timer_max_delay_sec, store.timer_precision_ms, store.timer_wheel_enable),
                         (60, 500, False))
        e = self.assertRaises(usage.UsageError, _parse, "--timer-max-delay-sec", "3d")
        self.assertIn("--timer-max-delay-sec", str(e))

    def test_enable_property_filter(self) -> None:
        """--enable-property-filter (enablePropertyFilter in broker.conf) reaches BrokerConfig; off by default."""
        self.assertIs(_parse()["enable-property-filter"], False)
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("enablePropertyFilter=true\n")
        self.assertIs(_parse("--config", path)["enable-property-filter"], True)
        top = makeService(_parse("--role", "broker", "--store-dir", self.mktemp(), "--enable-property-filter", "true"),
                          MemoryReactorClock())
        self.assertTrue(top.getServiceNamed("broker").config.enable_property_filter)
        self.assertIn("--enable-property-filter", str(self.assertRaises(
            usage.UsageError, _parse, "--enable-property-filter", "yes")))

    def test_clean_file_forcibly_enable(self) -> None:
        """--clean-file-forcibly-enable (cleanFileForciblyEnable) reaches the store config; off by default."""
        store_dir = self.mktemp()
        for argv, expected in (((), False), (("--clean-file-forcibly-enable", "true"), True)):
            built: list[MessageStoreConfig] = []
            with mock.patch("rocketpy.broker.controller.BrokerService.__init__",
                            lambda self, reactor, config, store_config, **kwargs: built.append(store_config)):
                makeService(_parse("--role", "broker", "--store-dir", store_dir, *argv), MemoryReactorClock())
            self.assertIs(built[0].clean_file_forcibly_enable, expected)

    def test_sync_flush_completion(self) -> None:
        """--sync-flush-completion reaches the store config; native by default."""
        store_dir = self.mktemp()
        for argv, expected in (((), "native"), (("--sync-flush-completion", "uring"), "uring")):
            built: list[MessageStoreConfig] = []
            with mock.patch("rocketpy.broker.controller.BrokerService.__init__",
                            lambda self, reactor, config, store_config, **kwargs: built.append(store_config)):
                makeService(_parse("--role", "broker", "--store-dir", store_dir, *argv), MemoryReactorClock())
            self.assertEqual(built[0].sync_flush_completion, expected)

    def test_commit_log_page_cache_keep(self) -> None:
        """--commit-log-page-cache-keep (bytes) reaches the store config; 1 GiB by default, 0 is off."""
        store_dir = self.mktemp()
        for argv, expected in (((), 1 << 30), (("--commit-log-page-cache-keep", "67108864"), 64 << 20),
                               (("--commit-log-page-cache-keep", "0"), 0)):
            built: list[MessageStoreConfig] = []
            with mock.patch("rocketpy.broker.controller.BrokerService.__init__",
                            lambda self, reactor, config, store_config, **kwargs: built.append(store_config)):
                makeService(_parse("--role", "broker", "--store-dir", store_dir, *argv), MemoryReactorClock())
            self.assertEqual(built[0].commit_log_page_cache_keep, expected)
        self.assertRaises(usage.UsageError, _parse, "--commit-log-page-cache-keep", "64M")

    def test_trace_topic_enable(self) -> None:
        """--trace-topic-enable (traceTopicEnable) creates the trace topic with one queue; off by default."""
        cases: list[tuple[tuple[str, ...], str, int | None]] = [
            ((), "RMQ_SYS_TRACE_TOPIC", None),
            (("--trace-topic-enable", "true"), "RMQ_SYS_TRACE_TOPIC", 1),
            (("--trace-topic-enable", "true", "--msg-trace-topic-name", "MyTrace"), "MyTrace", 1),
        ]
        for argv, name, expected in cases:
            top = makeService(_parse("--role", "broker", "--store-dir", self.mktemp(), *argv), MemoryReactorClock())
            config = top.getServiceNamed("broker").topics.select_topic_config(name)
            self.assertEqual(config and config.read_queue_nums, expected)

    def test_endpoint_port(self) -> None:
        """Ports are read from both tcp endpoint forms."""
        self.assertEqual(endpoint_port("tcp:10911:interface=127.0.0.1"), 10911)
        self.assertEqual(endpoint_port("tcp:port=5"), 5)
        self.assertIsNone(endpoint_port("unix:/x"))


class MakeServiceTests(SynchronousTestCase):
    def test_builds_without_io(self) -> None:
        """makeService creates no file, thread or port; the name server comes first, the broker second."""
        root = self.mktemp()
        threads = set(threading.enumerate())
        reactor = MemoryReactorClock()
        top = makeService(_parse("--store-dir", os.path.join(root, "store"),
                                 "--namesrv-config-dir", os.path.join(root, "ns")), reactor)
        gc_tuning, heap, *services = list(top)
        self.assertIsInstance(gc_tuning, GCThresholdService)
        self.assertEqual(gc_tuning.gen0, 10_000)
        self.assertIsInstance(heap, HeapKeepService)
        self.assertEqual(heap.keep, 8 << 20)
        self.assertIsInstance(services[0], NamesrvService)
        self.assertIsInstance(services[1], BrokerService)
        self.assertFalse(os.path.exists(root))
        self.assertEqual(set(threading.enumerate()) - threads, set())  # none started (others may end)
        self.assertEqual(reactor.tcpServers, [])
        broker = services[1]
        self.assertEqual(broker.config.advertised_address, "127.0.0.1:10911")
        self.assertEqual(broker.topics.path, os.path.join(root, "store", "config", "topics.json"))

    def test_single_roles(self) -> None:
        """--role namesrv and --role broker build only that service."""
        reactor = MemoryReactorClock()
        self.assertEqual([type(s) for s in makeService(_parse("--role", "namesrv"), reactor)],
                         [GCThresholdService, HeapKeepService, NamesrvService])
        self.assertEqual([type(s) for s in makeService(_parse("--role", "broker", "--store-dir", self.mktemp()),
                                                       reactor)], [GCThresholdService, HeapKeepService, BrokerService])

    def test_gc_threshold(self) -> None:
        """The first-generation threshold is raised while running and restored on stop; 0 keeps it."""
        saved = gc.get_threshold()
        self.addCleanup(gc.set_threshold, *saved)
        gc.set_threshold(700, 10, 10)
        service = makeService(_parse("--role", "namesrv", "--gc-threshold", "25000"), MemoryReactorClock())
        tuning = list(service)[0]
        tuning.startService()
        self.assertEqual(gc.get_threshold(), (25000, 10, 10))
        tuning.stopService()
        self.assertEqual(gc.get_threshold(), (700, 10, 10))
        untouched = GCThresholdService(0)
        untouched.startService()
        self.assertEqual(gc.get_threshold(), (700, 10, 10))
        untouched.stopService()

    def test_ordered_stop(self) -> None:
        """Children stop one after another in reverse order, each after the previous finished."""
        events: list[str] = []
        gates: dict[str, Deferred[None]] = {}

        class Recording(Service):
            def stopService(self) -> Deferred[None]:
                Service.stopService(self)
                name = str(self.name)
                events.append(f"stop {name}")
                gates[name] = Deferred()
                return gates[name]

        top = OrderedServices(MemoryReactorClock())
        for name in ("namesrv", "broker"):
            s = Recording()
            s.setName(name)
            s.setServiceParent(top)
        top.startService()
        done = top.stopService()
        self.assertEqual(events, ["stop broker"])
        gates["broker"].callback(None)
        self.assertEqual(events, ["stop broker", "stop namesrv"])
        self.assertNoResult(done)
        gates["namesrv"].callback(None)
        self.successResultOf(done)

    def test_start_failure_stops_the_process(self) -> None:
        """A part whose start fails (e.g. its port is taken) stops the reactor: no half-running broker;
        the parts after it are not started."""
        reactor = MemoryReactorClock()
        reactor.running = True

        class Failing(Service):
            def startService(self) -> Deferred[None]:
                super().startService()
                return fail(RuntimeError("address already in use"))

        exits: list[int] = []
        top = OrderedServices(reactor, exits.append)
        fine, failing, later = Service(), Failing(), Service()
        for service in (fine, failing, later):
            service.setServiceParent(top)
        with capturedLogs() as events:
            top.startService()
        self.assertTrue(reactor.hasStopped)
        self.assertTrue(any("address already in use" in str(e.get("error")) for e in events))
        self.assertEqual((fine.running, failing.running, later.running), (True, True, False))
        (trigger,) = reactor.triggers["after"]["shutdown"]
        self.assertEqual(exits, [])
        trigger[0]()
        self.assertEqual(exits, [1])
        self.flushLoggedErrors(RuntimeError)

    def test_children_start_one_after_another(self) -> None:
        """A child starts once the previous child's start (a Deferred) fired."""
        gate: Deferred[None] = Deferred()

        class Slow(Service):
            def startService(self) -> Deferred[None]:
                super().startService()
                return gate

        top = OrderedServices(MemoryReactorClock())
        slow, after = Slow(), Service()
        slow.setServiceParent(top)
        after.setServiceParent(top)
        started = top.startService()
        self.assertFalse(after.running)
        self.assertNoResult(started)
        gate.callback(None)
        self.assertTrue(after.running)
        self.successResultOf(started)

    def test_failed_start_exits_with_status_1(self) -> None:
        """``python -m twisted rocketpy`` with its name server port taken exits 1, not 0."""
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        self.addCleanup(taken.close)
        root = os.path.abspath(self.mktemp())
        args = [sys.executable, "-m", "twisted", "rocketpy", "--namesrv-listen",
                f"tcp:{taken.getsockname()[1]}:interface=127.0.0.1", "--listen", "tcp:0:interface=127.0.0.1",
                "--advertised-address", "127.0.0.1:1", "--store-dir", os.path.join(root, "store"),
                "--namesrv-config-dir", os.path.join(root, "ns"), "--http", "none", "--grpc-listen", "none"]
        done = subprocess.run(args, capture_output=True, timeout=120, cwd=os.path.dirname(os.path.dirname(
            os.path.dirname(os.path.abspath(__file__)))))
        self.assertEqual(done.returncode, 1, done.stdout.decode(errors="replace")[-2000:])
        self.assertIn(b"rocketpy cannot start", done.stdout + done.stderr)

    def test_clean_start_keeps_running(self) -> None:
        """When every part starts, the reactor is left running."""
        reactor = MemoryReactorClock()
        reactor.running = True

        top = OrderedServices(reactor)
        Service().setServiceParent(top)
        self.successResultOf(top.startService())
        self.assertFalse(reactor.hasStopped)



class LoopbackTests(TestCase):
    """Name server and broker in-process on loopback, driven through the real RemotingClient."""

    timeout = 30

    async def test_auto_created_topic_is_routed(self) -> None:
        """A send auto-creates a topic from TBW102 and the name server routes it to the advertised broker."""
        from twisted.internet import reactor

        root = self.mktemp()
        namesrv = NamesrvService(reactor, "tcp:0:interface=127.0.0.1", os.path.join(root, "ns"))
        namesrv.startService()
        self.addCleanup(namesrv.stopService)
        ns_port = namesrv.listening_port
        assert ns_port is not None
        ns_addr = f"127.0.0.1:{ns_port.getHost().port}"  # type: ignore[attr-defined]
        port = free_port()
        config = BrokerConfig(listen=f"tcp:{port}:interface=127.0.0.1", advertised_address=f"127.0.0.1:{port}",
                              namesrv_addr=[ns_addr])
        store_config = MessageStoreConfig(
            store_path_root_dir=os.path.join(root, "store"), mapped_file_size_commit_log=1024 * 1024,
            mapped_file_size_consume_queue=6000, max_hash_slot_num=100, max_index_num=400,
        )
        broker = BrokerService(reactor, config, store_config)
        broker.startService()
        self.addCleanup(broker.stopService)  # runs before the name server's cleanup
        await broker.when_started()

        client = RemotingClient(reactor)
        self.addCleanup(client.close)
        send = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
            "a": "PG", "b": "LoopTopic", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0",
        }, b"hello")
        sent = await client.invoke_sync(config.advertised_address, send, 5)
        self.assertEqual(sent.code, ResponseCode.SUCCESS, sent.remark)

        route = None
        for _ in range(100):  # the re-registration travels on the broker's own connection
            route = await client.invoke_sync(
                ns_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "LoopTopic"}), 5)
            if route.code == ResponseCode.SUCCESS:
                break
            await deferLater(reactor, 0.05, lambda: None)
        assert route is not None
        self.assertEqual(route.code, ResponseCode.SUCCESS, route.remark)
        body = json.loads(route.body)
        self.assertEqual(body["brokerDatas"][0]["brokerAddrs"], {"0": f"127.0.0.1:{port}"})
        self.assertEqual([(q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in body["queueDatas"]],
                         [(4, 4, 6)])

        offset = await client.invoke_sync(config.advertised_address, RemotingCommand.request(
            RequestCode.GET_MAX_OFFSET, {"topic": "LoopTopic", "queueId": "0"}), 5)
        self.assertEqual(offset.ext_fields, {"offset": "1"})
        await broker.stopService()
        self.assertFalse(os.path.exists(store_config.abort_path))
        self.assertTrue(os.path.exists(os.path.join(store_config.config_dir, "topics.json")))


class RecordingStore(CannedStoreService):
    """A fake StoreService that records its life cycle into a shared event list."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    def startService(self) -> None:
        self.events.append("store start")

    def stopService(self) -> None:
        self.events.append("store stop")


class BrokerServiceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = ThreadlessReactor()
        self.events: list[str] = []
        self.pool = InlinePool()
        self.store_config = MessageStoreConfig(store_path_root_dir=self.mktemp())
        self.broker = self.make_broker(BrokerConfig(advertised_address="192.0.2.1:10911"))

    def make_broker(self, config: BrokerConfig) -> BrokerService:
        return BrokerService(
            self.reactor, config, self.store_config,
            make_store=lambda reactor, config: RecordingStore(self.events),
            config_pool=self.pool,  # type: ignore[arg-type]
        )

    def test_start_listens_and_wires(self) -> None:
        """Start loads the store, listens on the endpoint and the HA port, and wires the arrival
        listeners (long polling, HA); store host is advertised."""
        self.broker.startService()
        self.successResultOf(self.broker.when_started())
        self.assertEqual(self.events, ["store start"])
        self.assertEqual([port[0] for port in self.reactor.tcpServers], [10911, 10912])
        self.assertEqual(self.store_config.store_host, ("192.0.2.1", 10911))
        self.assertEqual(len(self.broker.store.listeners), 3)  # long polling, HA, timer
        self.broker.offsets.commit_offset("h", "G", "T", 0, 3)
        self.assertEqual(self.broker.store.positions()[:2],  # retention's guard: groups, then delay levels
                         [("G", "T", 0, 3), ("(delayed messages)", "SCHEDULE_TOPIC_XXXX", 0, 0)])
        self.assertEqual(len(self.broker.store.positions()), 1 + 18 + 1)
        self.assertEqual(self.broker.store.positions()[-1], ("(timer messages)", "rmq_sys_wheel_timer", 0, 0))
        self.assertTrue(self.pool.started)
        self.successResultOf(self.broker.stopService())

    def test_tree_order(self) -> None:
        """The broker's parts start in doc/broker.md's order (and stop in reverse): config, store,
        features, connections, listeners, registration, HA."""
        self.assertEqual([s.name for s in self.broker], [
            "config", "store", "long polling", "ScheduleMessageService", "TimerMessageService",
            "TransactionStore", "TransactionCheckService", "offsets persistence", "channel scan", "traffic",
            "connections", "listener", "registration", "HA"])

    def test_fast_listen(self) -> None:
        """With fast_listen the broker also listens on the VIP port, and stops both ports."""
        self.broker = self.make_broker(BrokerConfig(advertised_address="192.0.2.1:10911",
                                                    fast_listen="tcp:10909:interface=127.0.0.1"))
        self.broker.startService()
        self.assertEqual([port[0] for port in self.reactor.tcpServers], [10911, 10909, 10912])
        fast = self.broker.fast_listening_port
        self.successResultOf(self.broker.stopService())
        self.assertIsNone(self.broker.listening_port)
        self.assertIsNotNone(fast)
        self.assertIsNone(self.broker.fast_listening_port)

    def test_offsets_persisted_every_five_seconds_and_on_stop(self) -> None:
        """consumerOffset.json is written by the 5 s loop and once more on stop, before the store stops."""
        path = os.path.join(self.store_config.config_dir, "consumerOffset.json")
        self.broker.startService()
        self.broker.offsets.commit_offset("p", "G", "T", 0, 3)
        self.reactor.advance(4.9)
        self.assertFalse(os.path.exists(path))
        self.reactor.advance(0.1)
        with open(path) as f:
            self.assertEqual(json.load(f), {"offsetTable": {"T@G": {"0": 3}}})
        self.broker.offsets.commit_offset("p", "G", "T", 0, 4)
        self.successResultOf(self.broker.stopService())
        with open(path) as f:
            self.assertEqual(json.load(f), {"offsetTable": {"T@G": {"0": 4}}})
        self.assertEqual(self.events, ["store start", "store stop"])
        self.assertTrue(self.pool.stopped)
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_channel_scan_every_ten_seconds(self) -> None:
        """A consumer silent for 120 s is dropped by the 10 s scan."""
        self.broker.startService()
        channel = FakeChannel()
        (data,) = parse_heartbeat(CPP_HEARTBEAT).consumers
        self.broker.consumers.register_consumer(data, ClientChannelInfo(channel, "C"))
        self.reactor.advance(120)
        self.assertFalse(channel.closed)
        self.reactor.advance(10)
        self.assertTrue(channel.closed)
        self.successResultOf(self.broker.stopService())

    def test_stop_twice(self) -> None:
        """A second stop does nothing and fires at once."""
        self.broker.startService()
        self.successResultOf(self.broker.stopService())
        self.successResultOf(self.broker.stopService())
        self.assertEqual(self.events.count("store stop"), 1)


class PortInUseTests(TestCase):
    async def test_name_server_start_fails_when_port_taken(self) -> None:
        """when_started() fails when the name server's port is already taken by another socket."""
        from twisted.internet import reactor

        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        self.addCleanup(taken.close)
        port = taken.getsockname()[1]
        service = NamesrvService(reactor, f"tcp:{port}:interface=127.0.0.1", self.mktemp())
        self.addCleanup(service.stopService)
        with self.assertRaises(Exception) as caught:
            await service.startService()
        self.assertIn("in use", str(caught.exception).lower())


class HttpOptionTests(SynchronousTestCase):
    def test_default_follows_role(self) -> None:
        """The all-in-one role serves /metrics on 127.0.0.1:8080; the single roles serve nothing."""
        self.assertEqual(_parse()["http"], "tcp:8080:interface=127.0.0.1")
        self.assertEqual(_parse("--role", "broker")["http"], "none")
        self.assertEqual(_parse("--role", "namesrv")["http"], "none")
        self.assertEqual(_parse("--role", "broker", "--http", "tcp:9100")["http"], "tcp:9100")

    def test_config_file_key(self) -> None:
        """``http=…`` in a --config file sets it, as every option name does."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("http=none\n")
        self.assertEqual(_parse("--config", path)["http"], "none")

    def test_bad_values(self) -> None:
        """A malformed endpoint, or --http on a name server alone, is a usage error."""
        for argv in (("--http", "tcp:notaport"), ("--http", "bogus:1"), ("--role", "namesrv", "--http", "tcp:9100")):
            self.assertRaises(usage.UsageError, _parse, *argv)

    def test_none_builds_no_http_service(self) -> None:
        """``--http none`` leaves the HTTP service out, so no port is opened for it; otherwise it
        comes last (stopped first) and listens on its endpoint once started."""
        from rocketpy.web.service import HttpService

        root = self.mktemp()
        argv = ("--store-dir", os.path.join(root, "s"), "--namesrv-config-dir", os.path.join(root, "n"))
        off = makeService(_parse(*argv, "--http", "none"), MemoryReactorClock())
        self.assertFalse([s for s in off if isinstance(s, HttpService)])
        on = list(makeService(_parse(*argv), MemoryReactorClock()))
        self.assertIsInstance(on[-1], HttpService)
        reactor = MemoryReactorClock()
        http = HttpService(reactor, "tcp:8080:interface=127.0.0.1", Resource())
        http.startService()
        self.successResultOf(http.when_started())
        self.assertEqual([(port, interface) for port, _, _, interface in reactor.tcpServers], [(8080, "127.0.0.1")])
        self.successResultOf(http.stopService())
        self.assertIsNone(http.listening_port)

    def test_http_admin(self) -> None:
        """``--http-admin`` (or ``http-admin=true`` in a --config file) enables the dashboard's
        write actions; it needs an HTTP endpoint."""
        self.assertFalse(_parse()["http-admin"])
        self.assertTrue(_parse("--http-admin")["http-admin"])
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("http-admin=true\n")
        self.assertTrue(_parse("--config", path)["http-admin"])
        with self.assertRaises(usage.UsageError) as caught:
            _parse("--role", "broker", "--http-admin")
        self.assertIn("--http-admin enables the dashboard's write actions: it needs --http", str(caught.exception))
