"""The official RocketMQ 5.x Python client (``rocketmq-python-client``) against a rocketpy process.

The client runs from its own virtual environment (:mod:`tests.interop.v5venv`) through
``v5_client.py``; rocketpy runs as in :mod:`tests.interop.test_cpp`, with its gRPC endpoint on
a free port. 4.x senders are rocketpy's blocking Producer and, when it loads, the C++ client.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

from twisted.trial.unittest import SkipTest

from rocketpy.common.message import offset_msg_id
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.interop.test_cpp import _SKIP as CPP_SKIP
from tests.interop.test_cpp import REPO, CppHarness, Rocketpy, query
from tests.acl.test_broker import ACL, USER
from tests.interop.v5venv import v5_python

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "v5_client.py")
CHILD_TIMEOUT = 90.0
SEND_4X = """
import sys
from rocketpy.blocking import Message, Producer
producer = Producer("PG4", sys.argv[1]).start()
for i in range(int(sys.argv[3])):
    producer.send(Message(sys.argv[2], f"py4-{i}".encode(), properties={"TAGS": "Tag4", "index": str(i)}))
producer.shutdown()
"""


class V5Harness(CppHarness):
    """A rocketpy process (with ``extra`` options) and the 5.x client harness against it (with ``child_env``)."""

    extra: tuple[str, ...] = ()
    child_env: dict[str, str] = {}

    def setUp(self) -> None:
        try:
            self.python5 = v5_python()
        except RuntimeError as e:
            raise SkipTest(f"cannot install the RocketMQ 5.x client in a venv: {e}") from None
        self.workdir = os.path.abspath(self.mktemp())
        self.home = os.path.join(self.workdir, "home")
        os.makedirs(self.home)
        self.rocketpy = self.make_rocketpy()
        self.addCleanup(self.rocketpy.stop)
        self.rocketpy.start()
        self.endpoint = f"127.0.0.1:{self.rocketpy.grpc_port}"

    def make_rocketpy(self) -> Rocketpy:
        return Rocketpy(self.workdir, extra=self.extra, grpc=True)

    def run_v5(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the 5.x harness to its end (a timeout fails the test, with rocketpy's log)."""
        env = dict(os.environ, HOME=self.home, **self.child_env)
        env.pop("PYTHONPATH", None)  # the venv's rocketmq, not the C++ wrapper or this repo
        try:
            return subprocess.run([self.python5, HARNESS, *args, "--endpoint", self.endpoint], env=env,
                                  capture_output=True, text=True, timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            self.fail(f"5.x client {args!r} timed out:\n{e.stderr!r}\n--- rocketpy ---\n{self.rocketpy.log_tail()}")

    def spawn_v5(self, *args: str) -> subprocess.Popen[str]:
        """Start the 5.x harness in the background (killed at the test's end)."""
        env = dict(os.environ, HOME=self.home, **self.child_env)
        env.pop("PYTHONPATH", None)
        child = subprocess.Popen([self.python5, HARNESS, *args, "--endpoint", self.endpoint], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(child.communicate)
        self.addCleanup(child.kill)
        return child

    def v5(self, *args: str) -> list[dict[str, Any]]:
        """Run the 5.x harness; its JSON events (a failure shows its stderr and rocketpy's log)."""
        done = self.run_v5(*args)
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not events or events[-1]["event"] != "done":
            self.fail(f"5.x client {args!r} failed ({done.returncode}):\n{done.stderr[-3000:]}\n"
                      f"--- rocketpy ---\n{self.rocketpy.log_tail()}")
        return events

    def received(self, topic: str, group: str, expect: int, *more: str) -> list[dict[str, Any]]:
        events = self.v5("consume", "--topic", topic, "--group", group, "--expect", str(expect), "--timeout", "30",
                         *more)
        return [e for e in events if e["event"] == "message"]


class V5ClientTests(V5Harness):
    """Sends and receives of the 5.x client, alone and across protocol generations."""

    def test_v5_producer_to_simple_consumer(self) -> None:
        """5.x Producer → 5.x SimpleConsumer: bodies, tags, ids and properties arrive, acked once."""
        sent = [e for e in self.v5("produce", "--topic", "T5", "--count", "5", "--tag", "TagA")
                if e["event"] == "sent"]
        self.assertEqual(len(sent), 5)
        got = self.received("T5", "G5", 5)
        self.assertEqual(sorted(e["body"] for e in got), [f"v5-{i}" for i in range(5)])
        self.assertEqual({e["message_id"] for e in got}, {e["message_id"] for e in sent})
        self.assertEqual({e["tag"] for e in got}, {"TagA"})
        self.assertEqual(sorted(e["properties"]["index"] for e in got), [str(i) for i in range(5)])
        self.assertEqual({e["delivery_attempt"] for e in got}, {1})
        # All five were acked: the group's committed offsets (4.x admin view) reach the queues' ends.
        self.assertEqual(broker_offsets(self.rocketpy.broker_port, "G5", "T5"), (5, 5))

    def test_push_consumer_redelivers_after_failure(self) -> None:
        """5.x PushConsumer: a FAILURE answer brings the message back (attempt 2) after the back-off."""
        self.v5("produce", "--topic", "TP", "--count", "3")
        events = self.v5("push", "--topic", "TP", "--group", "GP", "--expect", "3", "--fail-times", "1",
                         "--timeout", "40")
        self.assertEqual(events[-1]["count"], 3)
        attempts = sorted((e["body"], e["delivery_attempt"]) for e in events if e["event"] == "message")
        self.assertEqual(attempts, sorted((f"v5-{i}", n) for i in range(3) for n in (1, 2)))
        # The second deliveries came from the group's POP retry topic: the topic's own progress moved on.
        self.assertEqual(broker_offsets(self.rocketpy.broker_port, "GP", "TP"), (3, 3))
        self.assertEqual(queue_max_offset(self.rocketpy.broker_port, "%RETRY%GP_TP"), 3)

    def test_fifo_group_in_order(self) -> None:
        """A FIFO message group (5.x Producer) reaches a consumeMessageOrderly group's SimpleConsumer in order."""
        body = json.dumps({"groupName": "GF", "consumeMessageOrderly": True}).encode()
        request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
        self.assertEqual(query(self.rocketpy.broker_port, request).code, 0)
        self.v5("produce", "--topic", "TF", "--count", "6", "--message-group", "order-1")
        got = self.received("TF", "GF", 6)
        self.assertEqual([e["body"] for e in got], [f"v5-{i}" for i in range(6)])

    def test_4x_producers_to_simple_consumer(self) -> None:
        """rocketpy's 4.x Producer (and the C++ one when it loads) → 5.x SimpleConsumer."""
        env = dict(os.environ, PYTHONPATH=REPO)
        subprocess.run([sys.executable, "-c", SEND_4X, self.rocketpy.namesrv, "T4", "3"], env=env, check=True,
                       timeout=CHILD_TIMEOUT)
        expected = [f"py4-{i}" for i in range(3)]
        if CPP_SKIP is None:
            self.produce("T4", "sync", 2, "--body-prefix", "cpp", "--tag", "TagC")
            expected += ["cpp-0", "cpp-1"]
        got = self.received("T4", "G4", len(expected))
        self.assertEqual(sorted(e["body"] for e in got), sorted(expected))
        self.assertEqual({e["tag"] for e in got if e["body"].startswith("py4")}, {"Tag4"})

    def test_v5_producer_to_cpp_push_consumer(self) -> None:
        """5.x Producer → the 4.x C++ push consumer: the same store serves both generations."""
        if CPP_SKIP is not None:
            raise SkipTest(CPP_SKIP)
        self.v5("produce", "--topic", "T45", "--count", "3", "--tag", "TagA")
        got = self.consume("T45", "G45", 3)
        self.assertEqual(sorted(base64.b64decode(e["body"]) for e in got), [f"v5-{i}".encode() for i in range(3)])
        self.assertEqual({e["tags"] for e in got}, {"TagA"})


PULL_4X = """
import json, sys
from rocketpy.blocking import PullConsumer
consumer = PullConsumer("PULL4", sys.argv[1]).start()
for topic in sys.argv[2:]:
    for mq in consumer.fetch_subscribe_queues(topic):
        for m in consumer.pull(mq, "*", 0).messages:
            print(json.dumps({"topic": m.topic, "body": m.body.decode(), "properties": m.properties}))
consumer.shutdown()
"""


class V5SimpleConsumerTests(V5Harness):
    """The official SimpleConsumer's invisibility: change it, let it run out, exhaust the attempts (and a
    FIFO PushConsumer's dead letters)."""

    def test_invisibility_redelivery_and_dead_letters(self) -> None:
        """One message, four SimpleConsumer groups at once in one client process, every receive invisible
        10 s (ProxyConfig's least): GC changes its invisibility to 1 s, gets it back (attempt 2) before the
        10 s end, changes it again and acks it under the new handle; GR lets it run out and gets it back
        (attempt 2) through the POP retry topic, after being refused receives invisible 0 s and 1 s; GD
        (retryMaxTimes 1) makes it visible at once twice, then never sees it again: it is in %DLQ%GD, where
        a 4.x PullConsumer reads the same message; GO, the same as a FIFO group, gets it back in place, not
        through a retry topic. Meanwhile a FIFO group's PushConsumer fails it until it forwards it to the DLQ."""
        for config in ({"groupName": "GD", "retryMaxTimes": 1},
                       {"groupName": "GO", "retryMaxTimes": 1, "consumeMessageOrderly": True},
                       {"groupName": "GF", "retryMaxTimes": 1, "consumeMessageOrderly": True}):
            request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                              json.dumps(config).encode())
            self.assertEqual(query(self.rocketpy.broker_port, request).code, 0)
        [sent] = [e for e in self.v5("produce", "--topic", "TS", "--count", "1") if e["event"] == "sent"]
        fifo = self.spawn_v5("push", "--topic", "TS", "--group", "GF", "--expect", "1", "--fail-times", "99")
        events = self.v5("simple", "--topic", "TS",
                         "--scenario", "GC", "10", "change:1,change:10+ack,quiet:12",
                         "--scenario", "GR", "10", "refuse:0,refuse:1,leave,ack,quiet:2",
                         "--scenario", "GD", "10", "change:0,change:0,quiet:4",
                         "--scenario", "GO", "10", "change:1,change:0,quiet:4")
        got: dict[str, list[dict[str, Any]]] = {"GC": [], "GR": [], "GD": [], "GO": []}
        for e in events:
            if e["event"] == "message":
                got[e["group"]].append(e)
        for group, deliveries in got.items():  # the same message each time, under its own topic's name
            self.assertEqual({(e["message_id"], e["body"], e["topic"], e["tag"], json.dumps(e["keys"]),
                               json.dumps(e["properties"])) for e in deliveries},
                             {(sent["message_id"], "v5-0", "TS", "TagA", '["key-0"]', '{"index": "0"}')}, group)
        # Changed to 1 s: back after that second, before the 10 s would have ended; then changed to 10 s
        # and acked under the new handle: never again (quiet for 12 s, past the 10 s of its second receive).
        first, second = got["GC"]
        self.assertEqual([(e["step"], e["delivery_attempt"]) for e in got["GC"]],
                         [("change:1", 1), ("change:10+ack", 2)])
        self.assertGreaterEqual(second["received_ms"], first["received_ms"] + 1000)
        self.assertLess(second["received_ms"], first["asked_ms"] + 10_000)
        # Left alone: back once the 10 s ran out (not before), attempt 2, then acked for good.
        first, second = got["GR"]
        self.assertEqual([(e["step"], e["delivery_attempt"]) for e in got["GR"]], [("leave", 1), ("ack", 2)])
        self.assertGreaterEqual(second["received_ms"], first["asked_ms"] + 10_000)
        self.assertLess(second["received_ms"], first["received_ms"] + 18_000)
        refused = [e for e in events if e["event"] == "refused"]
        self.assertEqual([(e["group"], e["code"]) for e in refused], [("GR", pb.Code.ILLEGAL_INVISIBLE_TIME)] * 2)
        self.assertIn("invisibleTime: 1000", refused[1]["error"])
        # retryMaxTimes 1: two deliveries, then the dead-letter queue.
        self.assertEqual([(e["step"], e["delivery_attempt"]) for e in got["GD"]], [("change:0", 1), ("change:0", 2)])
        # GO, a FIFO group (retryMaxTimes 1): back in place after the 1 s, attempt 2, then to the DLQ.
        first, second = got["GO"]
        self.assertEqual([(e["step"], e["delivery_attempt"]) for e in got["GO"]], [("change:1", 1), ("change:0", 2)])
        self.assertGreaterEqual(second["received_ms"], first["received_ms"] + 1000)
        self.assertEqual(broker_offsets(self.rocketpy.broker_port, "GO", "TS"), (1, 1))
        self.assertEqual(queue_max_offset(self.rocketpy.broker_port, "%RETRY%GO_TS"), 0)  # FIFO: never revived
        # Each redelivery was a copy on the group's POP retry topic; nothing is left in flight on either.
        for group, copies in (("GC", 1), ("GR", 1), ("GD", 2)):
            self.assertEqual(broker_offsets(self.rocketpy.broker_port, group, "TS"), (1, 1), group)
            self.assertEqual(broker_offsets(self.rocketpy.broker_port, group, f"%RETRY%{group}_TS"), (copies, copies),
                             group)
        # GF, a FIFO group, with a PushConsumer whose listener always fails: the client retries it
        # itself (same delivery) until its 2 attempts are used, then forwards it to the DLQ.
        deadline = time.monotonic() + 30
        while queue_max_offset(self.rocketpy.broker_port, "%DLQ%GF") < 1:
            self.assertLess(time.monotonic(), deadline, "the FIFO PushConsumer never forwarded its message")
            time.sleep(0.2)
        fifo.kill()
        pushed = [json.loads(line) for line in fifo.communicate()[0].splitlines() if line.startswith("{")]
        self.assertEqual([(e["message_id"], e["delivery_attempt"]) for e in pushed], [(sent["message_id"], 1)] * 2)
        self.assertEqual(broker_offsets(self.rocketpy.broker_port, "GF", "TS"), (1, 1))
        pulled = subprocess.run([sys.executable, "-c", PULL_4X, self.rocketpy.namesrv, "%DLQ%GD", "%DLQ%GO",
                                 "%DLQ%GF"],
                                env=dict(os.environ, PYTHONPATH=REPO), capture_output=True, text=True,
                                timeout=CHILD_TIMEOUT)
        self.assertEqual(pulled.returncode, 0, pulled.stderr[-3000:])
        dead = [json.loads(line) for line in pulled.stdout.splitlines() if line.startswith("{")]
        self.assertEqual([(e["topic"], e["body"], e["properties"]["UNIQ_KEY"], e["properties"]["index"]) for e in dead],
                         [(dlq, "v5-0", sent["message_id"], "0") for dlq in ("%DLQ%GD", "%DLQ%GO", "%DLQ%GF")])
        self.assertEqual(dead[0]["properties"]["RETRY_TOPIC"], "TS")


def queue_max_offset(port: int, topic: str, queue_id: int = 0) -> int:
    """A queue's max offset (GET_MAX_OFFSET; 0 for a topic the broker does not have yet)."""
    request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    response = query(port, request)
    return int(response.ext_fields.get("offset", 0)) if response.code == 0 else 0


def broker_offsets(port: int, group: str, topic: str) -> tuple[int, int]:
    """The sums of a group's broker and consumer offsets over the topic's queues (GET_CONSUME_STATS)."""
    stats = query(port, RemotingCommand.request(
        RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})).body.decode()
    pairs = [(int(b), int(c)) for b, c in re.findall(r'"brokerOffset":(\d+),"consumerOffset":(\d+)', stats)]
    return sum(b for b, _ in pairs), sum(c for _, c in pairs)


