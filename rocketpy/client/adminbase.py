"""The plumbing of :class:`rocketpy.client.admin.AdminClient`: requests to the name servers and
brokers, routes, the Deferred wrapper, the errors."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime

from rocketpy.acl.signing import credentials_hooks
from rocketpy.client.admintypes import BodyError, ClusterInfo, parse_cluster_info, parse_topic_list
from rocketpy.client.api import MQClientAPI
from rocketpy.client.errors import MQBrokerError, MQClientError, NoNameServerError, RemotingError
from rocketpy.client.instance import parse_namesrv_addrs
from rocketpy.client.route import decode_topic_route, master_addresses
from rocketpy.common.message import RecordError
from rocketpy.common.route import TopicRouteData
from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand

__all__ = ["AdminBase", "NotFoundError", "deferred_method", "parse_body"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def deferred_method(method: Callable[_P, Coroutine[Any, Any, _T]]) -> Callable[_P, Deferred[_T]]:
    """An ``async def`` method as a Deferred-returning one (it never raises)."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> Deferred[_T]:
        return Deferred.fromCoroutine(method(*args, **kwargs))

    return wrapper


class NotFoundError(MQClientError):
    """A topic, group, cluster, broker or message named in an admin call does not exist."""

    def __init__(self, message: str) -> None:
        super().__init__(ResponseCode.QUERY_NOT_FOUND, message)

    def __str__(self) -> str:
        return self.message


def _ok(response: RemotingCommand, addr: str, *codes: int) -> RemotingCommand:
    if response.code not in (codes or (ResponseCode.SUCCESS,)):
        raise MQBrokerError(response.code, response.remark, addr)
    return response


def parse_body(parse: Callable[..., _T], *args: Any) -> _T:
    """``parse(*args)``, a malformed body as an MQBrokerError-like client error."""
    try:
        return parse(*args)
    except (BodyError, RecordError) as e:
        raise MQClientError(ResponseCode.SYSTEM_ERROR, str(e)) from None


class AdminBase:
    """Requests to the name servers (the first that answers) and to brokers, over one remoting client.

    :param reactor: clock and network.
    :param namesrv_addrs: ``"host:port;host:port"`` or a list; name server calls try them in order.
    :param timeout: seconds per request.
    :param remoting: a remoting client to use (one is made, and closed by :meth:`close`, if None).
    :param credentials: ``(access_key, secret_key)``: every request is signed, for brokers with ACL
        on (doc/security.md); only for the remoting client made here.
    """

    def __init__(self, reactor: IReactorTime, namesrv_addrs: str | Sequence[str], *, timeout: float = 5.0,
                 remoting: RemotingClient | None = None, credentials: Sequence[str] | None = None) -> None:
        if remoting is not None and credentials is not None:
            raise TypeError("credentials sign the requests of the remoting client made here; sign a caller's "
                            "remoting client with its rpc_hooks instead")
        self.reactor = reactor
        self.namesrv_addrs = parse_namesrv_addrs(namesrv_addrs)
        self.timeout = timeout
        self._owns_remoting = remoting is None
        self.remoting = remoting or RemotingClient(reactor, connect_timeout=min(timeout, 3.0),
                                                   rpc_hooks=credentials_hooks(credentials))
        self.api = MQClientAPI(self.remoting)

    def close(self) -> Deferred[None]:
        """Close the connections (of a remoting client this object made)."""
        if self._owns_remoting:
            return self.remoting.close()
        return succeed(None)

    # plumbing

    async def call(self, addr: str, code: int, fields: dict[str, str] | None = None, body: bytes = b"",
                   *ok: int) -> RemotingCommand:
        """One request to ``addr``; a response code outside ``ok`` (default SUCCESS) raises MQBrokerError."""
        request = RemotingCommand.request(code, fields or {}, body)
        return _ok(await self.remoting.invoke_sync(addr, request, self.timeout), addr, *ok)

    async def call_namesrv(self, code: int, fields: dict[str, str] | None = None, body: bytes = b"",
                           *ok: int) -> RemotingCommand:
        """One request to the first name server that can be reached."""
        if not self.namesrv_addrs:
            raise NoNameServerError()
        error: RemotingError | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self.call(addr, code, fields, body, *ok)
            except RemotingError as e:
                error = e
        assert error is not None
        raise error

    async def _each_namesrv(self, code: int, fields: dict[str, str], body: bytes = b"") -> None:
        if not self.namesrv_addrs:
            raise NoNameServerError()
        for addr in self.namesrv_addrs:
            await self.call(addr, code, fields, body)

    # name server

    @deferred_method
    async def cluster_info(self) -> ClusterInfo:
        response = await self.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        return parse_body(parse_cluster_info, response.body)

    @deferred_method
    async def topic_list(self, cluster: str | None = None) -> list[str]:
        """Every topic the name server knows, or those of ``cluster``."""
        if cluster is None:
            response = await self.call_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        else:
            await self._cluster_addresses(cluster)
            response = await self.call_namesrv(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})
        return parse_body(parse_topic_list, response.body)

    @deferred_method
    async def topic_route(self, topic: str) -> TopicRouteData:
        """:raises NotFoundError: when no name server routes ``topic``."""
        return await self._route(topic)

    async def _route(self, topic: str, what: str | None = None) -> TopicRouteData:
        response = await self.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, b"",
                                           ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NotFoundError(what or f"topic {topic!r} does not exist")
        return parse_body(decode_topic_route, response.body)

    async def _masters(self, topic: str, what: str | None = None) -> dict[str, str]:
        """Broker name → master address of the brokers routing ``topic``."""
        masters = master_addresses(await self._route(topic, what))
        if not masters:
            raise NotFoundError(f"no master broker serves topic {topic!r}")
        return dict(sorted(masters.items()))

    async def _group_masters(self, group: str) -> dict[str, str]:
        return await self._masters(RETRY_GROUP_TOPIC_PREFIX + group, f"consumer group {group!r} does not exist")

    async def _cluster_addresses(self, cluster: str, masters_only: bool = True) -> list[str]:
        info = await self.cluster_info()
        if cluster not in info.clusters:
            raise NotFoundError(f"cluster {cluster!r} does not exist")
        return info.addresses(cluster, masters_only)

    @deferred_method
    async def cluster_addresses(self, cluster: str, masters_only: bool = True) -> list[str]:
        """The broker addresses of ``cluster``; :raises NotFoundError: for an unknown cluster."""
        return await self._cluster_addresses(cluster, masters_only)

