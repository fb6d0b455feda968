"""Java's ``MQClientInstance``: what producers and consumers of one client share.

One remoting client, the name server list, the route cache and the broker
address table, the 30 s route refresh and the 30 s heartbeat. Producers and
consumers register as *members*; the instance asks them which topics to
refresh, tells them about new routes, and builds the heartbeat from them.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel
from zope.interface import implementer

from rocketpy.acl.signing import credentials_hooks
from rocketpy.client.api import IRemotingClient, MQClientAPI
from rocketpy.client.direct import ConsumeDirectlyProcessor
from rocketpy.client.errors import MQBrokerError, MQError, NoNameServerError, RemotingError
from rocketpy.client.message import local_ip
from rocketpy.client.reply import ReplyProcessor, RequestFutures
from rocketpy.client.resetoffset import ResetOffsetProcessor
from rocketpy.client.route import with_default_queue_nums
from rocketpy.client.runninginfo import (
    CLIENT_VERSION_DESC,
    PROP_CLIENT_VERSION,
    PROP_NAMESERVER_ADDR,
    ConsumerRunningInfo,
    RunningInfoProcessor,
    RunningInfoSource,
)
from rocketpy.common.headers import get_str
from rocketpy.common.message import MessageExt
from rocketpy.common.route import MASTER_ID, MessageQueue, TopicRouteData
from rocketpy.common.topic import TBW102
from rocketpy.interfaces import IRequestProcessor, IRPCHook
from rocketpy.remoting.codes import RequestCode, SerializeType
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.tls import ClientTLS, client_tls

_instance_numbers = itertools.count(1)


def default_client_id(instance_name: str | None = None) -> str:
    """``ip@pid`` for the first client of the process, ``ip@pid#n`` for the n-th after it.

    Distinct ids keep two consumers of one group in one process from being
    given the same queues.
    """
    n = next(_instance_numbers)
    name = instance_name or (str(os.getpid()) if n == 1 else f"{os.getpid()}#{n}")
    return f"{local_ip()}@{name}"


def parse_namesrv_addrs(addrs: str | Sequence[str]) -> list[str]:
    """``"a:9876;b:9876"`` or a list of addresses."""
    items = addrs.split(";") if isinstance(addrs, str) else list(addrs)
    return [a.strip() for a in items if a.strip()]


def shared_or_new(
    reactor: IReactorTime | None,
    namesrv_addrs: str | Sequence[str],
    remoting: IRemotingClient | None,
    instance: ClientInstance | None,
    **kwargs: Any,
) -> tuple[IReactorTime, ClientInstance]:
    """The reactor and ``instance``, or a new instance with ``kwargs``.

    The reactor is injected, never the global one: pass it, or an ``instance`` (whose
    reactor is then used). Code without a reactor uses :mod:`rocketpy.blocking`.
    """
    if reactor is None:
        if instance is None:
            raise TypeError("pass the reactor (or a ClientInstance); without a reactor use rocketpy.blocking")
        reactor = instance.reactor
    return reactor, instance or ClientInstance(reactor, namesrv_addrs, remoting, **kwargs)


class JoiningMember:
    """Lifecycle of a member that only joins and leaves its instance (producer, pull consumer)."""

    instance: ClientInstance
    running = False

    def start(self) -> Deferred[None]:
        """Join the client instance (route refresh and heartbeat every 30 s)."""
        if not self.running:
            self.running = True
            self.instance.register(self)  # type: ignore[arg-type]
        return succeed(None)

    def shutdown(self) -> Deferred[None]:
        """Unregister from the brokers; the last member also closes the connections."""
        self.running = False
        return self.instance.unregister(self)  # type: ignore[arg-type]

    def on_consumer_ids_changed(self, group: str) -> None:
        pass


class Member(Protocol):
    """A producer or consumer registered with a :class:`ClientInstance`."""

    def topics(self) -> Iterable[str]:
        """Topics whose route the instance should keep fresh."""

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        """A new route for ``topic`` arrived."""

    def heartbeat_data(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """This member's ``(producerDataSet, consumerDataSet)`` entries."""

    def on_consumer_ids_changed(self, group: str) -> None:
        """The broker says the consumers of ``group`` changed."""

    def unregister_groups(self) -> tuple[str | None, str | None]:
        """``(producer group, consumer group)`` to unregister on shutdown."""


