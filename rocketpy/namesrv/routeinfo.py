"""The name server's route tables: clusters, brokers, topic queues and live brokers.

Pure bookkeeping, no Twisted: callers pass the current time (seconds) and the
channel a broker registered over. Behaviour follows Java 4.9.4
``RouteInfoManager`` (doc/wire.md §2); everything runs on one thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from rocketpy.common.route import MASTER_ID, BrokerData, QueueData, TopicRouteData
from rocketpy.common.topic import PERM_READ, PERM_WRITE, DataVersion, TopicConfig

#: ``topicSysFlag`` bits (``TopicSysFlag``).
FLAG_UNIT = 1
FLAG_UNIT_SUB = 2
#: A broker silent for longer than this is dropped (``BROKER_CHANNEL_EXPIRED_TIME``).
BROKER_EXPIRY_SECONDS = 120.0


@dataclass(slots=True)
class BrokerLiveInfo:
    """When a broker address last registered, and over which channel."""

    last_update: float
    data_version: DataVersion
    channel: object
    ha_server_addr: str


@dataclass(frozen=True, slots=True)
class RegisterResult:
    """What a registering slave learns about its master (both None for a master)."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


class RouteInfoManager:
    """All route tables of one name server."""

    def __init__(self) -> None:
        self._clusters: dict[str, set[str]] = {}
        self._brokers: dict[str, BrokerData] = {}
        self._topics: dict[str, dict[str, QueueData]] = {}
        self._live: dict[str, BrokerLiveInfo] = {}
        self._filter_servers: dict[str, list[str]] = {}

    # -- registration ---------------------------------------------------

    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        now: float,
        data_version: DataVersion | None = None,
        topic_configs: Mapping[str, TopicConfig] | None = None,
        filter_servers: Iterable[str] = (),
        channel: object = None,
    ) -> RegisterResult:
        """Record a (re-)registration of one broker address.

        The address under any other id of that broker name is removed first.
        A master's topics replace their queue data only on the first
        registration or when ``data_version`` differs from the stored one.

        :param now: the current time in seconds, kept as the last-update time.
        :param channel: the connection the registration arrived on; closing it
            drops the broker (:meth:`on_channel_destroy`).
        :return: the master's address and HA address, for a slave whose master
            is registered.
        """
        data_version = data_version or DataVersion()
        self._clusters.setdefault(cluster_name, set()).add(broker_name)
        broker = self._brokers.get(broker_name)
        first = broker is None
        if broker is None:
            broker = self._brokers[broker_name] = BrokerData(cluster_name, broker_name)
        for other_id, addr in list(broker.broker_addrs.items()):
            if addr == broker_addr and other_id != broker_id:
                del broker.broker_addrs[other_id]
        first = broker.broker_addrs.get(broker_id) is None or first
        broker.broker_addrs[broker_id] = broker_addr

        if topic_configs is not None and broker_id == MASTER_ID:
            if first or self.is_broker_topic_config_changed(broker_addr, data_version):
                for config in topic_configs.values():
                    self._update_queue_data(broker_name, config)

        self._live[broker_addr] = BrokerLiveInfo(now, data_version, channel, ha_server_addr)
        servers = list(filter_servers)
        if servers:
            self._filter_servers[broker_addr] = servers
        else:
            self._filter_servers.pop(broker_addr, None)

        if broker_id != MASTER_ID:
            master_addr = broker.broker_addrs.get(MASTER_ID)
            master_live = self._live.get(master_addr) if master_addr is not None else None
            if master_live is not None:
                return RegisterResult(master_live.ha_server_addr, master_addr)
        return RegisterResult()

    def _update_queue_data(self, broker_name: str, config: TopicConfig) -> None:
        queues = self._topics.setdefault(config.topic_name, {})
        queues[broker_name] = QueueData(
            broker_name,
            config.read_queue_nums,
            config.write_queue_nums,
            config.perm,
            config.topic_sys_flag,
        )

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        """Forget one broker address; its name goes once no address is left."""
        self._live.pop(broker_addr, None)
        self._filter_servers.pop(broker_addr, None)
        broker = self._brokers.get(broker_name)
        if broker is not None:
            broker.broker_addrs.pop(broker_id, None)
            if not broker.broker_addrs:
                self._remove_broker_name(broker_name)

    def on_channel_destroy(self, remote_address: str, channel: object = None) -> list[str]:
        """Drop the broker address that registered over ``channel``.

        When no live broker used that channel, ``remote_address`` itself is
        taken as the broker address (as Java does).

        :return: the broker addresses removed (empty when none matched).
        """
        broker_addr = remote_address
        if channel is not None:
            for addr, live in self._live.items():
                if live.channel is channel:
                    broker_addr = addr
                    break
        found = self._live.pop(broker_addr, None) is not None
        self._filter_servers.pop(broker_addr, None)
        for name, broker in list(self._brokers.items()):
            for broker_id, addr in list(broker.broker_addrs.items()):
                if addr == broker_addr:
                    del broker.broker_addrs[broker_id]
                    found = True
            if not broker.broker_addrs:
                self._remove_broker_name(name)
        return [broker_addr] if found else []

    def _remove_broker_name(self, broker_name: str) -> None:
        self._brokers.pop(broker_name, None)
        for cluster, names in list(self._clusters.items()):
            names.discard(broker_name)
            if not names:
                del self._clusters[cluster]
        for topic, queues in list(self._topics.items()):
            queues.pop(broker_name, None)
            if not queues:
                del self._topics[topic]

    def scan_not_active_broker(self, now: float, expiry: float = BROKER_EXPIRY_SECONDS) -> list[str]:
        """Drop every broker address silent for more than ``expiry`` seconds.

        The channel of each dropped broker is closed when it has ``close()``.

        :return: the broker addresses dropped.
        """
        expired = [(addr, live) for addr, live in self._live.items() if live.last_update + expiry < now]
        for addr, live in expired:
            close = getattr(live.channel, "close", None)
            if close is not None:
                close()
            self.on_channel_destroy(addr)
        return [addr for addr, _ in expired]

    # -- data versions ---------------------------------------------------

    def query_data_version(self, broker_addr: str) -> DataVersion | None:
        """The data version a broker address last registered with."""
        live = self._live.get(broker_addr)
        return None if live is None else live.data_version

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        """True unless ``broker_addr`` is live with exactly ``data_version``."""
        return self.query_data_version(broker_addr) != data_version

    def touch_broker(self, broker_addr: str, now: float) -> None:
        """Refresh a live broker's last-update time (QUERY_DATA_VERSION does)."""
        live = self._live.get(broker_addr)
        if live is not None:
            live.last_update = now

    # -- queries ---------------------------------------------------------

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic``, or None when it has no queue data or no live broker."""
        queues = self._topics.get(topic)
        if not queues:
            return None
        brokers: list[BrokerData] = []
        filter_table: dict[str, list[str]] = {}
        for broker_name in sorted(queues):
            broker = self._brokers.get(broker_name)
            if broker is None or not any(a in self._live for a in broker.broker_addrs.values()):
                continue
            brokers.append(broker.copy())
            for addr in broker.broker_addrs.values():
                if addr in self._filter_servers:
                    filter_table[addr] = list(self._filter_servers[addr])
        if not brokers:
            return None
        queue_datas = [replace(queues[name]) for name in sorted(queues)]
        return TopicRouteData(queue_datas, brokers, filter_table)

    def cluster_info(self) -> tuple[dict[str, BrokerData], dict[str, list[str]]]:
        """Copies of the broker table (by name) and the cluster table (cluster -> names)."""
        brokers = {name: broker.copy() for name, broker in self._brokers.items()}
        clusters = {cluster: sorted(names) for cluster, names in self._clusters.items()}
        return brokers, clusters

    def topic_list(self) -> list[str]:
        """Every topic with queue data, sorted."""
        return sorted(self._topics)

    def topics_by_cluster(self, cluster_name: str) -> list[str]:
        """The topics served by at least one broker of ``cluster_name``, sorted."""
        names = self._clusters.get(cluster_name, set())
        return sorted(t for t, queues in self._topics.items() if names.intersection(queues))

    def system_topic_list(self) -> tuple[list[str], str | None]:
        """Cluster and broker names (each is a system topic) and one broker address."""
        topics: set[str] = set()
        for cluster, names in self._clusters.items():
            topics.add(cluster)
            topics.update(names)
        broker_addr = None
        for broker in self._brokers.values():
            if broker.broker_addrs:
                broker_addr = next(iter(broker.broker_addrs.values()))
                break
        return sorted(topics), broker_addr

    def topics_with_sys_flag(self, required: int, forbidden: int = 0) -> list[str]:
        """Topics having a queue whose ``topicSysFlag`` has all ``required`` bits
        and none of the ``forbidden`` ones (the unit-topic queries)."""
        return sorted(
            topic
            for topic, queues in self._topics.items()
            if any(q.topic_sys_flag & required == required and not q.topic_sys_flag & forbidden for q in queues.values())
        )

    # -- admin -----------------------------------------------------------

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        """Delete ``topic``, or only its queues on the brokers of ``cluster_name``."""
        if cluster_name is None:
            self._topics.pop(topic, None)
            return
        queues = self._topics.get(topic)
        if queues is None:
            return
        for broker_name in self._clusters.get(cluster_name, set()):
            queues.pop(broker_name, None)
        if not queues:
            del self._topics[topic]

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        """Clear the write bit of every queue of ``broker_name``.

        :return: how many topics were touched.
        """
        return self._set_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        """Give every queue of ``broker_name`` read and write permission again.

        :return: how many topics were touched.
        """
        return self._set_perm(broker_name, lambda perm: PERM_READ | PERM_WRITE)

    def _set_perm(self, broker_name: str, change: Callable[[int], int]) -> int:
        count = 0
        for queues in self._topics.values():
            queue = queues.get(broker_name)
            if queue is not None:
                queue.perm = change(queue.perm)
                count += 1
        return count
