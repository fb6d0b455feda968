"""Who is connected: consumer groups and producer groups, from HEART_BEAT (doc/wire.md §4).

The heartbeat bodies themselves are parsed in :mod:`rocketpy.broker.heartbeat`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from zope.interface import implementer

from rocketpy.broker.heartbeat import ConsumeFromWhere, ConsumeType, ConsumerData, MessageModel, SubscriptionData
from rocketpy.interfaces import IChannel, IChannelEventListener
from rocketpy.remoting.codes import LanguageCode, RequestCode
from rocketpy.remoting.command import RemotingCommand


_log = Logger()


@dataclass(slots=True)
class ClientChannelInfo:
    """One client connection: who it is and when it last sent a heartbeat (seconds)."""

    channel: IChannel
    client_id: str
    language: str = LanguageCode.JAVA.name
    version: int = 0
    last_update: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The Java ``Connection`` shape (GET_CONSUMER_CONNECTION_LIST)."""
        return {
            "clientAddr": self.channel.remote_address,
            "clientId": self.client_id,
            "language": self.language,
            "version": self.version,
        }


@dataclass(slots=True)
class ConsumerGroupInfo:
    """The live members of one consumer group and what they subscribe to."""

    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    channels: dict[IChannel, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]

    def find_channel(self, client_id: str) -> ClientChannelInfo | None:
        for info in self.channels.values():
            if info.client_id == client_id:
                return info
        return None

    def update_subscriptions(self, subscriptions: list[SubscriptionData]) -> bool:
        """Take the heartbeat's subscriptions; True when topics were added or removed."""
        new = {s.topic: s for s in subscriptions}
        changed = set(new) != set(self.subscriptions)
        for topic, sub in new.items():
            old = self.subscriptions.get(topic)
            if old is None or sub.sub_version >= old.sub_version:
                self.subscriptions[topic] = sub
        for topic in set(self.subscriptions) - set(new):
            del self.subscriptions[topic]
        return changed

    def to_json(self) -> dict[str, Any]:
        """The Java ``ConsumerConnection`` shape."""
        return {
            "connectionSet": [info.to_json() for info in self.channels.values()],
            "consumeFromWhere": self.consume_from_where.name,
            "consumeType": self.consume_type.name,
            "messageModel": self.message_model.name,
            "subscriptionTable": {t: s.to_json() for t, s in self.subscriptions.items()},
        }


def log_send_failure(failure: Failure, log: Logger, what: str, peer: str) -> None:
    """Errback for requests the broker sends to clients: log, never propagate."""
    log.info("{what} to {peer} failed: {error}", what=what, peer=peer, error=failure.getErrorMessage())


class ConsumerManager:
    """Consumer groups by name; channels expire after ``expiry`` seconds without a heartbeat.

    Every change to a group's set of clients sends NOTIFY_CONSUMER_IDS_CHANGED
    (oneway, ext ``consumerGroup``) to the members left in the group.
    """

    log = Logger()

    def __init__(self, clock: IReactorTime, expiry: float = 120.0) -> None:
        self._clock = clock
        self.expiry = expiry
        self._groups: dict[str, ConsumerGroupInfo] = {}

    def register_consumer(self, data: ConsumerData, info: ClientChannelInfo, notify: bool = True) -> bool:
        """Record a heartbeat of ``info`` for ``data.group_name``; True when the group's client ids changed.

        A client id seen on a new connection replaces its old connection.
        """
        info.last_update = self._clock.seconds()
        group = self._groups.get(data.group_name)
        if group is None:
            group = self._groups[data.group_name] = ConsumerGroupInfo(data.group_name)
        group.consume_type = data.consume_type
        group.message_model = data.message_model
        group.consume_from_where = data.consume_from_where
        changed = group.find_channel(info.client_id) is None
        for channel, other in list(group.channels.items()):
            # The same client on a new connection: its old one is stale.
            if other.client_id == info.client_id and channel is not info.channel:
                del group.channels[channel]
        group.channels[info.channel] = info
        group.update_subscriptions(data.subscriptions)
        if changed:
            self.log.info("consumer {client} joined {group}", client=info.client_id, group=data.group_name)
            if notify:
                self.notify_consumer_ids_changed(data.group_name)
        return changed

    def unregister_consumer(self, group_name: str, channel: IChannel, notify: bool = True) -> bool:
        """Drop ``channel`` from the group (UNREGISTER_CLIENT); True when it was a member."""
        return self._remove(group_name, channel, notify)

    def do_channel_close_event(self, channel: IChannel) -> None:
        """Drop a closed connection from every group."""
        for name in [n for n, g in self._groups.items() if channel in g.channels]:
            self._remove(name, channel, True)

    def scan_not_active_channel(self) -> int:
        """Drop (and close) channels silent for longer than the expiry; how many were dropped."""
        tables = {name: g.channels for name, g in self._groups.items()}
        expired = _expired(tables, self._clock.seconds() - self.expiry)
        for name, channel, info in expired:
            self.log.warn("consumer {client} of {group} expired", client=info.client_id, group=name)
            self._remove(name, channel, True)
            _close_quietly(channel)
        return len(expired)

    def _remove(self, group_name: str, channel: IChannel, notify: bool) -> bool:
        group = self._groups.get(group_name)
        if group is None or group.channels.pop(channel, None) is None:
            return False
        if not group.channels:
            del self._groups[group_name]
        elif notify:
            self.notify_consumer_ids_changed(group_name)
        return True

    def notify_consumer_ids_changed(self, group_name: str) -> None:
        """Tell every member of the group to rebalance now."""
        self.tell_group(group_name, RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group_name})

    def tell_group(self, group_name: str, code: int, ext: dict[str, str],
                   body_for: Callable[[ClientChannelInfo], bytes] | None = None) -> int:
        """Send a oneway request to every member of the group (failures are logged); how many.

        :param body_for: the body for one member (its language, version), if any.
        """
        group = self._groups.get(group_name)
        if group is None:
            return 0
        what = RequestCode(code).name
        for channel, info in list(group.channels.items()):
            body = b"" if body_for is None else body_for(info)
            request = RemotingCommand.request(code, dict(ext), body, language=LanguageCode.JAVA.name)
            request.mark_oneway()
            try:
                d = channel.invoke_oneway(request)
            except Exception:
                log_send_failure(Failure(), self.log, what, channel.remote_address)
                continue
            d.addErrback(log_send_failure, self.log, what, channel.remote_address)
        return len(group.channels)

    def get_consumer_group_info(self, group_name: str) -> ConsumerGroupInfo | None:
        return self._groups.get(group_name)

    def find_channel(self, group_name: str, client_id: str) -> ClientChannelInfo | None:
        """The connection of ``client_id`` in ``group_name``, or None when it is not online."""
        group = self._groups.get(group_name)
        return None if group is None else group.find_channel(client_id)

    def find_subscription_data(self, group_name: str, topic: str) -> SubscriptionData | None:
        """The subscription the group's latest heartbeat gave for ``topic`` (pull without subscription)."""
        group = self._groups.get(group_name)
        return None if group is None else group.subscriptions.get(topic)

    def groups_of_topic(self, topic: str) -> set[str]:
        """Online groups subscribed to ``topic``."""
        return {name for name, g in self._groups.items() if topic in g.subscriptions}

    def groups(self) -> list[str]:
        return list(self._groups)