class V5TransactionTests(V5Harness):
    """Transactional messages of the 5.x Producer; the broker's checks every second, after 1 s."""

    extra = ("--transaction-check-interval", "1000", "--transaction-timeout", "1000")

    def test_commit_rollback_and_check(self) -> None:
        """Committed and check-committed messages reach a 5.x SimpleConsumer (and the C++ 4.x push
        consumer); the rolled-back one never reaches the topic; the undecided one is resolved by the
        producer's TransactionChecker through the broker's check."""
        events = self.v5("transaction", "--topic", "TT", "--bodies", "commit-1", "rollback-2", "unknown-3")
        sent = {e["body"]: e for e in events if e["event"] == "sent"}
        self.assertEqual(set(sent), {"commit-1", "rollback-2", "unknown-3"})
        self.assertTrue(all(e["transaction_id"] for e in sent.values()), sent)
        self.assertEqual(events[-1]["unchecked"], [], f"never checked:\n{self.rocketpy.log_tail()}")
        self.assertIn("unknown-3", {e["body"] for e in events if e["event"] == "checked"})
        got = self.received("TT", "GT", 2)
        self.assertEqual(sorted(e["body"] for e in got), ["commit-1", "unknown-3"])
        self.assertEqual({e["message_id"] for e in got}, {sent["commit-1"]["message_id"], sent["unknown-3"]["message_id"]})
        self.assertEqual(broker_offsets(self.rocketpy.broker_port, "GT", "TT"), (2, 2))  # never the rolled-back one
        if CPP_SKIP is None:
            cpp = self.consume("TT", "GT4", 2)
            self.assertEqual(sorted(base64.b64decode(e["body"]) for e in cpp), [b"commit-1", b"unknown-3"])


