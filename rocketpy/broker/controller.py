"""``BrokerService``: wires the remoting server, the store, the managers, the processors and the timers.

Construction only builds objects (safe in ``makeService``: no file, port or
thread). The broker is an ordered service tree (:meth:`BrokerService._build_tree`):
config tables → store → features → connections → listeners → registration → HA,
each started once the previous one has, and stopped in reverse order, the store
(then the config files) last so everything is flushed and the abort file removed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger, LogLevel
from twisted.python.threadpool import ThreadPool

from rocketpy.broker.clients import ClientChannelListener, ConsumerManager, ProducerManager
from rocketpy.broker.config import BrokerConfig
from rocketpy.broker.longpoll import PullRequestHoldService
from rocketpy.broker.offsets import ConsumerOffsetManager, RebalanceLockManager
from rocketpy.broker.outer import NameServerRegistration
from rocketpy.broker.admin import AdminBrokerProcessor
from rocketpy.broker.aclmanage import AclAdminProcessor
from rocketpy.broker.processors import (
    BrokerTables,
    ClientManageProcessor,
    ConsumerManageProcessor,
)
from rocketpy.broker.pull import PullMessageProcessor
from rocketpy.broker.query import QueryMessageProcessor
from rocketpy.broker.schedule import DelayOffsetProcessor, DelayOffsetTable, ScheduleMessageService
from rocketpy.broker.reply import REPLY_CODES, ReplyMessageProcessor
from rocketpy.broker.send import SendMessageProcessor
from rocketpy.broker.sendback import SendBackProcessor
from rocketpy.broker.timer import TimerCheckpoint, TimerMessageService
from rocketpy.broker.timercopy import SlaveTimerCheckpoint, TimerCheckpointProcessor
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.broker.traffic import BrokerTraffic
from rocketpy.ha.client import HAClient
from rocketpy.ha.config import HAConfig, ha_listen_endpoint
from rocketpy.ha.service import HAService
from rocketpy.ha.sync import SlaveSynchronize
from rocketpy.broker.transaction import EndTransactionProcessor, TransactionCheckService, TransactionStore
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.responders import register_responders
from rocketpy.remoting.server import RemotingServer
from rocketpy.remoting.tls import ServerTLS, server_factory
from rocketpy.store.config import MessageStoreConfig
from rocketpy.util.endpoints import server_endpoint
from rocketpy.util.fileio import write_atomically
from rocketpy.util.service import ListeningService, LoopService, OrderedMultiService, Steps

SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


def _default_store(reactor: Any, config: MessageStoreConfig) -> Any:
    # Imported here: the broker's unit tests pass a fake store instead.
    from rocketpy.store.messagestore import MessageStore
    from rocketpy.store.service import StoreService

    return StoreService(MessageStore(config), reactor)


class BrokerService(OrderedMultiService):
    """One RocketMQ broker.

    :param reactor: listening, connecting and time (a ``MemoryReactorClock`` in tests).
    :param config: the broker settings; ``advertised_address`` becomes the store host.
    :param store_config: the store settings; its ``config_dir`` holds the JSON config files.
    :param make_store: ``(reactor, store_config) -> StoreService`` (tests pass a fake).
    :param config_pool: writes the config files (topics, groups, offsets, delay offsets) off the reactor thread; default a
        one-thread pool started and stopped by this service.
    :param tls: serve TLS (and, when enforcing, register with the name servers over TLS); doc/security.md.
    """

    log = Logger()

    def __init__(
        self,
        reactor: Any,
        config: BrokerConfig,
        store_config: MessageStoreConfig,
        make_store: Callable[[Any, MessageStoreConfig], Any] = _default_store,
        config_pool: ThreadPool | None = None,
        tls: ServerTLS | None = None,
    ) -> None:
        super().__init__()
        self._reactor = reactor
        self._tls = tls
        self.config = config
        self.boot_time = reactor.seconds()
        store_config.store_host = (config.advertised_host, config.advertised_port)
        store_config.broker_role = config.broker_role
        self.store = make_store(reactor, store_config)
        self.store_config = store_config  # the 5.x gRPC endpoint reads the timer settings (recall handles)
        in_config_dir = store_config.config_dir
        self.topics = TopicConfigManager(
            reactor,
            os.path.join(in_config_dir, "topics.json"),
            broker_name=config.broker_name,
            cluster_name=config.cluster_name,
            auto_create_topic_enable=config.auto_create_topic_enable,
            default_topic_queue_nums=config.default_topic_queue_nums,
            cluster_topic_enable=config.cluster_topic_enable,
            broker_topic_enable=config.broker_topic_enable,
            trace_topic=config.msg_trace_topic_name if config.trace_topic_enable else None,
        )
        self.subscriptions = SubscriptionGroupManager(
            reactor, os.path.join(in_config_dir, "subscriptionGroup.json"), config.auto_create_subscription_group
        )
        self.offsets = ConsumerOffsetManager(os.path.join(in_config_dir, "consumerOffset.json"))
        self.consumers = ConsumerManager(reactor, config.channel_expired_timeout)
        self.producers = ProducerManager(reactor, config.channel_expired_timeout)
        self.hold: PullRequestHoldService | None = None
        if config.long_polling_enable:
            self.hold = PullRequestHoldService(reactor, self.store.get_max_offset_in_queue)
        self.traffic = BrokerTraffic(reactor, self.topics, self.store)
        self.tables = BrokerTables(
            config, self.topics, self.subscriptions, self.offsets, self.consumers, self.producers, self.store,
            reactor, RebalanceLockManager(reactor), self._held_pulls, self.traffic,
        )
        self._features(store_config)
        self.tables.timer_figures = self.timer.runtime_figures
        listeners: list[Any] = [ClientChannelListener(self.consumers, self.producers)]
        if self.hold is not None:
            listeners.append(self.hold)
        self.acl_validator, self.acl_watcher = self._acl()
        hooks = [self.acl_validator] if self.acl_validator is not None else []
        self.server = RemotingServer(reactor, idle_timeout=config.channel_expired_timeout, listeners=listeners,
                                     rpc_hooks=hooks)
        self._register_processors(store_config)
        self.client = RemotingClient(reactor, tls=tls.client() if tls is not None and tls.mode == "enforcing" else None)
        self.registration = NameServerRegistration(reactor, self.client, config, self.topics)
        self._replication(store_config)
        self._pool = config_pool if config_pool is not None else ThreadPool(1, 1, "rocketpy-broker-config")
        for table in (self.topics, self.subscriptions, self.offsets, self.delay_offsets, self.timer_checkpoint):
            table.writer = self._write_in_pool
        self._fast_listener: ListeningService | None = None
        self._build_tree()

    def _acl(self) -> tuple[Any, Any]:
        """The validator (the server's RPC hook) and the watcher of ``plain_acl.yml`` when ACL is on."""
        if not self.config.acl_enable:
            return None, None  # no hook: requests pay nothing for ACL
        from rocketpy.acl.plain import PlainAcl
        from rocketpy.acl.watch import AclFileWatcher
        from rocketpy.broker.acl import PlainAccessValidator

        if not self.config.acl_file:
            raise ValueError("aclEnable needs an ACL file (--acl-file)")
        validator = PlainAccessValidator(PlainAcl())
        watcher = AclFileWatcher(self.config.acl_file, validator.use, self._reactor, self._in_config_pool)
        return validator, watcher

    def _in_config_pool(self, f: Callable[..., Any], *args: Any) -> Deferred[Any]:
        """``f(*args)`` in the config pool (the ACL file's reads and writes)."""
        return deferToThreadPool(self._reactor, self._pool, f, *args)

    def _held_pulls(self) -> int:
        return 0 if self.hold is None else self.hold.parked_count()

    def _features(self, store_config: MessageStoreConfig) -> None:
        """Delayed delivery and transaction checks (masters only), and their processors."""
        config = self.config
        master = config.broker_role != "SLAVE"
        self.delay_offsets = DelayOffsetTable(os.path.join(store_config.config_dir, "delayOffset.json"))
        levels = [ms / 1000 for ms in store_config.delay_level_table()]
        self.schedule = ScheduleMessageService(self.store, self._reactor, levels, self.delay_offsets)
        self.timer_checkpoint = TimerCheckpoint(os.path.join(store_config.config_dir, "timerCheckpoint.json"))
        self.timer = TimerMessageService(self.store, self._reactor, self.timer_checkpoint)
        # retention above 85 % keeps files holding unconsumed or undelivered messages (doc/features.md)
        self.store.set_consumer_positions(lambda: self.offsets.positions() + self.delay_offsets.positions(len(levels))
                                          + self.timer_checkpoint.positions())
        self.transactions = TransactionStore(self.store, store_config.store_host)
        self.transaction_check = TransactionCheckService(
            self.transactions, self.producers, self.offsets, self._reactor, config.transaction_check_interval,
            config.transaction_timeout, config.transaction_check_max, store_config.file_reserved_time * 3600,
        )
        self._feature_services: list[Service] = (
            [self.schedule, self.timer, self.transactions, self.transaction_check] if master else [])
        self.send_back = SendBackProcessor(self.store, self.topics, self.subscriptions, lambda: master)
        self.end_transaction = EndTransactionProcessor(self.transactions, self._reactor, lambda: master,
                                                       config.transaction_timeout)
        self._feature_processors: list[Any] = [
            self.send_back,
            DelayOffsetProcessor(self.delay_offsets),
            TimerCheckpointProcessor(self.timer_checkpoint, self._reactor),
            self.end_transaction,
            QueryMessageProcessor(self.store),
        ]

    def _replication(self, store_config: MessageStoreConfig) -> None:
        """A master's HA service, or a slave's HA client and config copier (doc/ha.md)."""
        config, ha = self.config, HAConfig()
        self.ha: HAService | None = None
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSynchronize | None = None
        if config.broker_role != "SLAVE":
            listen = config.ha_listen or ha_listen_endpoint(config.listen)
            self.ha = HAService(self._reactor, self.store, ha, store_config.mapped_file_size_commit_log, listen,
                                sync_master=config.broker_role == "SYNC_MASTER")
            return
        self.ha_client = HAClient(self._reactor, self.store, ha, config.ha_master_address)
        self.slave_sync = SlaveSynchronize(
            self._reactor, self.client, self.topics, self.offsets, self.subscriptions, self.delay_offsets,
            SlaveTimerCheckpoint(self.timer_checkpoint, self.store).take,
        )
        self.registration.add_master_listener(self._master_learnt)
        self.store.add_arrival_listener(lambda topic, queue_id, _max: self.topics.learn_queue(topic, queue_id))

    def _master_learnt(self, master_addr: str | None, ha_addr: str | None) -> None:
        """A slave's registration answer names its master (RocketMQ updates both each time)."""
        assert self.slave_sync is not None and self.ha_client is not None
        if master_addr != self.slave_sync.master_address:
            self.slave_sync.master_address = master_addr
            if master_addr is not None:
                self.slave_sync.sync_now()
        if ha_addr is not None and self.config.ha_master_address is None:
            self.ha_client.update_master_address(ha_addr)

    def _register_processors(self, store_config: MessageStoreConfig) -> None:
        t = self.tables
        acl_admin = AclAdminProcessor(self.config, self.acl_validator, self.acl_watcher, self._in_config_pool,
                                      self._reactor)
        for locator in (ClientManageProcessor(t), ConsumerManageProcessor(t), AdminBrokerProcessor(t), acl_admin):
            register_responders(self.server, locator)
        for processor in self._feature_processors:
            for code in processor.codes:
                self.server.register_processor(code, processor)
        send = SendMessageProcessor(
            self.store,
            self.topics,
            store_config.store_host,
            cluster_name=self.config.cluster_name,
            max_message_size=store_config.max_message_size,
            region=self.config.region_id,
            trace_on=self.config.trace_on,
            groups=self.subscriptions,
            clock=self._reactor,
        )
        self.send_processor = send  # the 5.x gRPC endpoint stores through it too (rocketpy/grpc)
        for code in SEND_CODES:
            self.server.register_processor(code, send)
        reply = ReplyMessageProcessor(
            self.store, self.topics, store_config.store_host, cluster_name=self.config.cluster_name,
            max_message_size=store_config.max_message_size, region=self.config.region_id,
            trace_on=self.config.trace_on, groups=self.subscriptions, producers=self.producers,
            clock=self._reactor, store_reply=self.config.store_reply_message_enable,
        )
        for code in REPLY_CODES:
            self.server.register_processor(code, reply)
        pull = PullMessageProcessor(
            self.store,
            self.topics,
            self.hold,
            find_subscription=self.consumers.find_subscription_data,
            commit_offset=self.offsets.commit_offset if self.config.broker_role != "SLAVE" else None,
            groups=self.subscriptions,
            slave_readable=self.config.slave_read_enable,
            property_filter=self.config.enable_property_filter,
            gets=self.traffic.gets,
        )
        self.server.register_processor(RequestCode.PULL_MESSAGE, pull)
        self.pull_processor = pull  # the 5.x gRPC endpoint's PullMessage reads through it too (rocketpy/grpc)
        if self.hold is not None:
            self.hold.listen_to(self.store)

    def _build_tree(self) -> None:
        """The children in start order (stopped in reverse): config tables → store → features →
        connections → listeners → registration → HA. Adding a part is one line here."""
        config, reactor, add = self.config, self._reactor, self.add
        add("config", Steps(self._load_config, self._save_config))
        add("store", Steps(self.store.startService, self.store.stopService))
        if self.hold is not None:
            add("long polling", self.hold)
        for service in self._feature_services:
            add(type(service).__name__, service)
        if self.acl_watcher is not None:
            add("ACL file", Steps(self.acl_watcher.start, self.acl_watcher.stop))
        add("offsets persistence", LoopService(self.offsets.persist, config.flush_consumer_offset_interval, reactor))
        add("channel scan", LoopService(self._scan_channels, config.scan_channel_interval, reactor))
        add("traffic", Steps(self.traffic.start, self.traffic.stop))  # after the store: its first sample holds offsets
        add("connections", Steps(stop=self.server.close))  # closed once nothing listens
        self._listener = self._listening_service(config.listen, "broker")
        add("listener", self._listener)
        if config.fast_listen:  # the VIP channel older Java clients send to
            self._fast_listener = self._listening_service(config.fast_listen, "broker VIP channel")
            add("fast listener", self._fast_listener)
        add("registration", Steps(self._started_up, self._unregister))
        if self.ha is not None:
            add("HA", self.ha)
        if self.ha_client is not None and self.slave_sync is not None:
            add("HA client", self.ha_client)
            sync, ha = self.slave_sync, self.ha_client.config
            add("slave sync",
                Steps(lambda: sync.start(ha.sync_interval, ha.timer_checkpoint_sync_interval), sync.stop))

    def _listening_service(self, description: str, what: str) -> ListeningService:
        endpoint = server_endpoint(self._reactor, description)
        return ListeningService(endpoint, server_factory(self.server.factory(), self._tls, self._reactor), what)

    @property
    def listening_port(self) -> IListeningPort | None:
        """The broker's port once listening (``getHost().port`` gives the number)."""
        return self._listener.port

    @property
    def fast_listening_port(self) -> IListeningPort | None:
        """The ``fast_listen`` port once listening, else None."""
        return self._fast_listener.port if self._fast_listener is not None else None

    # -- start and stop steps -----------------------------------------------------

    def _load_config(self) -> None:
        self._pool.start()
        for table in (self.topics, self.subscriptions, self.offsets):
            table.load()

    async def _save_config(self) -> None:
        try:
            await self.offsets.persist()
        finally:
            self._pool.stop()

    def _started_up(self) -> None:
        port = self._listener.port
        self.log.info("broker {name} listening on {host}, advertised as {addr}", name=self.config.broker_name,
                      host=port.getHost() if port is not None else None, addr=self.config.advertised_address)
        self.registration.start()

    async def _unregister(self) -> None:
        try:
            await self.registration.stop()
        finally:
            await self.client.close()

    # -- periodic work ------------------------------------------------------------

    def _write_in_pool(self, path: str, data: bytes) -> Deferred[None]:
        """The config tables' writer: one atomic file write in the config pool, in call order."""
        return deferToThreadPool(self._reactor, self._pool, write_atomically, path, data)

    def _scan_channels(self) -> None:
        try:
            self.consumers.scan_not_active_channel()
            self.producers.scan_not_active_channel()
        except Exception:
            self.log.failure("channel expiry scan failed", level=LogLevel.error)