class ProducerManager:
    """Producer groups by name, for admin listings and CHECK_TRANSACTION_STATE."""

    log = Logger()

    def __init__(self, clock: IReactorTime, expiry: float = 120.0) -> None:
        self._clock = clock
        self.expiry = expiry
        self._groups: dict[str, dict[IChannel, ClientChannelInfo]] = {}

    def register_producer(self, group_name: str, info: ClientChannelInfo) -> None:
        info.last_update = self._clock.seconds()
        self._groups.setdefault(group_name, {})[info.channel] = info

    def unregister_producer(self, group_name: str, channel: IChannel) -> bool:
        channels = self._groups.get(group_name)
        if channels is None or channels.pop(channel, None) is None:
            return False
        if not channels:
            del self._groups[group_name]
        return True

    def do_channel_close_event(self, channel: IChannel) -> None:
        for name in [n for n, chans in self._groups.items() if channel in chans]:
            self.unregister_producer(name, channel)

    def scan_not_active_channel(self) -> int:
        """Drop (and close) channels silent for longer than the expiry; how many were dropped."""
        expired = _expired(self._groups, self._clock.seconds() - self.expiry)
        for name, channel, info in expired:
            self.log.warn("producer {client} of {group} expired", client=info.client_id, group=name)
            self.unregister_producer(name, channel)
            _close_quietly(channel)
        return len(expired)

    def channels_of(self, group_name: str) -> list[ClientChannelInfo]:
        """The live connections of a producer group."""
        return list(self._groups.get(group_name, {}).values())

    def get_available_channel(self, group_name: str) -> IChannel | None:
        """One live connection of the group (the newest heartbeat), or None.

        A channel that says it cannot take a request now (``writable`` False: a 5.x client without
        its Telemetry stream) is passed over, as Java's ``getAvailableChannel`` skips unwritable ones.
        """
        infos = [i for i in self.channels_of(group_name) if getattr(i.channel, "writable", True)]
        return max(infos, key=lambda i: i.last_update).channel if infos else None

    def groups(self) -> list[str]:
        return list(self._groups)

    def find_channel(self, client_id: str) -> IChannel | None:
        """The newest live connection of the client ``client_id`` in any producer group (reply pushes)."""
        infos = [i for chans in self._groups.values() for i in chans.values() if i.client_id == client_id]
        return max(infos, key=lambda i: i.last_update).channel if infos else None

    def producer_table(self) -> dict[str, list[dict[str, Any]]]:
        """Every group's producers as Java's ProducerInfo (GET_ALL_PRODUCER_INFO)."""
        return {
            group: [
                {"clientId": info.client_id, "language": info.language,
                 "lastUpdateTimestamp": int(info.last_update * 1000), "remoteIP": info.channel.remote_address,
                 "version": info.version}
                for info in channels.values()
            ]
            for group, channels in sorted(self._groups.items())
        }


def _expired(
    groups: Mapping[str, Mapping[IChannel, ClientChannelInfo]], deadline: float
) -> list[tuple[str, IChannel, ClientChannelInfo]]:
    """``(group, channel, info)`` of every channel whose last heartbeat is older than ``deadline``."""
    return [
        (name, channel, info)
        for name, channels in groups.items()
        for channel, info in channels.items()
        if info.last_update < deadline
    ]


def _close_quietly(channel: IChannel) -> None:
    try:
        channel.close()
    except Exception:
        _log.failure("closing an expired channel failed", level=LogLevel.error)


@implementer(IChannelEventListener)
class ClientChannelListener:
    """Forgets a connection's consumers and producers as soon as it closes or fails."""

    def __init__(self, consumers: ConsumerManager, producers: ProducerManager) -> None:
        self._consumers = consumers
        self._producers = producers

    def on_channel_connect(self, remote_address: str, channel: IChannel) -> None:
        pass

    def on_channel_close(self, remote_address: str, channel: IChannel) -> None:
        self._consumers.do_channel_close_event(channel)
        self._producers.do_channel_close_event(channel)

    on_channel_exception = on_channel_close

    def on_channel_idle(self, remote_address: str, channel: IChannel) -> None:
        pass
