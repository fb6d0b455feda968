"""The sub-commands of ``rocketpy-admin``: mqadmin's names and short flags, each one
:class:`~rocketpy.client.admin.AdminClient` call (or a few) and its mqadmin-like rendering."""

from __future__ import annotations

import json
from argparse import Namespace
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rocketpy.admin import render
from rocketpy.admin.render import human_time, table
from rocketpy.client.admin import AdminClient
from rocketpy.client.admintypes import ConsumeStats, GroupSettings, TopicSettings
from rocketpy.client.subscription import client_msg_id
from rocketpy.client.trace import DEFAULT_TRACE_TOPIC, decode_traces


@dataclass(slots=True)
class Output:
    """A command's result: ``data`` for ``--json``, ``text`` for people."""

    data: Any
    text: str


Run = Callable[[AdminClient, Namespace], Awaitable[Output]]


@dataclass(slots=True)
class Command:
    name: str
    help: str
    args: list[tuple[tuple[str, ...], dict[str, Any]]]
    run: Run
    one_of: tuple[str, ...] = field(default_factory=tuple)


COMMANDS: dict[str, Command] = {}


def arg(*flags: str, **options: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, options


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(f"expected true or false, not {text!r}")
    return text.lower() == "true"


_bool.__name__ = "true|false"  # argparse names the type in its error

TOPIC = arg("-t", "--topic", required=True, help="topic name")
BROKER_ADDR = arg("-b", "--brokerAddr", help="broker address ip:port")
CLUSTER = arg("-c", "--clusterName", help="cluster name")
GROUP = arg("-g", "--consumerGroup", required=True, help="consumer group name")


def command(name: str, help: str, *args: tuple[tuple[str, ...], dict[str, Any]],
            one_of: tuple[str, ...] = ()) -> Callable[[Run], Run]:
    """Register ``name``; ``one_of``: destinations of which exactly one must be given."""

    def register(run: Run) -> Run:
        COMMANDS[name] = Command(name, help, list(args), run, one_of)
        return run

    return register


async def _targets(admin: AdminClient, args: Namespace, masters_only: bool = True) -> list[str]:
    """``-b`` or every (master) broker of ``-c``."""
    if args.brokerAddr:
        return [args.brokerAddr]
    return await admin.cluster_addresses(args.clusterName, masters_only)


# cluster and brokers


@command("clusterList", "list the brokers of every cluster")
async def cluster_list(admin: AdminClient, args: Namespace) -> Output:
    rows = await admin.cluster_list()
    now_ms = int(admin.reactor.seconds() * 1000)

    def first(stats: dict[str, str], key: str) -> str:
        return f"{float((stats.get(key) or '0').split()[0]):.2f}"

    def hours(stats: dict[str, str]) -> str:
        earliest = int(stats.get("earliestMessageTimeStamp") or 0)
        return f"{(now_ms - earliest) / 3600000:.2f}" if earliest > 0 else "0.00"

    lines = [
        (b.cluster, b.broker_name, b.broker_id, b.addr, b.stats.get("brokerVersionDesc", b.error or "?"),
         first(b.stats, "putTps"), first(b.stats, "getTransferedTps"), b.stats.get("pageCacheLockTimeMills", "0"),
         hours(b.stats), f"{float(b.stats.get('commitLogDiskRatio') or 0):.4f}")
        for b in rows
    ]
    headers = ("#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS(LOAD)", "#OutTPS(LOAD)",
               "#PCWait(ms)", "#Hour", "#SPACE")
    return Output(rows, table(headers, lines))


@command("brokerStatus", "a broker's runtime statistics", BROKER_ADDR, CLUSTER, one_of=("brokerAddr", "clusterName"))
async def broker_status(admin: AdminClient, args: Namespace) -> Output:
    stats = {addr: await admin.broker_runtime_stats(addr) for addr in await _targets(admin, args, False)}
    if args.brokerAddr:
        return Output(stats[args.brokerAddr], render.properties(stats[args.brokerAddr].items()))
    return Output(stats, "\n".join(f"{addr:<24} " + render.properties(table_.items()).replace("\n", f"\n{addr:<24} ")
                                   for addr, table_ in stats.items()))


@command("getBrokerConfig", "a broker's settings", BROKER_ADDR, CLUSTER, one_of=("brokerAddr", "clusterName"))
async def get_broker_config(admin: AdminClient, args: Namespace) -> Output:
    configs = {addr: await admin.broker_config(addr) for addr in await _targets(admin, args, False)}
    text = "\n".join(f"============{addr}============\n" + "\n".join(f"{k:<50}=  {v}" for k, v in sorted(c.items()))
                     for addr, c in configs.items())
    return Output(configs, text)


@command("brokerConsumeStats", "every group's progress on one broker",
         arg("-b", "--brokerAddr", required=True, help="broker address ip:port"),
         arg("-o", "--order", type=_bool, default=False, help="orderly topics only (true|false)"),
         arg("-l", "--level", type=int, default=0, help="print only queues with at least this lag"))
async def broker_consume_stats(admin: AdminClient, args: Namespace) -> Output:
    stats, total = await admin.broker_consume_stats(args.brokerAddr, args.order)
    rows = [(q.topic, s.group, q.broker_name, q.queue_id, q.broker_offset, q.consumer_offset, q.lag,
             human_time(q.last_timestamp)) for s in stats for q in s.queues if q.lag >= args.level]
    headers = ("#Topic", "#Group", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime")
    return Output({"stats": stats, "total_lag": total}, f"{table(headers, rows)}\n\nDiff Total: {total}")


# topics


@command("topicList", "every topic the name server knows",
         arg("-c", "--clusterModel", action="store_true", help="with each topic's cluster and consumer groups"))
async def topic_list(admin: AdminClient, args: Namespace) -> Output:
    if not args.clusterModel:
        topics = await admin.topic_list()
        return Output(topics, "\n".join(topics))
    overview = await admin.topic_overview()
    rows = [(",".join(t.clusters), t.topic, group) for t in overview for group in t.groups or [""]]
    return Output(overview, table(("#Cluster Name", "#Topic", "#Consumer Group"), rows))


@command("topicRoute", "a topic's route", TOPIC)
async def topic_route(admin: AdminClient, args: Namespace) -> Output:
    route = await admin.topic_route(args.topic)
    return Output(route, json.dumps(route.to_json(), indent=2, sort_keys=True))


@command("topicStatus", "min and max offsets of a topic's queues", TOPIC)
async def topic_status(admin: AdminClient, args: Namespace) -> Output:
    queues = await admin.topic_status(args.topic)
    rows = [(q.broker_name, q.queue_id, q.min_offset, q.max_offset, human_time(q.last_update_timestamp))
            for q in queues]
    return Output(queues, table(("#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"), rows))


@command("updateTopic", "create or change a topic", BROKER_ADDR, CLUSTER, TOPIC,
         arg("-r", "--readQueueNums", type=int, default=8, help="read queue count"),
         arg("-w", "--writeQueueNums", type=int, default=8, help="write queue count"),
         arg("-p", "--perm", type=int, default=6, choices=(2, 4, 6), help="2 write, 4 read, 6 both"),
         arg("-o", "--order", type=_bool, default=False, help="ordered topic (true|false)"),
         one_of=("brokerAddr", "clusterName"))
async def update_topic(admin: AdminClient, args: Namespace) -> Output:
    settings = TopicSettings(args.topic, args.readQueueNums, args.writeQueueNums, args.perm, args.order)
    if args.brokerAddr:
        await admin.create_topic(args.brokerAddr, settings)
        addrs = [args.brokerAddr]
    else:
        addrs = await admin.create_topic_in_cluster(args.clusterName, settings)
    text = "\n".join(f"create topic to {addr} success." for addr in addrs) + f"\n{settings}"
    return Output({"brokers": addrs, "topic": settings}, text)


@command("deleteTopic", "delete a topic from a cluster's brokers and the name servers", TOPIC,
         arg("-c", "--clusterName", required=True, help="cluster name"))
async def delete_topic(admin: AdminClient, args: Namespace) -> Output:
    addrs = await admin.delete_topic(args.topic, args.clusterName)
    text = (f"delete topic [{args.topic}] from cluster [{args.clusterName}] success.\n"
            f"delete topic [{args.topic}] from NameServer success.")
    return Output({"brokers": addrs, "topic": args.topic}, text)


# subscription groups


@command("updateSubGroup", "create or change a subscription group", BROKER_ADDR, CLUSTER,
         arg("-g", "--groupName", required=True, help="consumer group name"),
         arg("-s", "--consumeEnable", type=_bool, default=True, help="true|false"),
         arg("-m", "--consumeFromMinEnable", type=_bool, default=True, help="true|false"),
         arg("-d", "--consumeBroadcastEnable", type=_bool, default=True, help="true|false"),
         arg("-q", "--retryQueueNums", type=int, default=1, help="retry queue count"),
         arg("-r", "--retryMaxTimes", type=int, default=16, help="deliveries before the DLQ"),
         arg("-i", "--brokerId", type=int, default=0, help="consume from which broker id"),
         arg("-w", "--whichBrokerWhenConsumeSlowly", type=int, default=1, help="broker id when consuming slowly"),
         arg("-a", "--notifyConsumerIdsChanged", type=_bool, default=True, help="true|false"),
         arg("-o", "--consumeMessageOrderly", type=_bool, default=False,
             help="true|false: 5.x (gRPC) consumers get each queue in order, one batch in flight"),
         one_of=("brokerAddr", "clusterName"))
async def update_sub_group(admin: AdminClient, args: Namespace) -> Output:
    settings = GroupSettings(args.groupName, args.consumeEnable, args.consumeFromMinEnable,
                             args.consumeBroadcastEnable, args.retryQueueNums, args.retryMaxTimes, args.brokerId,
                             args.whichBrokerWhenConsumeSlowly, args.notifyConsumerIdsChanged,
                             args.consumeMessageOrderly)
    addrs = await _targets(admin, args)
    for addr in addrs:
        await admin.create_subscription_group(addr, settings)
    text = "\n".join(f"create subscription group to {addr} success." for addr in addrs) + f"\n{settings}"
    return Output({"brokers": addrs, "group": settings}, text)


@command("deleteSubGroup", "delete a subscription group", BROKER_ADDR, CLUSTER,
         arg("-g", "--groupName", required=True, help="consumer group name"),
         arg("-r", "--removeOffset", type=_bool, default=False, help="drop its offsets too (true|false)"),
         one_of=("brokerAddr", "clusterName"))
async def delete_sub_group(admin: AdminClient, args: Namespace) -> Output:
    addrs = await _targets(admin, args)
    for addr in addrs:
        await admin.delete_subscription_group(addr, args.groupName, args.removeOffset)
    lines = [f"delete subscription group [{args.groupName}] from broker [{addr}] success." for addr in addrs]
    topics: list[str] = []
    if args.clusterName:
        topics = await admin.delete_group_retry_topics(args.groupName, args.clusterName)
        lines += [f"delete topic [{t}] from cluster [{args.clusterName}] success." for t in topics]
    return Output({"brokers": addrs, "group": args.groupName, "deleted_topics": topics}, "\n".join(lines))


# consumers and producers


def _progress_text(stats: ConsumeStats, with_clients: bool) -> str:
    rows = [(q.topic, q.broker_name, q.queue_id, q.broker_offset, q.consumer_offset)
            + ((q.client_id or "-",) if with_clients else ()) + (q.lag, human_time(q.last_timestamp))
            for q in stats.queues]
    headers = (("#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset")
               + (("#Client",) if with_clients else ()) + ("#Diff", "#LastTime"))
    return f"{table(headers, rows)}\n\nConsume TPS: {stats.consume_tps:.2f}\nDiff Total: {stats.total_lag}"


@command("consumerProgress", "a group's offsets and lag per queue (every group without -g)",
         arg("-g", "--groupName", help="consumer group name"),
         arg("-s", "--showClientIP", type=_bool, default=False, help="the client holding each queue (true|false)"))
async def consumer_progress(admin: AdminClient, args: Namespace) -> Output:
    if args.groupName:
        stats = await admin.consume_stats(args.groupName, with_clients=args.showClientIP)
        return Output(stats, _progress_text(stats, args.showClientIP))
    groups = await admin.consumer_groups()
    rows = [(g.group, g.clients, "" if g.version is None else g.version, g.consume_type, g.message_model,
             f"{g.consume_tps:.2f}", g.total_lag) for g in groups]
    return Output(groups, table(("#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"), rows))


@command("consumerConnection", "a group's clients and subscriptions", GROUP)
async def consumer_connection(admin: AdminClient, args: Namespace) -> Output:
    conn = await admin.consumer_connection(args.consumerGroup)
    clients = table(("#ClientId", "#ClientAddr", "#Language", "#Version"),
                    [(c.client_id, c.client_addr, c.language, c.version) for c in conn.connections])
    subs = table(("#Topic", "#SubExpression"), sorted(conn.subscriptions.items()))
    text = (f"{clients}\n\nBelow is subscription:\n{subs}\n\nConsumeType: {conn.consume_type}\n"
            f"MessageModel: {conn.message_model}\nConsumeFromWhere: {conn.consume_from_where}")
    return Output(conn, text)


@command("producerConnection", "a producer group's clients", TOPIC,
         arg("-g", "--producerGroup", required=True, help="producer group name"))
async def producer_connection(admin: AdminClient, args: Namespace) -> Output:
    conns = await admin.producer_connection(args.producerGroup, args.topic)
    rows = [(c.client_id, c.client_addr, c.language, c.version) for c in conns]
    return Output(conns, table(("#ClientId", "#ClientAddr", "#Language", "#Version"), rows))


@command("resetOffsetByTime", "move a group's offsets on a topic to a point in time", TOPIC,
         arg("-g", "--group", required=True, help="consumer group name"),
         arg("-s", "--timestamp", required=True, help="now, milliseconds, -1 (the end) or yyyy-MM-dd#HH:mm:ss:SSS"),
         arg("-f", "--force", type=_bool, default=True, help="also move queues not yet reached (true|false)"),
         arg("-c", "--cplus", action="store_true", help="the C++ client's body shape"))
async def reset_offset_by_time(admin: AdminClient, args: Namespace) -> Output:
    stamp = -1 if args.timestamp == "-1" else render.parse_time(args.timestamp, admin.reactor.seconds())
    resets = await admin.reset_offset_by_time(args.topic, args.group, stamp, args.force, args.cplus)
    head = (f"rollback consumer offset by specified group[{args.group}], topic[{args.topic}], force[{args.force}], "
            f"timestamp(string)[{args.timestamp}], timestamp(long)[{stamp}]")
    rows = [(r.broker_name, r.queue_id, r.offset, "clients told" if r.online else "offset written") for r in resets]
    return Output(resets, f"{head}\n{table(('#brokerName', '#queueId', '#offset', '#how'), rows)}")


# messages


@command("queryMsgById", "a message by id (with -g and -d: have that client consume it)",
         arg("-i", "--msgId", required=True, help="offset message id (or UNIQ_KEY with -t)"),
         arg("-t", "--topic", help="topic, to look a UNIQ_KEY up"),
         arg("-g", "--consumerGroup", help="consumer group of -d"),
         arg("-d", "--clientId", help="consumer client id to consume the message directly"))
async def query_msg_by_id(admin: AdminClient, args: Namespace) -> Output:
    msg = await admin.message_by_id(args.msgId, args.topic)
    if not (args.consumerGroup and args.clientId):
        return Output(msg, render.message(msg))
    result = await admin.consume_message_directly(args.consumerGroup, args.clientId, msg.msg_id)
    return Output({"message": msg, "consume": result}, f"{render.message(msg)}\n\n{result}")


@command("queryMsgByKey", "messages of a topic by key", TOPIC, arg("-k", "--msgKey", required=True, help="message key"))
async def query_msg_by_key(admin: AdminClient, args: Namespace) -> Output:
    msgs = await admin.query_message_by_key(args.topic, args.msgKey)
    rows = [(client_msg_id(m), m.msg_id, m.queue_id, m.queue_offset) for m in msgs]
    return Output(msgs, table(("#Message ID", "#Offset Message ID", "#QID", "#Offset"), rows))


@command("queryMsgByOffset", "the message at an offset of one queue", TOPIC,
         arg("-b", "--brokerName", required=True, help="broker name"),
         arg("-i", "--queueId", type=int, required=True, help="queue id"),
         arg("-o", "--offset", type=int, required=True, help="queue offset"))
async def query_msg_by_offset(admin: AdminClient, args: Namespace) -> Output:
    msg = await admin.query_message_by_offset(args.topic, args.brokerName, args.queueId, args.offset)
    return Output(msg, render.message(msg))


@command("queryMsgTraceById", "a message's send and consume traces (message trace)",
         arg("-i", "--msgId", required=True, help="the message id (UNIQ_KEY)"),
         arg("-t", "--traceTopic", default=DEFAULT_TRACE_TOPIC, help="the trace topic"))
async def query_msg_trace_by_id(admin: AdminClient, args: Namespace) -> Output:
    traces = await admin.query_message_by_key(args.traceTopic, args.msgId)
    records = [r for m in traces for r in decode_traces(m.body.decode("utf-8", "replace"))
               if r.get("msgId") == args.msgId and r["traceType"] in ("Pub", "SubAfter")]
    rows = [(r["traceType"], r.get("groupName", "-"), r.get("storeHost", "-"),
             human_time(int(r.get("timeStamp", "0") or 0)), r.get("costTime", "-"),
             "success" if r.get("success") == "true" else "failed") for r in records]
    return Output(records, table(("#Type", "#Group", "#Host", "#Time", "#CostTimes", "#Status"), rows))


def _lines(msgs: list[Any], charset: str, with_body: bool = True) -> str:
    return "\n".join(render.message_line(m, charset, with_body) for m in msgs)


@command("printMsg", "a topic's messages stored in a time range", TOPIC,
         arg("-b", "--beginTimestamp", help="now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"),
         arg("-e", "--endTimestamp", help="now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"),
         arg("-s", "--subExpression", default="*", help="tag expression, e.g. 'TagA || TagB'"),
         arg("-c", "--charsetName", default="utf-8", help="body charset"),
         arg("-d", "--printBody", type=_bool, default=True, help="true|false"))
async def print_msg(admin: AdminClient, args: Namespace) -> Output:
    now = admin.reactor.seconds()
    begin = render.parse_time(args.beginTimestamp, now) if args.beginTimestamp else None
    end = render.parse_time(args.endTimestamp, now) if args.endTimestamp else None
    msgs = await admin.pull_messages(args.topic, begin_ms=begin, end_ms=end, expression=args.subExpression)
    return Output(msgs, _lines(msgs, args.charsetName, args.printBody))


@command("consumeMessage", "read messages of a topic or one queue without committing", TOPIC,
         arg("-b", "--brokerName", help="broker name"),
         arg("-i", "--queueId", type=int, help="queue id"),
         arg("-o", "--offset", type=int, help="first queue offset"),
         arg("-s", "--beginTimestamp", help="now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"),
         arg("-e", "--endTimestamp", help="now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"),
         arg("-c", "--MessageNumber", type=int, default=128, help="most messages per queue (128)"),
         arg("-g", "--consumerGroup", help="ignored: reads go out as TOOLS_CONSUMER and commit nothing"))
async def consume_message(admin: AdminClient, args: Namespace) -> Output:
    now = admin.reactor.seconds()
    begin = render.parse_time(args.beginTimestamp, now) if args.beginTimestamp else None
    end = render.parse_time(args.endTimestamp, now) if args.endTimestamp else None
    msgs = await admin.pull_messages(args.topic, broker_name=args.brokerName, queue_id=args.queueId,
                                     offset=args.offset, begin_ms=begin, end_ms=end, max_count=args.MessageNumber)
    return Output(msgs, _lines(msgs, "utf-8"))


@command("sendMessage", "send one message", TOPIC,
         arg("-p", "--body", required=True, help="UTF-8 body"),
         arg("-k", "--key", help="message keys"),
         arg("-c", "--tags", help="message tag"),
         arg("-b", "--broker", help="broker name (with -i)"),
         arg("-i", "--qid", type=int, help="queue id (with -b)"))
async def send_message(admin: AdminClient, args: Namespace) -> Output:
    result = await admin.send_message(args.topic, args.body.encode("utf-8"), args.tags, args.key, args.broker,
                                      args.qid)
    rows = [(result.queue.broker_name, result.queue.queue_id, result.status.name, result.msg_id)]
    return Output(result, table(("#Broker Name", "#QID", "#Send Result", "#MsgId"), rows))
