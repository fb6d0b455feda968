"""The dashboard's ``/api/`` and pages on a real site (port 0) in front of a real name server and
broker on loopback, fetched over HTTP with ``twisted.web.client.Agent``."""

from __future__ import annotations

import json
import os
from base64 import b64encode
from io import BytesIO
from typing import Any, cast

from twisted.internet import reactor
from twisted.internet.address import IPv4Address
from twisted.web.client import Agent, FileBodyProducer, readBody
from twisted.web.http_headers import Headers
from twisted.web.server import Site

from rocketpy.client import ConsumeFromWhere, ConsumeResult, Message, MessageExt
from rocketpy.client.admin import AdminClient, NotFoundError
from rocketpy.client.admintypes import GroupSettings, TopicSettings
from rocketpy.client.process import ConsumeContext
from rocketpy.common.message import offset_msg_id, parse_address
from rocketpy.web.access import AclAccounts, AdminAccess, SharedAdmin
from rocketpy.web.dashboard import dashboard_resource
from rocketpy.web.service import http_service
from tests.acl.test_broker import ACL, ADMIN, USER
from tests.client.test_integration import IntegrationTestCase, LoopbackCluster, pause
from tests.ports import free_port


class DashboardTestCase(IntegrationTestCase):
    """A cluster and the dashboard's site; ``get``/``post`` return (status, decoded JSON or bytes)."""

    base: str

    auth: tuple[str, str] | None = None  # HTTP Basic user and password of the requests

    async def dashboard(self, namesrv_addr: str, writes: bool = False, access: AdminAccess | None = None) -> str:
        access = access or SharedAdmin(AdminClient(reactor, namesrv_addr))
        self.addCleanup(access.close)
        site: Any = Site(dashboard_resource(access, reactor, writes))
        port = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.base = f"http://127.0.0.1:{cast(IPv4Address, port.getHost()).port}"
        return self.base

    async def fetch(self, method: bytes, path: str, body: bytes | None = None,
                    content_type: str = "application/json") -> tuple[int, Headers, bytes]:
        producer = FileBodyProducer(BytesIO(body)) if body is not None else None
        headers = Headers({b"content-type": [content_type.encode()]} if body is not None else {})
        if self.auth is not None:
            headers.addRawHeader(b"authorization", b"Basic " + b64encode(":".join(self.auth).encode()))
        response = await Agent(reactor).request(method, (self.base + path).encode(), headers, producer)
        return response.code, response.headers, await readBody(response)

    async def get(self, path: str, code: int = 200) -> Any:
        status, headers, body = await self.fetch(b"GET", "/api/" + path)
        self.assertEqual((status, headers.getRawHeaders(b"content-type")),
                         (code, [b"application/json; charset=utf-8"]), body)
        return json.loads(body)

    async def post(self, path: str, obj: Any, code: int = 200, content_type: str = "application/json") -> Any:
        status, _, body = await self.fetch(b"POST", "/api/" + path, json.dumps(obj).encode(), content_type)
        self.assertEqual(status, code, body)
        return json.loads(body)

    async def acl_cluster(self) -> LoopbackCluster:
        """A name server and broker-a checking ACL (tests/acl's accounts: USER reads, ADMIN administers)."""
        acl_path = os.path.abspath(self.mktemp())
        with open(acl_path, "w") as f:
            f.write(ACL)
        cluster = LoopbackCluster(self)
        self.addCleanup(cluster.close)
        await cluster.add_broker("broker-a", acl_enable=True, acl_file=acl_path)
        return cluster

    async def lagging_group(self, cluster: LoopbackCluster) -> tuple[Any, list[Any], list[Any]]:
        """Topic ``Watched``: 4 messages consumed by group CG (then offline), 2 more sent after:
        CG lags by 2. Returns the producer, the consumed and the late send results."""
        producer = await self.producer(cluster)
        consumed = [await producer.send(Message("Watched", b"m%d" % i, 0, {"KEYS": f"K{i % 2}", "TAGS": "TagA"}))
                    for i in range(4)]
        consumer = await self.push(cluster, lambda msgs, context: ConsumeResult.CONSUME_SUCCESS, "Watched",
                                   persist_interval=0.2, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        offsets = cluster.brokers["broker-a"].offsets
        await self.until(lambda: sum(offsets.query_offsets("CG", "Watched").values()) == 4)
        await cluster.wait_for_route("%RETRY%CG")
        await consumer.shutdown()
        late = [await producer.send(Message("Watched", b"late %d \xe2\x9c\x93" % i, 0, {"KEYS": "late"}))
                for i in range(2)]
        return producer, consumed, late


class ReadApiTests(DashboardTestCase):
    async def test_views(self) -> None:
        """Overview, topics, a topic, groups, a group, producers, message look-ups (id, key, time
        range), one message with its consumption per group, replication; all read-only."""
        cluster = await self.cluster()
        await self.dashboard(cluster.namesrv_addr)
        addr = cluster.brokers["broker-a"].config.advertised_address
        producer, consumed, late = await self.lagging_group(cluster)

        self.assertEqual(await self.get(""), {"writes": False})
        overview = await self.get("overview")
        [broker] = overview["brokers"]
        self.assertEqual({k: broker[k] for k in ("cluster", "broker_name", "broker_id", "addr", "role", "version")},
                         {"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_id": 0, "addr": addr,
                          "role": "ASYNC_MASTER", "version": "V4_9_4"})
        self.assertGreaterEqual(broker["uptime_s"], 0)
        self.assertGreater(broker["commit_log_max_offset"], 0)
        self.assertIsNone(broker["error"])

        topics = {t["topic"]: t for t in await self.get("topics")}
        self.assertEqual({k: topics["Watched"][k] for k in ("messages", "groups", "system", "clusters")},
                         {"messages": 6, "groups": ["CG"], "system": False, "clusters": ["DefaultCluster"]})
        self.assertTrue(topics["TBW102"]["system"])
        self.assertGreater(topics["Watched"]["put_tps"], 0)  # through VIEW_BROKER_STATS_DATA
        self.assertEqual(topics["TBW102"]["put_tps"], 0)
        admin = AdminClient(reactor, cluster.namesrv_addr)
        self.addCleanup(admin.close)
        pulled = await admin.broker_stats(addr, "GROUP_GET_NUMS", "Watched@CG")
        self.assertGreater(pulled.minute.tps, 0)
        self.assertEqual(pulled.minute.sum, round(pulled.minute.tps * 60))
        with self.assertRaises(NotFoundError) as caught:
            await admin.broker_stats(addr, "TOPIC_PUT_NUMS", "Nope")
        self.assertEqual(str(caught.exception), "The stats <TOPIC_PUT_NUMS> <Nope> not exist")
        self.assertNotIn("%RETRY%CG", topics)
        watched = await self.get("topics/Watched")
        self.assertEqual(sum(q["max_offset"] for q in watched["queues"]), 6)
        self.assertEqual([(g["group"], g["lag"]) for g in watched["groups"]], [("CG", 2)])
        self.assertEqual(watched["route"]["queue_datas"][0]["broker_name"], "broker-a")

        self.assertEqual([(g["group"], g["clients"], g["total_lag"]) for g in await self.get("groups")],
                         [("CG", 0, 2)])
        group = await self.get("groups/CG")
        self.assertEqual((group["total_lag"], group["online"], group["connection"]), (2, False, None))
        lagging = {(q["queue_id"], q["lag"]) for q in group["queues"] if q["topic"] == "Watched" and q["lag"]}
        self.assertEqual(lagging, {(s.queue.queue_id, 1) for s in late} if len({s.queue.queue_id for s in late}) == 2
                         else {(late[0].queue.queue_id, 2)})

        await producer.instance.send_heartbeat()
        producers = await self.get("producers")
        self.assertIn(("PG", "broker-a", producer.instance.client_id, "PYTHON"),
                      [(p["group"], p["broker_name"], p["client_id"], p["language"]) for p in producers])

        by_key = await self.get("messages?topic=Watched&key=late")
        self.assertEqual(sorted(m["msg_id"] for m in by_key["messages"]), sorted(s.msg_id for s in late))
        by_id = await self.get(f"messages?topic=Watched&id={consumed[1].msg_id}")
        self.assertEqual([(m["keys"], m["tags"], m["body_size"]) for m in by_id["messages"]], [("K1", "TagA", 2)])
        now = int(reactor.seconds() * 1000)
        in_range = await self.get(f"messages?topic=Watched&begin={now - 60000}&end={now + 60000}")
        self.assertEqual([m["body_size"] for m in in_range["messages"]], [2, 2, 2, 2, 10, 10])  # in store order
        self.assertFalse(in_range["truncated"])
        first = await self.get(f"messages?topic=Watched&begin={now - 60000}&end={now + 60000}&limit=2")
        self.assertEqual((len(first["messages"]), first["truncated"]), (2, True))
        self.assertEqual([m["msg_id"] for m in first["messages"]], [s.msg_id for s in consumed[:2]])
        self.assertEqual((await self.get(f"messages?topic=Watched&begin={now + 60000}"))["messages"], [])

        detail = await self.get(f"messages/Watched/{late[0].msg_id}")
        self.assertEqual(detail["body"],
                         {"size": 10, "encoding": "utf-8", "preview": "late 0 \u2713", "truncated": False})
        self.assertEqual((detail["properties"]["KEYS"], detail["offset_msg_id"]), ("late", late[0].offset_msg_id))
        self.assertEqual([(c["group"], c["state"]) for c in detail["consumption"]], [("CG", "NOT_ONLINE")])
        oldest = await self.get(f"messages/Watched/{consumed[0].offset_msg_id}")  # the broker's id works too
        self.assertEqual([(c["group"], c["state"]) for c in oldest["consumption"]], [("CG", "CONSUMED")])

        [replica] = await self.get("replication")
        self.assertEqual((replica["broker_name"], replica["master"], [m["behind_bytes"] for m in replica["members"]]),
                         ("broker-a", True, [None]))
        self.assertEqual(await self.get("dlq/CG"), {"topic": "%DLQ%CG", "truncated": False, "messages": []})

    async def test_errors(self) -> None:
        """Unknown names are 404, bad arguments 400, writes 403 without --http-admin: each a JSON
        ``{"error": …}`` of one line; an unreachable name server is 503."""
        cluster = await self.cluster()
        await self.dashboard(cluster.namesrv_addr)
        for path, code, error in [
            ("topics/Nope", 404, "topic 'Nope' does not exist"),
            ("groups/Nobody", 404, "consumer group 'Nobody' does not exist"),
            ("messages/TBW102/not-an-id", 404, "no message not-an-id in topic 'TBW102'"),
            ("messages", 400, "missing argument 'topic'"),
            ("messages?topic=TBW102&begin=yesterday", 400, "begin must be an integer"),
            ("messages?topic=TBW102&limit=0", 400, "limit must be between 1 and 1000"),
            ("nothing/here", 404, "no API resource /api/nothing/here"),
        ]:
            answer = await self.get(path, code)
            self.assertIn(error, answer["error"])
        refused = await self.post("topics", {"topic": "New"}, 403)
        self.assertIn("--http-admin", refused["error"])
        self.assertIsNone(cluster.brokers["broker-a"].topics.select_topic_config("New"))

        await self.dashboard(f"127.0.0.1:{free_port()}")
        down = await self.get("overview", 503)
        self.assertIn("cannot reach the name server or broker", down["error"])

    async def test_pages(self) -> None:
        """``/`` serves the page, its script and stylesheet from the package, with a CSP that
        allows only this origin; no directory listing."""
        cluster = await self.cluster()
        await self.dashboard(cluster.namesrv_addr)
        status, headers, body = await self.fetch(b"GET", "/")
        self.assertEqual(status, 200)
        self.assertIn(b'<script src="app.js"></script>', body)
        self.assertIn(b"default-src 'self'", headers.getRawHeaders(b"content-security-policy", [b""])[0])
        for path, kind in (("/app.js", b"javascript"), ("/app.css", b"text/css")):
            status, headers, body = await self.fetch(b"GET", path)
            self.assertEqual(status, 200)
            self.assertIn(kind, headers.getRawHeaders(b"content-type", [b""])[0])
            self.assertNotIn(b"http://", body.replace(b"http://www.w3.org", b""))  # nothing from elsewhere
        self.assertEqual((await self.fetch(b"GET", "/nothing.js"))[0], 404)


class WriteApiTests(DashboardTestCase):
    async def test_write_actions(self) -> None:
        """With writes allowed: create a topic, reset a group's offsets, and resend a dead letter to
        its group, which consumes it again."""
        cluster = await self.cluster()
        await self.dashboard(cluster.namesrv_addr, writes=True)
        broker = cluster.brokers["broker-a"]
        self.assertEqual(await self.get(""), {"writes": True})

        created = await self.post("topics", {"topic": "Made", "read_queue_nums": 2, "write_queue_nums": 2})
        self.assertEqual(created, {"topic": "Made", "cluster": "DefaultCluster",
                                   "brokers": [broker.config.advertised_address]})
        config = broker.topics.select_topic_config("Made")
        assert config is not None
        self.assertEqual((config.read_queue_nums, config.write_queue_nums), (2, 2))
        for body, code, error in [({"read_queue_nums": 2}, 400, "missing field 'topic'"),
                                  ({"topic": "X", "write_queue_nums": "2"}, 400,
                                   "field 'write_queue_nums' must be int")]:
            self.assertIn(error, (await self.post("topics", body, code))["error"])
        self.assertIn("Content-Type: application/json",
                      (await self.post("topics", {"topic": "Y"}, 400, "text/plain"))["error"])
        for raw, error in [(b"[" * 60000, "the body is not JSON"), (b"{" + b" " * 70000 + b"}", "the body is over"),
                           (b"[1]", "the body must be a JSON object")]:
            status, _, answer = await self.fetch(b"POST", "/api/topics", raw)
            self.assertEqual(status, 400)
            self.assertIn(error, json.loads(answer)["error"])
        self.assertIsNone(broker.topics.select_topic_config("Y"))

        await self.lagging_group(cluster)
        reset = await self.post("groups/CG/reset", {"topic": "Watched", "timestamp": -1})
        self.assertEqual({r["online"] for r in reset}, {False})
        self.assertEqual(sum(broker.offsets.query_offsets("CG", "Watched").values()), 6)
        self.assertEqual((await self.get("groups/CG"))["total_lag"], 0)

        admin = AdminClient(reactor, cluster.namesrv_addr)
        self.addCleanup(admin.close)
        await admin.create_subscription_group(broker.config.advertised_address, GroupSettings("DG"))
        got: list[tuple[str, bytes, int]] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            got.extend((m.topic, m.body, m.reconsume_times) for m in msgs)
            if len(got) == 1:
                context.delay_level = -1  # straight to the dead letter queue
                return ConsumeResult.RECONSUME_LATER
            return ConsumeResult.CONSUME_SUCCESS

        await admin.create_topic(broker.config.advertised_address, TopicSettings("Dead", 1, 1))
        await cluster.wait_for_route("Dead")
        await self.push(cluster, listener, "Dead", group="DG",
                        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        producer = await self.producer(cluster)
        await producer.send(Message("Dead", b"poison", 0, {"KEYS": "p1"}))
        await self.until(lambda: len(got) == 1)
        await cluster.wait_for_route("%DLQ%DG")
        dead = await self.get("dlq/DG")
        for _ in range(100):
            if dead["messages"]:
                break
            await pause()
            dead = await self.get("dlq/DG")
        [letter] = dead["messages"]
        self.assertEqual((letter["topic"], letter["keys"]), ("%DLQ%DG", "p1"))
        resent = await self.post("dlq/DG/resend", {"msg_id": letter["msg_id"]})
        self.assertEqual((resent["status"], resent["queue"]["topic"]), ("SEND_OK", "%RETRY%DG"))
        await self.until(lambda: len(got) == 2)
        self.assertEqual(got[1][:2], ("Dead", b"poison"))
        nowhere = offset_msg_id(parse_address(broker.config.advertised_address), 10**9)
        self.assertIn(f"no message {nowhere}", (await self.post("dlq/DG/resend", {"msg_id": nowhere}, 404))["error"])


class AclTests(DashboardTestCase):
    async def test_requests_are_signed_with_the_named_account(self) -> None:
        """With ACL on the broker, a request without an account is asked for one (401); an
        account's requests are signed with it, so a wrong secret is refused (403), a plain account
        reads but may not create a topic, and an admin account may."""
        cluster = await self.acl_cluster()
        await self.dashboard(cluster.namesrv_addr, writes=True, access=AclAccounts(reactor, cluster.namesrv_addr))

        for path in ("/api/topics", "/", "/app.js"):  # the pages ask too, so the browser asks once
            status, headers, body = await self.fetch(b"GET", path)
            self.assertEqual(status, 401, body)
            self.assertEqual(headers.getRawHeaders(b"www-authenticate"),
                             [b'Basic realm="rocketpy ACL account", charset="UTF-8"'])
        self.auth = ("RocketMQ", "wrong-secret")
        self.assertIn("Check signature failed for accessKey=RocketMQ", (await self.get("topics", 403))["error"])
        self.auth = USER
        self.assertEqual((await self.fetch(b"GET", "/"))[0], 200)
        self.assertIn("TBW102", [t["topic"] for t in await self.get("topics")])
        [broker] = (await self.get("overview"))["brokers"]
        self.assertIsNone(broker["error"])
        refused = await self.post("topics", {"topic": "ByUser"}, 403)
        self.assertIn("Need admin permission for request code=17", refused["error"])
        self.auth = ADMIN
        self.assertEqual((await self.post("topics", {"topic": "ByAdmin"}))["topic"], "ByAdmin")
        self.assertIsNotNone(cluster.brokers["broker-a"].topics.select_topic_config("ByAdmin"))


class EndpointTests(DashboardTestCase):
    async def test_one_port_serves_metrics_and_the_dashboard(self) -> None:
        """``http_service`` (what ``--http`` builds) serves /metrics, the pages and /api/ on one port,
        its API asks the broker's own name server, and ``writes`` is ``--http-admin``."""
        cluster = await self.cluster()
        for writes in (False, True):
            http = http_service(reactor, "tcp:0:interface=127.0.0.1", cluster.brokers["broker-a"], writes)
            http.startService()
            self.addCleanup(http.stopService)
            await http.when_started()
            assert http.listening_port is not None
            self.base = f"http://127.0.0.1:{http.listening_port.getHost().port}"  # type: ignore[attr-defined]
            self.assertEqual(await self.get(""), {"writes": writes})
            [broker] = (await self.get("overview"))["brokers"]
            self.assertEqual(broker["broker_name"], "broker-a")
            status, _, page = await self.fetch(b"GET", "/")
            self.assertEqual(status, 200)
            self.assertIn(b"<title>rocketpy dashboard</title>", page)
            status, _, metrics = await self.fetch(b"GET", "/metrics")
            self.assertEqual(status, 200)
            self.assertIn(b"rocketmq_broker_tps", metrics)


class ReplicationTests(DashboardTestCase):
    async def test_master_and_slave(self) -> None:
        """A master and its slave: both in the overview with their roles; the replication view
        groups them under their broker name and shows the slave catching up to 0 bytes behind."""
        cluster = await self.cluster()
        master = cluster.brokers["broker-a"]
        await master.registration.register_all()
        await cluster.add_broker("broker-a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1)
        await self.dashboard(cluster.namesrv_addr)
        producer = await self.producer(cluster)
        for i in range(5):
            await producer.send(Message("Copied", b"m%d" % i))
        members: list[Any] = []
        for _ in range(200):
            [replica] = await self.get("replication")
            members = replica["members"]
            if [m["behind_bytes"] for m in members] == [None, 0] and members[0]["commit_log_max_offset"] > 0:
                break
            await pause()
        self.assertEqual([(m["broker_id"], m["role"], m["behind_bytes"]) for m in members],
                         [(0, "ASYNC_MASTER", None), (1, "SLAVE", 0)])
        self.assertEqual(members[0]["commit_log_max_offset"], members[1]["commit_log_max_offset"])
        overview = await self.get("overview")
        self.assertEqual(sorted((b["broker_name"], b["broker_id"]) for b in overview["brokers"]),
                         [("broker-a", 0), ("broker-a", 1)])