@implementer(IRequestProcessor)
class _NotifyProcessor:
    """NOTIFY_CONSUMER_IDS_CHANGED from a broker: rebalance now (no reply)."""

    def __init__(self, instance: ClientInstance) -> None:
        self._instance = instance

    def process_request(self, channel: object, request: RemotingCommand) -> None:
        group = get_str(request.ext_fields, "consumerGroup", "")
        for member in list(self._instance.members):
            member.on_consumer_ids_changed(group)

    def reject_request(self) -> bool:
        return False


class ClientInstance:
    """Routes, broker addresses, heartbeats and the remoting client of a client.

    :ivar client_id: sent in heartbeats; the broker's key for this client.
    :ivar api: the request builders over :attr:`remoting`.
    """

    log = Logger()

    def __init__(
        self,
        reactor: IReactorTime,
        namesrv_addrs: str | Sequence[str],
        remoting: IRemotingClient | None = None,
        *,
        client_id: str | None = None,
        instance_name: str | None = None,
        rpc_hooks: Iterable[IRPCHook] = (),
        serialize_type: int = SerializeType.JSON,
        poll_interval: float = 30.0,
        heartbeat_interval: float = 30.0,
        timeout: float = 3.0,
        credentials: Sequence[str] | None = None,
        tls: bool | ClientTLS = False,
        tls_ca: str | None = None,
    ) -> None:
        """
        :param remoting: the remoting client; by default one is made (and closed
            on shutdown) with ``rpc_hooks``, ``serialize_type``, ``credentials`` and ``tls``.
        :param credentials: ``(access_key, secret_key[, security_token])``: every request is
            signed for brokers with ACL on (doc/security.md).
        :param tls: connect with TLS, trusting ``tls_ca`` (a PEM file; default the platform's
            trust store), or a :class:`~rocketpy.remoting.tls.ClientTLS`.
        :param timeout: seconds for name server, heartbeat and admin calls.
        """
        self.reactor = reactor
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addrs)
        self._owns_remoting = remoting is None
        if remoting is not None and (credentials or tls):
            raise TypeError("credentials and tls configure the remoting client made here; "
                            "with remoting_client=, give that client the hooks and TLS instead")
        if remoting is None:
            from rocketpy.remoting.client import RemotingClient

            remoting = RemotingClient(reactor, rpc_hooks=(*rpc_hooks, *credentials_hooks(credentials)),
                                      serialize_type=serialize_type, tls=client_tls(tls, tls_ca))
        self.remoting = remoting
        self.api = MQClientAPI(remoting)
        self.client_id = client_id or default_client_id(instance_name)
        self.timeout = timeout
        self.routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.members: list[Member] = []
        self._ns_index = 0
        self._poll_interval, self._heartbeat_interval = poll_interval, heartbeat_interval
        self._route_loop = LoopingCall(self._refresh_routes)
        self._route_loop.clock = reactor
        self._heartbeat_loop = LoopingCall(self.send_heartbeat)
        self._heartbeat_loop.clock = reactor
        self._loops: list[Deferred[Any]] = []
        self._heartbeat_call: IDelayedCall | None = None
        #: the broker addresses that acknowledged a heartbeat naming every current member's group
        self._announced: set[str] = set()
        self._processor_registered = False
        #: requests waiting for their reply (``Producer.request``)
        self.reply_futures = RequestFutures()

    # members and lifecycle

    def register(self, member: Member) -> None:
        """Add a member; the first one starts the timers."""
        if member in self.members:
            return
        self.members.append(member)
        self._announced.clear()  # the brokers have not heard of this member's group yet
        if not self._processor_registered:
            self.remoting.register_processor(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, _NotifyProcessor(self))
            self.remoting.register_processor(
                RequestCode.GET_CONSUMER_RUNNING_INFO, RunningInfoProcessor(self.consumer_running_info)
            )
            self.remoting.register_processor(
                RequestCode.CONSUME_MESSAGE_DIRECTLY, ConsumeDirectlyProcessor(self.consume_message_directly)
            )
            self.remoting.register_processor(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ResetOffsetProcessor(self.reset_offset))
            self.remoting.register_processor(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT,
                                             ReplyProcessor(self.reply_futures, self.reactor))
            self._processor_registered = True
        if not self._route_loop.running:
            self._loops = [
                self._route_loop.start(self._poll_interval, now=False),
                self._heartbeat_loop.start(self._heartbeat_interval, now=False),
            ]

    def unregister(self, member: Member) -> Deferred[None]:
        """Remove a member, unregister its groups from the brokers; the last one stops everything."""
        return Deferred.fromCoroutine(self._unregister(member))

    async def _unregister(self, member: Member) -> None:
        if member not in self.members:
            return
        self.members.remove(member)
        producer_group, consumer_group = member.unregister_groups()
        for addr in self._all_broker_addrs(masters_only=False):
            try:
                await self.api.unregister_client(addr, self.client_id, producer_group, consumer_group, self.timeout)
            except (RemotingError, MQError) as e:
                self.log.info("unregister from {addr} failed: {error}", addr=addr, error=e)
        if self.members:
            return
        for loop in (self._route_loop, self._heartbeat_loop):
            if loop.running:
                loop.stop()
        if self._heartbeat_call is not None and self._heartbeat_call.active():
            self._heartbeat_call.cancel()
        self._heartbeat_call = None
        for d in self._loops:
            await d
        self._loops = []
        if self._owns_remoting:
            await self.remoting.close()

    def consumer_running_info(self, group: str) -> ConsumerRunningInfo | None:
        """The running info of this client's consumer of ``group`` (None if it has none),
        with the name servers and the client version added (Java ``MQClientInstance``)."""
        for member in self.members:
            if isinstance(member, RunningInfoSource) and member.group == group:
                info = member.running_info()
                info.properties[PROP_NAMESERVER_ADDR] = "".join(addr + ";" for addr in self.namesrv_addrs)
                info.properties[PROP_CLIENT_VERSION] = CLIENT_VERSION_DESC
                return info
        return None

    def consume_message_directly(self, group: str, msg: MessageExt, broker_name: str) -> Deferred[dict[str, Any]] | None:
        """Have this client's push consumer of ``group`` consume ``msg`` now (None if it has none)."""
        consume = self._consumer_method(group, "consume_directly")
        return None if consume is None else consume(msg, broker_name)

    def reset_offset(self, topic: str, group: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: move this client's push consumer of ``group`` on ``topic``."""
        reset = self._consumer_method(group, "reset_offsets")
        if reset is None:
            self.log.info("[reset-offset] no consumer of group {group} here", group=group)
        else:
            reset(topic, offsets)

    def _consumer_method(self, group: str, name: str) -> Any:
        """Method ``name`` of this client's member of consumer group ``group`` that has one, or None."""
        for member in self.members:
            method = getattr(member, name, None)
            if method is not None and getattr(member, "group", None) == group:
                return method
        return None

    # name server and routes

    async def fetch_route(self, topic: str) -> TopicRouteData | None:
        """Ask the name servers in turn (from the last one that answered) for a route.

        :raises NoNameServerError: with no name server configured.
        :raises RemotingError: the last name server's error when none answered.
        """
        if not self.namesrv_addrs:
            raise NoNameServerError()
        error: Exception | None = None
        n = len(self.namesrv_addrs)
        for i in range(n):
            addr = self.namesrv_addrs[(self._ns_index + i) % n]
            try:
                route = await self.api.get_topic_route(addr, topic, self.timeout)
            except (RemotingError, MQBrokerError) as e:
                error = e
                continue
            self._ns_index = (self._ns_index + i) % n
            return route
        assert error is not None
        raise error

    async def update_topic_route(
        self, topic: str, use_default: bool = False, default_queue_nums: int = 4
    ) -> TopicRouteData | None:
        """Fetch ``topic``'s route, store it and tell the members; None if no route.

        :param use_default: when the topic has no route, use the TBW102 template's
            brokers with ``min(default_queue_nums, their queues)`` queues each.
        """
        route = await self.fetch_route(topic)
        if route is None and use_default:
            template = await self.fetch_route(TBW102)
            route = with_default_queue_nums(template, default_queue_nums) if template else None
        if route is None:
            return None
        self.routes[topic] = route
        new_address = False
        for broker in route.broker_datas:
            known = self.broker_addrs.get(broker.broker_name, {})
            new_address = new_address or not set(broker.broker_addrs.values()) <= set(known.values())
            self.broker_addrs[broker.broker_name] = dict(broker.broker_addrs)
        for member in list(self.members):
            member.on_route(topic, route)
        if new_address:
            self._heartbeat_soon()
        return route

    def _heartbeat_soon(self) -> None:
        """A broker just learnt of: heartbeat on the next reactor turn rather than at the next
        30 s tick, so it knows this client's groups from its first request (e.g. for
        GET_PRODUCER_CONNECTION_LIST and consumer-id notifications)."""
        if self._heartbeat_call is None and self._heartbeat_loop.running:
            self._heartbeat_call = self.reactor.callLater(0, self._heartbeat_now)

    def _heartbeat_now(self) -> None:
        self._heartbeat_call = None
        Deferred.fromCoroutine(self.announce())  # it logs its own errors

    async def announce(self) -> None:
        """Heartbeat now unless every known master already has our groups: for a broker that must
        reach us at once (a reply pushed to the requester, a transaction check-back)."""
        if not set(self._all_broker_addrs(masters_only=True)) <= self._announced:
            await self.send_heartbeat()

    async def _refresh_routes(self) -> None:
        topics = {t for m in self.members for t in m.topics()}
        for topic in sorted(topics):
            try:
                await self.update_topic_route(topic)
            except (RemotingError, MQError) as e:
                self.log.warn("route refresh of {topic} failed: {error}", topic=topic, error=e)
            except Exception:  # an escaping exception would end the LoopingCall
                self.log.failure("route refresh of {topic} failed", level=LogLevel.error, topic=topic)
        live = {b.broker_name for r in self.routes.values() for b in r.broker_datas}
        for name in set(self.broker_addrs) - live:  # offline brokers
            del self.broker_addrs[name]

    # brokers

    def master_address(self, broker_name: str) -> str | None:
        """The master address of ``broker_name``, if known."""
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def broker_address(self, broker_name: str, broker_id: int = MASTER_ID) -> str | None:
        """The address of ``broker_id`` of ``broker_name``, else of any of its brokers."""
        addrs = self.broker_addrs.get(broker_name) or {}
        if broker_id in addrs:
            return addrs[broker_id]
        return next((addrs[i] for i in sorted(addrs)), None)

    def _all_broker_addrs(self, masters_only: bool) -> list[str]:
        return [
            addr
            for name in sorted(self.broker_addrs)
            for broker_id, addr in sorted(self.broker_addrs[name].items())
            if broker_id == MASTER_ID or not masters_only
        ]

    # heartbeat

    def heartbeat_body(self) -> dict[str, Any]:
        producers: list[dict[str, Any]] = []
        consumers: list[dict[str, Any]] = []
        for member in self.members:
            p, c = member.heartbeat_data()
            producers += p
            consumers += c
        return {"clientID": self.client_id, "consumerDataSet": consumers, "producerDataSet": producers}

    async def send_heartbeat(self) -> None:
        """HEART_BEAT to every master (and, with consumers, every slave); errors are logged."""
        body = self.heartbeat_body()
        if not body["consumerDataSet"] and not body["producerDataSet"]:
            return
        for addr in self._all_broker_addrs(masters_only=not body["consumerDataSet"]):
            try:
                await self.api.heartbeat(addr, body, self.timeout)
                self._announced.add(addr)
            except (RemotingError, MQError) as e:
                self.log.warn("heartbeat to {addr} failed: {error}", addr=addr, error=e)
            except Exception:
                self.log.failure("heartbeat to {addr} failed", level=LogLevel.error, addr=addr)
