"""What the dashboard's ``/api/`` answers (doc/dashboard.md): each view is a few
:class:`~rocketpy.client.admin.AdminClient` calls (the one implementation of every admin call,
shared with ``rocketpy-admin``) shaped into JSON-ready dicts and lists. Nothing here reads
the broker's memory or store directly, so the same views work against an Apache RocketMQ 4.x cluster.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from twisted.internet.interfaces import IReactorTime

from rocketpy.admin.render import jsonable
from rocketpy.client.admin import AdminClient, NotFoundError
from rocketpy.client.admintypes import BrokerStatus, ConsumerConnection, TopicSettings
from rocketpy.client.errors import MQError, RemotingError
from rocketpy.client.route import master_addresses
from rocketpy.client.subscription import build_subscription, client_msg_id
from rocketpy.common.message import MessageExt, format_address
from rocketpy.common.route import TopicRouteData
from rocketpy.common.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

#: Bytes of a message body the API returns (the page shows them; the size says what was left out).
BODY_PREVIEW = 4096
#: VIEW_BROKER_STATS_DATA's statistic of messages put in a topic (RocketMQ's BrokerStatsManager name).
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
#: Messages a listing returns at most.
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


class BadRequest(ValueError):
    """A request the API cannot answer as asked (a missing or malformed argument)."""


@dataclass(frozen=True, slots=True)
class MessageQuery:
    """How ``/api/messages`` looks messages up: by id, by key, or by store time range."""

    topic: str
    msg_id: str | None = None
    key: str | None = None
    begin_ms: int | None = None
    end_ms: int | None = None
    limit: int = DEFAULT_LIMIT


def _first_float(text: str | None) -> float:
    """``"12.5 10.0 3.1"`` (RocketMQ's TPS over its windows) → 12.5; missing or bad → 0."""
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def body_preview(body: bytes, limit: int = BODY_PREVIEW) -> dict[str, Any]:
    """The first ``limit`` bytes as text when they are UTF-8 (a character cut at the limit is
    dropped), else as hex; with the whole body's size."""
    head = body[:limit]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        cut = len(body) > limit and e.start >= len(head) - 3
        if not cut:
            return {"size": len(body), "encoding": "hex", "preview": head.hex(), "truncated": len(body) > limit}
        text = head[:e.start].decode("utf-8", "replace")
    return {"size": len(body), "encoding": "utf-8", "preview": text, "truncated": len(body) > limit}


def message_summary(msg: MessageExt) -> dict[str, Any]:
    """One line of a message listing."""
    return {
        "msg_id": client_msg_id(msg), "offset_msg_id": msg.msg_id, "topic": msg.topic, "tags": msg.tags,
        "keys": msg.keys, "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
        "store_timestamp": msg.store_timestamp, "store_host": format_address(msg.store_host),
        "body_size": len(msg.body),
    }


def message_detail(msg: MessageExt) -> dict[str, Any]:
    """Headers, properties and a body preview."""
    detail = jsonable(msg)
    detail.pop("body", None)
    detail["body"] = body_preview(msg.body)
    return detail


def broker_row(status: BrokerStatus, config: dict[str, str], now_ms: int) -> dict[str, Any]:
    """One broker address of the overview: role, version, uptime, disk, TPS, commit-log offset."""
    s = status.stats
    boot = _int(s.get("bootTimestamp"))
    return {
        "cluster": status.cluster, "broker_name": status.broker_name, "broker_id": status.broker_id,
        "addr": status.addr, "error": status.error,
        "role": config.get("brokerRole") or ("MASTER" if status.broker_id == 0 else "SLAVE"),
        "version": s.get("brokerVersionDesc", ""), "boot_timestamp": boot,
        "uptime_s": max(now_ms - boot, 0) // 1000 if boot else None,
        "disk_ratio": _first_float(s.get("commitLogDiskRatio")),
        "put_tps": _first_float(s.get("putTps")), "get_tps": _first_float(s.get("getTransferedTps")),
        "commit_log_max_offset": _int(s.get("commitLogMaxOffset")),
        "put_today": _int(s.get("msgPutTotalTodayNow")), "get_today": _int(s.get("msgGetTotalTodayNow")),
    }


def consumption_state(msg: MessageExt, committed: int | None, conn: ConsumerConnection | None) -> str:
    """RocketMQ dashboard's track types: how far a group got with one message."""
    expression = conn.subscriptions.get(msg.topic) if conn is not None else None
    if committed is not None and committed > msg.queue_offset:
        if expression is not None and not build_subscription(msg.topic, expression, 0).matches(msg):
            return "CONSUMED_BUT_FILTERED"
        return "CONSUMED"
    return "NOT_CONSUME_YET" if conn is not None else "NOT_ONLINE"


class Views:
    """The JSON views of one cluster, through ``admin``.

    :param clock: the time of "now" (uptimes, default time ranges).
    """

    def __init__(self, admin: AdminClient, clock: IReactorTime) -> None:
        self.admin = admin
        self.clock = clock

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    # cluster

    async def brokers(self) -> list[dict[str, Any]]:
        now = self.now_ms()
        rows = []
        for status in await self.admin.cluster_list():
            config: dict[str, str] = {}
            if status.error is None:
                try:
                    config = await self.admin.broker_config(status.addr)
                except (MQError, RemotingError):
                    pass  # the role falls back to the broker id
            rows.append(broker_row(status, config, now))
        return rows

    async def overview(self) -> dict[str, Any]:
        """Every broker, and the cluster's TPS in (puts) and out (pulled messages) over its masters."""
        brokers = await self.brokers()
        masters = [b for b in brokers if b["broker_id"] == 0]
        return {
            "now_ms": self.now_ms(), "brokers": brokers,
            "put_tps": sum(b["put_tps"] for b in masters), "get_tps": sum(b["get_tps"] for b in brokers),
        }

    async def replication(self) -> list[dict[str, Any]]:
        """Per broker name: its master and slaves, and the commit-log bytes each slave lacks."""
        by_name: dict[str, list[dict[str, Any]]] = {}
        for b in await self.brokers():
            by_name.setdefault(b["broker_name"], []).append(b)
        out = []
        for name, rows in sorted(by_name.items()):
            master = next((r for r in rows if r["broker_id"] == 0), None)
            top = master["commit_log_max_offset"] if master else None
            for r in rows:
                behind = None if top is None or r["broker_id"] == 0 else top - r["commit_log_max_offset"]
                r["behind_bytes"] = None if behind is None else max(behind, 0)
            out.append({"broker_name": name, "cluster": rows[0]["cluster"], "master": master is not None,
                        "members": sorted(rows, key=lambda r: r["broker_id"])})
        return out

    # topics

    async def _system_topics(self) -> set[str]:
        found: set[str] = set()
        info = await self.admin.cluster_info()
        for cluster in info.clusters:
            for addr in info.addresses(cluster):
                try:
                    found.update(await self.admin.system_topics(addr))
                except (MQError, RemotingError):
                    continue
        return found

    async def put_tps(self, topic: str, route: TopicRouteData | None = None) -> float:
        """Messages stored per second in ``topic`` over the last minute, summed over its masters
        (0 where a broker has no such statistic, or does not answer VIEW_BROKER_STATS_DATA)."""
        total = 0.0
        for addr in master_addresses(route or await self.admin.topic_route(topic)).values():
            try:
                total += (await self.admin.broker_stats(addr, TOPIC_PUT_NUMS, topic)).minute.tps
            except (MQError, RemotingError):
                continue
        return total

    async def topics(self) -> list[dict[str, Any]]:
        """Every topic (but the retry and dead letter ones): clusters, consumer groups, messages
        held, put TPS."""
        system = await self._system_topics()
        out = []
        for t in await self.admin.topic_overview():
            try:
                queues = await self.admin.topic_status(t.topic)
                tps = await self.put_tps(t.topic)
            except NotFoundError:
                queues, tps = [], 0.0
            out.append({"topic": t.topic, "clusters": t.clusters, "groups": t.groups, "system": t.topic in system,
                        "queues": len(queues), "messages": sum(q.max_offset - q.min_offset for q in queues),
                        "put_tps": tps})
        return out

    async def topic(self, topic: str) -> dict[str, Any]:
        """One topic: its queues' offsets, put TPS, route and the groups consuming it with their lag."""
        route = await self.admin.topic_route(topic)
        queues = await self.admin.topic_status(topic)
        groups = []
        for group in await self.admin.topic_consumer_groups(topic):
            try:
                stats = await self.admin.consume_stats(group, topic)
            except NotFoundError:
                continue
            groups.append({"group": group, "lag": stats.total_lag, "consume_tps": stats.consume_tps})
        return {"topic": topic, "route": jsonable(route), "queues": jsonable(queues), "groups": groups,
                "messages": sum(q.max_offset - q.min_offset for q in queues),
                "put_tps": await self.put_tps(topic, route)}

    # consumer groups and producers

    async def groups(self) -> list[Any]:
        return jsonable(await self.admin.consumer_groups())

    async def group(self, group: str, with_clients: bool = False) -> dict[str, Any]:
        """A group's members (client id, address, language, version), subscriptions and per-queue progress."""
        stats = await self.admin.consume_stats(group, with_clients=with_clients)
        try:
            conn: ConsumerConnection | None = await self.admin.consumer_connection(group)
        except NotFoundError:
            conn = None
        return {"group": group, "online": conn is not None, "connection": jsonable(conn), **jsonable(stats)}

    async def producers(self) -> list[dict[str, Any]]:
        """Every producer connected to a master, by broker and producer group."""
        info = await self.admin.cluster_info()
        rows = []
        for cluster in sorted(info.clusters):
            for name in info.clusters[cluster]:
                broker = info.brokers.get(name)
                addr = broker.broker_addrs.get(0) if broker else None
                if addr is None:
                    continue
                for group, conns in (await self.admin.producer_table(addr)).items():
                    rows += [{"broker_name": name, "group": group, **jsonable(c)} for c in conns]
        return rows

    # messages

    async def messages(self, query: MessageQuery) -> dict[str, Any]:
        """Messages of a topic by id (UNIQ_KEY or offset id), by key, or the first ``limit`` stored
        in ``[begin, end)`` (at most ``limit`` read per queue), in store order. ``truncated``: there
        may be more in the range."""
        admin = self.admin
        truncated = False
        if query.msg_id:
            found = [await admin.message_by_id(query.msg_id, query.topic)]
        elif query.key:
            found = await admin.query_message_by_key(query.topic, query.key)
        else:
            found = await admin.pull_messages(query.topic, begin_ms=query.begin_ms, end_ms=query.end_ms,
                                              max_count=query.limit)
            per_queue = Counter((m.store_host, m.queue_id) for m in found)
            truncated = len(found) > query.limit or query.limit in per_queue.values()
        found.sort(key=lambda m: (m.store_timestamp, m.commit_log_offset))
        return {"topic": query.topic, "truncated": truncated,
                "messages": [message_summary(m) for m in found[:query.limit]]}

    async def message(self, topic: str, msg_id: str) -> dict[str, Any]:
        """One message in full, and how far each group consuming its topic got with it."""
        msg = await self.admin.message_by_id(msg_id, topic)
        detail = message_detail(msg)
        detail["consumption"] = await self._consumption(msg)
        return detail

    async def _broker_name_of(self, addr: str) -> str | None:
        for name, broker in (await self.admin.cluster_info()).brokers.items():
            if addr in broker.broker_addrs.values():
                return name
        return None

    async def _consumption(self, msg: MessageExt) -> list[dict[str, Any]]:
        if msg.topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            return []
        broker = await self._broker_name_of(format_address(msg.store_host))
        out = []
        for group in await self.admin.topic_consumer_groups(msg.topic):
            try:
                stats = await self.admin.consume_stats(group, msg.topic)
            except NotFoundError:
                continue
            committed = next((q.consumer_offset for q in stats.queues
                              if q.broker_name == broker and q.queue_id == msg.queue_id), None)
            try:
                conn: ConsumerConnection | None = await self.admin.consumer_connection(group)
            except NotFoundError:
                conn = None
            out.append({"group": group, "state": consumption_state(msg, committed, conn),
                        "consumer_offset": committed, "online": conn is not None})
        return out

    async def dead_letters(self, group: str, begin_ms: int | None, end_ms: int | None,
                           limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
        """The messages of ``%DLQ%group`` (none when the group never dead-lettered one)."""
        query = MessageQuery(DLQ_GROUP_TOPIC_PREFIX + group, begin_ms=begin_ms, end_ms=end_ms, limit=limit)
        try:
            return await self.messages(query)
        except NotFoundError:
            return {"topic": query.topic, "truncated": False, "messages": []}

    # write actions (only with --http-admin)

    async def create_topic(self, settings: TopicSettings, cluster: str | None) -> dict[str, Any]:
        """The topic on every master of ``cluster`` (the only cluster when not given)."""
        if cluster is None:
            clusters = sorted((await self.admin.cluster_info()).clusters)
            if len(clusters) != 1:
                raise BadRequest(f"name the cluster: there are {len(clusters)} ({', '.join(clusters)})")
            cluster = clusters[0]
        brokers = await self.admin.create_topic_in_cluster(cluster, settings)
        return {"topic": settings.topic, "cluster": cluster, "brokers": brokers}

    async def reset_offsets(self, group: str, topic: str, timestamp_ms: int) -> list[Any]:
        return jsonable(await self.admin.reset_offset_by_time(topic, group, timestamp_ms))

    async def resend_dead_letter(self, group: str, msg_id: str) -> Any:
        return jsonable(await self.admin.resend_dead_letter(group, msg_id))