class V5CommandTests(V5Harness):
    """The broker's requests to a live official 5.x consumer over its Telemetry stream."""

    def test_unanswered_verify_times_out_for_the_admin(self) -> None:
        """mqadmin consumeMessage to a 5.x PushConsumer becomes a VerifyMessageCommand; the official
        Python client does not answer it, so the admin gets CONSUME_MSG_TIMEOUT after 5 s, not a hang."""
        self.v5("produce", "--topic", "TV", "--count", "1")
        self.spawn_v5("push", "--topic", "TV", "--group", "GV", "--expect", "99", "--timeout", "40")
        connections = RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "GV"})
        deadline = time.monotonic() + 20
        while (listed := query(self.rocketpy.broker_port, connections)).code != 0:
            self.assertLess(time.monotonic(), deadline, "the 5.x consumer never registered")
            time.sleep(0.2)
        [client_id] = re.findall(r'"clientId":"([^"]+)"', listed.body.decode())
        first_message = offset_msg_id(("127.0.0.1", self.rocketpy.broker_port), 0)  # a fresh store
        started = time.monotonic()
        response = query(self.rocketpy.broker_port, RemotingCommand.request(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "GV", "clientId": client_id,
                                                   "msgId": first_message}), timeout=15)
        self.assertEqual(response.code, ResponseCode.CONSUME_MSG_TIMEOUT, response.remark)
        self.assertIn("did not answer the verify_message_command", response.remark or "")
        self.assertLess(time.monotonic() - started, 10)


