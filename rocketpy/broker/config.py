"""Broker settings (``BrokerConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from rocketpy.ha.config import endpoint_tcp_port


@dataclass
class BrokerConfig:
    """Settings of one broker: RocketMQ's ``BrokerConfig`` names in snake_case (times in seconds).

    ``advertised_address`` (``brokerIP1:listenPort``) is what the broker
    registers with the name server and writes as STOREHOST into every stored
    message, so clients must be able to reach it.
    """

    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    broker_role: str = "ASYNC_MASTER"
    listen: str = "tcp:10911:interface=127.0.0.1"
    #: A second endpoint, normally listen port - 2 (10909): the "VIP channel" Java
    #: clients up to 4.5.0 send to by default (``vipChannelEnabled``). None: not opened.
    fast_listen: str | None = None
    advertised_address: str = "127.0.0.1:10911"
    namesrv_addr: list[str] = field(default_factory=list)
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    register_name_server_period: float = 30.0
    register_broker_timeout: float = 6.0
    channel_expired_timeout: float = 120.0
    scan_channel_interval: float = 10.0
    flush_consumer_offset_interval: float = 5.0
    long_polling_enable: bool = True
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    #: Transactions: seconds between check-back passes, age before a half message is
    #: checked, checks before it is given up (``transactionCheckInterval`` …).
    transaction_check_interval: float = 60.0
    transaction_timeout: float = 6.0
    transaction_check_max: int = 15
    #: Replication (doc/ha.md): the HA server endpoint of a master (None: listen port + 1),
    #: a slave's master HA ``host:port`` (None: learnt from the name server), and whether
    #: a master lagging in memory sends consumers to its slave (``slaveReadEnable``).
    ha_listen: str | None = None
    ha_master_address: str | None = None
    slave_read_enable: bool = False
    #: Plain ACL (doc/security.md): check every request against ``acl_file`` (a ``plain_acl.yml``).
    acl_enable: bool = False
    acl_file: str | None = None
    #: Serve SQL92 subscriptions (``enablePropertyFilter``; off in RocketMQ too).
    enable_property_filter: bool = False
    #: Store replies on ``<cluster>_REPLY_TOPIC`` after pushing them (``storeReplyMessageEnable``).
    store_reply_message_enable: bool = True
    #: Create the message trace topic at start (``traceTopicEnable``, ``msgTraceTopicName``).
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"

    @property
    def advertised_host(self) -> str:
        return self.advertised_address.rsplit(":", 1)[0]

    @property
    def advertised_port(self) -> int:
        return int(self.advertised_address.rsplit(":", 1)[1])

    @property
    def ha_server_addr(self) -> str:
        """``brokerIP2:haListenPort``: the advertised host, the ``ha_listen`` port or listen port + 1."""
        port = endpoint_tcp_port(self.ha_listen) if self.ha_listen else None
        return f"{self.advertised_host}:{port or self.advertised_port + 1}"

    def to_properties(self) -> dict[str, str]:
        """Every setting as RocketMQ's camelCase name → string (GET_BROKER_CONFIG)."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            name = _JAVA_NAMES.get(f.name) or _camel(f.name)
            if isinstance(value, bool):
                out[name] = "true" if value else "false"
            elif value is None:
                continue
            elif isinstance(value, list):
                out[name] = ";".join(value)
            elif isinstance(value, float) and f.name in _MILLIS:
                out[name] = str(int(value * 1000))
            else:
                out[name] = str(value)
        out["brokerIP1"] = self.advertised_host
        out["listenPort"] = str(self.advertised_port)
        return out


_JAVA_NAMES = {
    "cluster_name": "brokerClusterName",
    "namesrv_addr": "namesrvAddr",
    "advertised_address": "advertisedAddress",
    "register_broker_timeout": "registerBrokerTimeoutMills",
    "channel_expired_timeout": "channelExpiredTimeout",
    "transaction_timeout": "transactionTimeOut",
}
_MILLIS = {
    "register_name_server_period",
    "register_broker_timeout",
    "channel_expired_timeout",
    "scan_channel_interval",
    "flush_consumer_offset_interval",
    "transaction_check_interval",
    "transaction_timeout",
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
