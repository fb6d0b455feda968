"""The other brokers of a topic, for a 5.x client that reached this one (doc/grpc.md, "Clusters").

Each broker's endpoint serves its own broker's queues, as RocketMQ 5's proxy in local mode, and
answers QueryRoute and QueryAssignment with every master of the topic: the route comes from the
name servers (GET_ROUTEINFO_BY_TOPIC), each other broker's gRPC endpoint from the name servers'
KV config, where every endpoint publishes its own (namespace :data:`GRPC_ENDPOINT_NAMESPACE`, key
the broker's remoting address as it registers, value ``host:port``). A broker that published
nothing gets the Java proxy's rule: its remoting host and this endpoint's port.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet.defer import Deferred, FirstError, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from rocketpy.acl.addresses import host_of
from rocketpy.broker.outer import Invoker
from rocketpy.common.fastjson import BodyError, loads_tolerant
from rocketpy.common.route import MASTER_ID, TopicRouteData, decode_topic_route
from rocketpy.grpc.route import RouteBroker, endpoints_of, master
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.util.ratelimit import EveryFewSeconds

#: The name server KV namespace of the brokers' gRPC endpoints: broker address → ``host:port``.
GRPC_ENDPOINT_NAMESPACE = "ROCKETPY_GRPC_ENDPOINT"
#: seconds between publications (a restarted name server has it again within one broker registration period)
PUBLISH_PERIOD_S = 30.0
#: seconds a name server has to answer a lookup or a publication
CALL_TIMEOUT_S = 3.0
#: seconds a topic's brokers are reused before the name servers are asked again
FRESH_S = 5.0


def parse_endpoint(text: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port`` too) → ``(host, port)``; None when it is not one."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def format_endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def peers_of(route: TopicRouteData, published: Mapping[str, str], own_name: str,
             default_port: int) -> list[RouteBroker]:
    """The masters of ``route`` but ``own_name``, by name, each at its published endpoint, else at
    its remoting host and ``default_port`` (``LocalTopicRouteService``). Brokers without a master
    are left out, as slaves are: the 5.x clients use masters only."""
    masters = {b.broker_name: b.broker_addrs[MASTER_ID] for b in route.broker_datas if MASTER_ID in b.broker_addrs}
    peers = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        address = masters.get(q.broker_name)
        if q.broker_name == own_name or address is None:
            continue
        host, port = parse_endpoint(published.get(address, "")) or (host_of(address), default_port)
        peers.append(RouteBroker(master(q.broker_name, endpoints_of(host, port)), q.perm, q.read_queue_nums,
                                 q.write_queue_nums))
    return peers


def decode_kv_table(body: bytes) -> dict[str, str]:
    """A GET_KVLIST_BY_NAMESPACE body (``{"table":{…}}``).

    :raises BodyError: when it is not one.
    """
    obj = loads_tolerant(body)
    table = obj.get("table") if isinstance(obj, dict) else None
    if not isinstance(table, dict):
        raise BodyError("KV list body has no table object")
    return {str(k): str(v) for k, v in table.items()}


class NameServerError(Exception):
    """No name server answered."""


class ClusterView:
    """This endpoint's view of the other brokers, through the broker's name servers.

    :param client: the broker's remoting client.
    :param namesrv_addrs: the name server addresses (read at each call: they may change).
    :param broker_name: this broker; the route's entry of it is left to the local topic table ("" for a
        slave, which serves no queues of its own to the 5.x clients: its master is one of the peers).
    :param broker_address: this broker's remoting address, as it registers: the key it publishes under.
    :param advertised: ``--grpc-advertised-address``; None publishes the broker's host with the
        endpoint's port.
    """

    log = Logger()

    def __init__(self, clock: IReactorTime, client: Invoker, namesrv_addrs: Callable[[], list[str]],
                 broker_name: str, broker_address: str, advertised: tuple[str, int] | None = None) -> None:
        self._clock = clock
        self._client = client
        self._namesrv_addrs = namesrv_addrs
        self._broker_name = broker_name
        self._broker_address = broker_address
        self._advertised = advertised
        #: the port this endpoint listens on, once it does
        self.port = 0
        self._known: dict[str, tuple[float, list[RouteBroker]]] = {}
        #: the name server that answered last: asked first next time
        self._answered = ""
        self._publisher = LoopingCall(self.publish)
        self._publisher.clock = clock
        self._warned = EveryFewSeconds(clock, 60.0)

    def own_endpoint(self) -> tuple[str, int]:
        """What this endpoint publishes: the advertised address, else the broker's host and the port."""
        return self._advertised or (host_of(self._broker_address), self.port)

    def listening(self, port: int) -> None:
        """The endpoint listens on ``port``: publish it now and every :data:`PUBLISH_PERIOD_S`."""
        self.port = port
        if not self._publisher.running:
            self._publisher.start(PUBLISH_PERIOD_S)

    async def stop(self) -> None:
        """Stop publishing and take this endpoint out of the name servers."""
        if not self._publisher.running:
            return
        self._publisher.stop()
        await self._to_all(RequestCode.DELETE_KV_CONFIG, {"namespace": GRPC_ENDPOINT_NAMESPACE,
                                                          "key": self._broker_address})

    def publish(self) -> Deferred[None]:
        """PUT_KV_CONFIG of this endpoint to every name server; failures are logged."""
        value = format_endpoint(*self.own_endpoint())
        return Deferred.fromCoroutine(self._to_all(RequestCode.PUT_KV_CONFIG, {
            "namespace": GRPC_ENDPOINT_NAMESPACE, "key": self._broker_address, "value": value}))

    async def _to_all(self, code: int, fields: dict[str, str]) -> None:
        for address in self._namesrv_addrs():
            try:
                response = await self._client.invoke_sync(address, RemotingCommand.request(code, dict(fields)),
                                                          CALL_TIMEOUT_S)
                failed = None if response.code == ResponseCode.SUCCESS else f"code {response.code} {response.remark}"
            except Exception as e:
                failed = str(e) or type(e).__name__
            if failed is not None and self._warned.admit((address, code)) is not None:
                self.log.warn("{what} of the gRPC endpoint at name server {address} failed: {why}",
                              what=RequestCode(code).name, address=address, why=failed)

    def peers(self, topic: str) -> Deferred[list[RouteBroker]]:
        """The other masters of ``topic`` with their endpoints; none when no name server knows the
        topic. While the name servers cannot be reached, the last answer (or none)."""
        return Deferred.fromCoroutine(self._peers(topic))

    async def _peers(self, topic: str) -> list[RouteBroker]:
        if not self._namesrv_addrs():  # a broker without name servers is alone
            return []
        now = self._clock.seconds()
        known = self._known.get(topic)
        if known is not None and now - known[0] < FRESH_S:
            return known[1]
        try:
            route, published = await _both(self._route(topic), self._published())
        except Exception as e:
            if self._warned.admit("lookup") is not None:
                self.log.warn("gRPC route of {topic}: no name server answered ({why}); answering with "
                              "{what}", topic=topic, why=e, what="the last route" if known else "this broker only")
            return [] if known is None else known[1]
        if route is None:
            self._known.pop(topic, None)
            return []
        peers = peers_of(route, published, self._broker_name, self._advertised[1] if self._advertised else self.port)
        self._known[topic] = (now, peers)
        return peers

    async def _route(self, topic: str) -> TopicRouteData | None:
        response = await self._ask(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return decode_topic_route(response.body) if response.code == ResponseCode.SUCCESS else None

    async def _published(self) -> dict[str, str]:
        response = await self._ask(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": GRPC_ENDPOINT_NAMESPACE})
        return decode_kv_table(response.body) if response.code == ResponseCode.SUCCESS else {}

    async def _ask(self, code: int, fields: dict[str, str]) -> RemotingCommand:
        """The first answer to be had, one name server after the other, the last one that answered first.

        :raises NameServerError: none answered.
        """
        addresses = self._namesrv_addrs()
        errors = []
        for address in sorted(addresses, key=lambda a: a != self._answered):
            try:
                response = await self._client.invoke_sync(address, RemotingCommand.request(code, dict(fields)),
                                                          CALL_TIMEOUT_S)
            except Exception as e:
                errors.append(f"{address}: {e or type(e).__name__}")
                continue
            self._answered = address
            return response
        raise NameServerError("; ".join(errors) or "no name server configured")


async def _both(first: Any, second: Any) -> tuple[Any, Any]:
    """Await two coroutines at once; the first failure is raised as it is."""
    try:
        a, b = await gatherResults([Deferred.fromCoroutine(first), Deferred.fromCoroutine(second)],
                                   consumeErrors=True)
    except FirstError as e:
        e.subFailure.raiseException()
    return a, b
