"""What both consumers share, and the pull consumer.

:class:`ConsumerBase` joins a :class:`ClientInstance`, keeps the readable
queues of the topics it reads, resolves broker addresses and makes the
offset and pull calls. :class:`PullConsumer` exposes them directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Any, cast

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from rocketpy.client.api import Mode
from rocketpy.client.errors import BrokerNotFoundError, MQClientError, MQError, NoNameServerError, NoRouteError, RemotingError
from rocketpy.client.instance import ClientInstance, JoiningMember, shared_or_new
from rocketpy.client.results import PullResult, PullStatus
from rocketpy.client.route import subscribe_queues
from rocketpy.client.runninginfo import PROP_CONSUME_TYPE, PROP_CONSUMER_START_TIMESTAMP, ConsumerRunningInfo
from rocketpy.client.subscription import Selector, SubscriptionData, build_subscription, prepare_pulled
from rocketpy.common.compression import DecompressionError, inflate_body
from rocketpy.common.message import MessageSysFlag
from rocketpy.common.route import MASTER_ID, MessageQueue, TopicRouteData
from rocketpy.interfaces import IRPCHook
from rocketpy.remoting.codes import SerializeType
from rocketpy.remoting.errors import RemotingConnectError
from rocketpy.remoting.tls import ClientTLS

#: Pull sysFlag bits (``PullSysFlag``).
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4


def _pull_fields(group: str, mq: MessageQueue, sub: SubscriptionData, offset: int, max_nums: int, sys_flag: int,
                 commit_offset: int, suspend: float) -> dict[str, str]:
    """A PULL_MESSAGE header."""
    fields = {
        "consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id), "queueOffset": str(offset),
        "maxMsgNums": str(max_nums), "sysFlag": str(sys_flag), "commitOffset": str(commit_offset),
        "suspendTimeoutMillis": str(int(suspend * 1000)), "subscription": sub.sub_string,
        "subVersion": str(sub.sub_version),
    }
    if sub.expression_type is not None:
        fields["expressionType"] = sub.expression_type
    return fields


class MessageModel(Enum):
    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(Enum):
    """Where a group without a stored offset starts."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ConsumerBase:
    """A member of a :class:`ClientInstance` that reads queues of some topics."""

    log = Logger()
    consume_type = "CONSUME_ACTIVELY"

    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str] = (),
        reactor: IReactorTime | None = None,
        remoting_client: Any = None,
        *,
        instance: ClientInstance | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        client_id: str | None = None,
        rpc_hooks: Iterable[IRPCHook] = (),
        serialize_type: int = SerializeType.JSON,
        timeout: float = 3.0,
        credentials: Sequence[str] | None = None,
        tls: bool | ClientTLS = False,
        tls_ca: str | None = None,
    ) -> None:
        """``credentials``, ``tls`` and ``tls_ca``: :class:`ClientInstance`'s (doc/security.md)."""
        self.group = group
        self.clock, self.instance = shared_or_new(
            reactor, namesrv_addrs, remoting_client, instance, client_id=client_id, rpc_hooks=rpc_hooks,
            serialize_type=serialize_type, timeout=timeout, credentials=credentials, tls=tls, tls_ca=tls_ca,
        )
        self.api = self.instance.api
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.timeout = timeout
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.subscribe_info: dict[str, list[MessageQueue]] = {}
        self.running = False
        #: When the consumer was last started (seconds on the clock; 0 = never).
        self.start_timestamp = 0.0

    # ClientInstance member

    def topics(self) -> Iterable[str]:
        return set(self.subscribe_info) | set(self.subscriptions)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        if topic in self.subscribe_info or topic in self.subscriptions:
            self.subscribe_info[topic] = subscribe_queues(topic, route)

    def heartbeat_data(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        data = {
            "consumeFromWhere": self.consume_from_where.value,
            "consumeType": self.consume_type,
            "groupName": self.group,
            "messageModel": self.message_model.value,
            "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()],
            "unitMode": False,
        }
        return [], [data]

    def unregister_groups(self) -> tuple[str | None, str | None]:
        return None, self.group

    def running_info(self) -> ConsumerRunningInfo:
        """Settings and subscriptions for GET_CONSUMER_RUNNING_INFO (Java property names)."""
        properties = {
            "consumerGroup": self.group,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            PROP_CONSUME_TYPE: self.consume_type,
            PROP_CONSUMER_START_TIMESTAMP: str(int(self.start_timestamp * 1000)),
        }
        return ConsumerRunningInfo(properties, list(self.subscriptions.values()))

    # shared calls

    def check_running(self) -> None:
        if not self.running:
            raise MQClientError(-1, f"consumer {self.group!r} is not started")

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """Refresh ``topic``'s route and return its readable queues.

        :raises NoRouteError: when no name server knows the topic.
        """
        self.subscribe_info.setdefault(topic, [])
        try:
            route = await self.instance.update_topic_route(topic)
        except NoNameServerError:
            raise
        except (RemotingError, MQError) as e:
            raise NoRouteError(topic, f"name server: {e}") from e
        if route is None or not self.subscribe_info.get(topic):
            raise NoRouteError(topic)
        return list(self.subscribe_info[topic])

    async def broker_addr(self, mq: MessageQueue, broker_id: int = MASTER_ID, only_this: bool = True) -> str:
        """The address of a broker of ``mq`` (refreshing the route once if unknown)."""
        for attempt in range(2):
            if only_this:
                addr = self.instance.broker_addrs.get(mq.broker_name, {}).get(broker_id)
            else:
                addr = self.instance.broker_address(mq.broker_name, broker_id)
            if addr is not None:
                return addr
            if attempt == 0:
                try:
                    await self.instance.update_topic_route(mq.topic)
                except (RemotingError, MQError) as e:
                    self.log.info("route refresh for {topic} failed: {error}", topic=mq.topic, error=e)
        raise BrokerNotFoundError(mq.broker_name)

    async def pull_once(
        self, mq: MessageQueue, sub: SubscriptionData, offset: int, max_nums: int, *, sys_flag: int,
        commit_offset: int = 0, suspend: float, timeout: float, broker_id: int = MASTER_ID,
    ) -> PullResult:
        """One PULL_MESSAGE; bodies inflated, messages re-filtered by tag.

        :param suspend: seconds the broker may hold the request (with the suspend flag).
        """
        addr = await self.broker_addr(mq, broker_id, only_this=False)
        if addr != self.instance.master_address(mq.broker_name):
            sys_flag &= ~PULL_COMMIT_OFFSET  # only masters store offsets
        try:
            return await self._pull_from(addr, mq, sub, offset, max_nums, sys_flag, commit_offset, suspend, timeout)
        except RemotingConnectError as e:
            return await self._pull_elsewhere(e, addr, mq, sub, offset, max_nums, sys_flag, commit_offset, suspend,
                                              timeout)

    async def _pull_elsewhere(
        self, error: RemotingConnectError, addr: str, mq: MessageQueue, sub: SubscriptionData, offset: int,
        max_nums: int, sys_flag: int, commit_offset: int, suspend: float, timeout: float,
    ) -> PullResult:
        """The pull ``addr`` could not take, from another broker of ``mq`` (else ``error``)."""
        retry = await self._other_broker(mq, addr)
        if retry is None:
            raise error
        self.log.info("{addr} unreachable: pulling {mq} from {retry}", addr=addr, mq=mq, retry=retry)
        sys_flag &= ~PULL_COMMIT_OFFSET
        return await self._pull_from(retry, mq, sub, offset, max_nums, sys_flag, commit_offset, suspend, timeout)

    async def _other_broker(self, mq: MessageQueue, dead: str) -> str | None:
        """Another broker of ``mq``'s name than ``dead`` (a master down: its slave), from a fresh
        route or, when the name server cannot be asked, from the known one."""
        try:
            await self.instance.update_topic_route(mq.topic)
        except (RemotingError, MQError) as e:
            self.log.info("route refresh for {topic} failed: {error}", topic=mq.topic, error=e)
        addrs = self.instance.broker_addrs.get(mq.broker_name) or {}
        return next((a for _, a in sorted(addrs.items()) if a != dead), None)

    async def _pull_from(
        self, addr: str, mq: MessageQueue, sub: SubscriptionData, offset: int, max_nums: int, sys_flag: int,
        commit_offset: int, suspend: float, timeout: float,
    ) -> PullResult:
        fields = _pull_fields(self.group, mq, sub, offset, max_nums, sys_flag, commit_offset, suspend)
        return self._pulled(await self.api.pull_message(addr, fields, Mode.ASYNC, timeout), mq, sub)

    def _pulled(self, result: PullResult, mq: MessageQueue, sub: SubscriptionData) -> PullResult:
        """A pull's messages inflated, re-filtered by tag, with their queue's offsets."""
        if result.status is PullStatus.FOUND:
            for msg in result.messages:
                if msg.sys_flag & MessageSysFlag.COMPRESSED:
                    try:
                        inflate_body(msg)
                    except DecompressionError as e:
                        self.log.warn("message at {offset} of {mq} left compressed: {error}",
                                      offset=msg.queue_offset, mq=mq, error=e)
            result.messages = prepare_pulled(result.messages, sub)
        return result

    async def query_offset(self, mq: MessageQueue) -> int:
        """The group's offset of ``mq`` stored on the broker; -1 if none."""
        addr = await self.broker_addr(mq, only_this=False)  # a slave while the master is down
        return await self.api.query_consumer_offset(addr, self.group, mq, self.timeout)

    async def update_offset(self, mq: MessageQueue, offset: int, oneway: bool = False) -> None:
        addr = await self.broker_addr(mq, only_this=False)
        await self.api.update_consumer_offset(addr, self.group, mq, offset, self.timeout, oneway)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self.api.get_max_offset(await self.broker_addr(mq), mq, self.timeout)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self.api.get_min_offset(await self.broker_addr(mq), mq, self.timeout)

    async def search_offset(self, mq: MessageQueue, timestamp: float) -> int:
        """The first offset stored at or after ``timestamp`` (seconds)."""
        return await self.api.search_offset(await self.broker_addr(mq), mq, int(timestamp * 1000), self.timeout)


class PullConsumer(ConsumerBase, JoiningMember):
    """Pulls from queues the caller picks, at offsets the caller keeps."""

    def start(self) -> Deferred[None]:
        """Join the client instance (route refresh and heartbeat every 30 s)."""
        if not self.running:
            self.start_timestamp = self.clock.seconds()
        return JoiningMember.start(self)

    def fetch_subscribe_queues(self, topic: str) -> Deferred[list[MessageQueue]]:
        """The readable queues of ``topic``, sorted, from a fresh route."""
        return Deferred.fromCoroutine(self.fetch_queues(topic))

    def pull(
        self, queue: MessageQueue, expression: Selector, offset: int, max_nums: int = 32,
        timeout: float = 10.0, block: bool = False,
    ) -> Deferred[PullResult]:
        """Read up to ``max_nums`` messages from ``offset`` of ``queue``.

        :param expression: ``"*"`` or ``"TagA || TagB"`` (the broker filters by tag hash, the
            client again by tag string), or a ``MessageSelector`` (``MessageSelector.by_sql(…)``:
            the broker filters by the message properties).
        :param block: let the broker hold the request up to 20 s for new messages
            (give a ``timeout`` above that).
        """
        addr = self.instance.master_address(queue.broker_name) if self.running else None
        if addr is None:  # not started, or the route to look up first
            return Deferred.fromCoroutine(self._pull(queue, expression, offset, max_nums, timeout, block))
        # the usual pull, as _pull would make it, without its coroutines
        flags = PULL_SUBSCRIPTION | (PULL_SUSPEND if block else 0)
        try:
            sub = build_subscription(queue.topic, expression, 0)
            fields = _pull_fields(self.group, queue, sub, offset, max_nums, flags, 0, 20.0)
        except Exception:
            return fail()
        d = self.api.pull_message_deferred(addr, fields, timeout).addCallback(self._pulled, queue, sub)
        return d.addErrback(self._pull_failed, addr, queue, sub, offset, max_nums, flags, timeout)

    def _pull_failed(self, failure: Failure, addr: str, queue: MessageQueue, sub: SubscriptionData, offset: int,
                     max_nums: int, flags: int, timeout: float) -> Deferred[PullResult]:
        """The master unreachable: the same pull from another broker of the queue, as ``pull_once``."""
        failure.trap(RemotingConnectError)
        return Deferred.fromCoroutine(self._pull_elsewhere(
            cast(RemotingConnectError, failure.value), addr, queue, sub, offset, max_nums, flags, 0, 20.0, timeout))

    async def _pull(
        self, queue: MessageQueue, expression: Selector, offset: int, max_nums: int, timeout: float, block: bool
    ) -> PullResult:
        self.check_running()
        sub = build_subscription(queue.topic, expression, 0)
        flags = PULL_SUBSCRIPTION | (PULL_SUSPEND if block else 0)
        return await self.pull_once(queue, sub, offset, max_nums, sys_flag=flags, suspend=20.0, timeout=timeout)

    def query_consumer_offset(self, queue: MessageQueue) -> Deferred[int]:
        """The group's stored offset of ``queue``; -1 if it has none."""
        return Deferred.fromCoroutine(self.query_offset(queue))

    def update_consumer_offset(self, queue: MessageQueue, offset: int) -> Deferred[None]:
        """Store the group's offset of ``queue`` on its master."""
        return Deferred.fromCoroutine(self.update_offset(queue, offset))

    def fetch_max_offset(self, queue: MessageQueue) -> Deferred[int]:
        return Deferred.fromCoroutine(self.max_offset(queue))

    def fetch_min_offset(self, queue: MessageQueue) -> Deferred[int]:
        return Deferred.fromCoroutine(self.min_offset(queue))

    def search_offset_by_time(self, queue: MessageQueue, timestamp: float) -> Deferred[int]:
        return Deferred.fromCoroutine(self.search_offset(queue, timestamp))