class V5AclTests(V5Harness):
    """The 5.x client with ``Credentials(ak, sk)`` against rocketpy with ``--acl-enable``."""

    def setUp(self) -> None:
        acl = os.path.abspath(self.mktemp())
        with open(acl, "w") as f:
            f.write(ACL)
        self.extra = ("--acl-enable", "--acl-file", acl)
        super().setUp()

    def test_signed_client_sends_and_receives(self) -> None:
        """Signed with the account's keys: send to TopicA and receive in GroupA; a wrong secret is refused."""
        user = ("--access-key", USER[0], "--secret-key", USER[1])
        sent = [e for e in self.v5("produce", "--topic", "TopicA", "--count", "2", *user) if e["event"] == "sent"]
        self.assertEqual(len(sent), 2)
        events = self.v5("consume", "--topic", "TopicA", "--group", "GroupA", "--expect", "2", "--timeout", "30", *user)
        self.assertEqual(sorted(e["body"] for e in events if e["event"] == "message"), ["v5-0", "v5-1"])
        refused = self.run_v5("produce", "--topic", "TopicA", "--access-key", USER[0], "--secret-key", "wrong-secret")
        self.assertNotEqual(refused.returncode, 0)
        self.assertNotIn('"event": "sent"', refused.stdout)
        self.assertIn("Check signature failed for accessKey=RocketMQ", self.rocketpy.log_tail())


class TLSRocketpy(Rocketpy):
    """A rocketpy process with ``--tls-mode enforcing``: ready once its gRPC port completes a TLS
    handshake trusting ``trust`` (its 4.x ports speak only TLS, which the name server query does not)."""

    def __init__(self, workdir: str, trust: str, extra: tuple[str, ...]) -> None:
        super().__init__(workdir, extra=extra, grpc=True)
        with open(trust, "rb") as f:
            self.trust = f.read()

    def _wait_registered(self) -> None:
        import grpc

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"rocketpy exited with {self.process.returncode}:\n{self.log_tail()}")
            channel = grpc.secure_channel(f"127.0.0.1:{self.grpc_port}", grpc.ssl_channel_credentials(self.trust))
            try:
                grpc.channel_ready_future(channel).result(timeout=1)
                return
            except grpc.FutureTimeoutError:
                pass
            finally:
                channel.close()
        raise AssertionError(f"rocketpy's gRPC port did not complete a TLS handshake:\n{self.log_tail()}")


class V5TLSTests(V5Harness):
    """The 5.x client with ``tls_enable=True`` against rocketpy with ``--tls-mode enforcing``, trusting the
    server's certificate through ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` (the client's
    ``grpc.ssl_channel_credentials()`` takes no CA of its own)."""

    def setUp(self) -> None:
        from tests.remoting.certs import CertificateSet

        self.certs = CertificateSet(os.path.abspath(self.mktemp()))
        self.extra = ("--tls-cert", self.certs.self_signed, "--tls-key", self.certs.self_signed_key,
                      "--tls-mode", "enforcing")
        self.child_env = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": self.certs.self_signed}
        super().setUp()

    def make_rocketpy(self) -> Rocketpy:
        return TLSRocketpy(self.workdir, self.certs.self_signed, self.extra)

    def test_tls_producer_and_consumer(self) -> None:
        """Over TLS: a 5.x Producer's messages reach a 5.x SimpleConsumer; without TLS the client gets nothing sent."""
        sent = [e for e in self.v5("produce", "--topic", "TS", "--count", "2", "--tls") if e["event"] == "sent"]
        self.assertEqual(len(sent), 2)
        got = self.received("TS", "GS", 2, "--tls")
        self.assertEqual(sorted(e["body"] for e in got), ["v5-0", "v5-1"])
        plain = self.run_v5("produce", "--topic", "TS")
        self.assertNotEqual(plain.returncode, 0)
        self.assertNotIn('"event": "sent"', plain.stdout)
