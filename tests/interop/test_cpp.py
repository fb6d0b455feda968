"""The official C++ client (PyPI ``rocketmq`` 0.4.4) against a real rocketpy process.

rocketpy runs as ``python -m twisted rocketpy`` (name server + broker, free loopback
ports, a temporary store) and the C++ client runs in child processes driven by
``cpp_client.py``; this process only orchestrates, with bounded waits.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import weakref
from typing import Any

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from rocketpy.remoting import codec
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand
from tests.ports import free_port

try:
    import rocketmq.client  # noqa: F401  (the C++ library loads here)
except Exception as e:  # ImportError, or OSError from loading librocketmq.so
    _SKIP: str | None = f"the RocketMQ C++ client is not usable here: import rocketmq.client failed: {e}"
else:
    _SKIP = None

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpp_client.py")
START_TIMEOUT = 30.0
CHILD_TIMEOUT = 90.0



def exchange(sock: socket.socket, request: RemotingCommand) -> RemotingCommand:
    """Send one request on a blocking socket and read one whole response frame."""
    sock.sendall(codec.encode(request))
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a full response")
        data += chunk
    return codec.decode(data[4:])


def query(port: int, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
    """One blocking request/response over a fresh connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        return exchange(s, request)


def child_events(returncode: int, out: str, err: str) -> list[dict[str, Any]] | None:
    """A harness child's JSON events, or None when it failed.

    It succeeded when it got to ``done``. The 1.x C++ client sometimes aborts inside its own
    ``shutdown()`` (``boost::thread_interrupted``, after ``done``, before ``stopped``): that
    client-side crash is tolerated; any other non-zero exit is a failure.
    """
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    if "done" not in names:
        return None
    if returncode != 0 and ("stopped" in names or "thread_interrupted" not in err):
        return None
    return events


def _listening() -> socket.socket:
    """A listening, non-blocking socket on a port the kernel picks: handed to rocketpy as ``fd:N``,
    so no port is guessed free and raced for by parallel tests."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class Rocketpy:
    """A ``rocketpy`` name server + broker process on listening sockets of ours and one store directory.

    The sockets live as long as this object, so a restart (:meth:`stop`, :meth:`start`) keeps the ports
    (connections made meanwhile wait in the backlog); the HA port is the kernel's pick (no test needs it).
    """

    def __init__(self, workdir: str, flush: str = "ASYNC_FLUSH", extra: tuple[str, ...] = (),
                 grpc: bool = False) -> None:
        """:param grpc: serve the 5.x endpoint too (only the 5.x tests need it), on a port guessed free:
        the gRPC server takes no open socket."""
        self.workdir = workdir
        self.flush = flush
        self.extra = extra  # more ``twist rocketpy`` options
        self._namesrv_socket, self._broker_socket = _listening(), _listening()
        for sock in (self._namesrv_socket, self._broker_socket):
            weakref.finalize(self, sock.close)
        self.namesrv_port = self._namesrv_socket.getsockname()[1]
        self.broker_port = self._broker_socket.getsockname()[1]
        self.grpc_port = free_port() if grpc else 0  # not its default 8081: tests run in parallel
        self.namesrv = f"127.0.0.1:{self.namesrv_port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(workdir, "rocketpy.log")

    def start(self) -> None:
        fds = (self._namesrv_socket.fileno(), self._broker_socket.fileno())
        args = [
            sys.executable, "-m", "twisted", "rocketpy",
            "--namesrv-listen", f"fd:{fds[0]}", "--namesrv-addr", self.namesrv,
            "--listen", f"fd:{fds[1]}", "--advertised-address", f"127.0.0.1:{self.broker_port}",
            "--ha-listen", "tcp:0:interface=127.0.0.1",
            # the 5.x endpoint on a free port (its default 8081 is one per machine), or none
            "--grpc-listen", f"tcp:{self.grpc_port}:interface=127.0.0.1" if self.grpc_port else "none",
            "--store-dir", os.path.join(self.workdir, "store"),
            "--namesrv-config-dir", os.path.join(self.workdir, "namesrv"),
            "--commit-log-file-size", str(16 * 1024 * 1024),
            "--consume-queue-file-size", str(20 * 10_000),
            "--max-hash-slot-num", "10000", "--max-index-num", "40000",
            "--flush-disk-type", self.flush, "--http", "none", *self.extra,
        ]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            pass_fds=fds)
        self._wait_registered()

    def _wait_registered(self) -> None:
        """Until the name server has a route for TBW102, i.e. the broker registered."""
        deadline = time.monotonic() + START_TIMEOUT
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"rocketpy exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if query(self.namesrv_port, request).code == 0:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"rocketpy did not register its broker in {START_TIMEOUT}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM (clean stop: offsets and store flushed), then wait."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"rocketpy did not stop on SIGTERM:\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"


class CppHarness(SynchronousTestCase):
    """A rocketpy process and C++ client children (skipped when the C++ client cannot load)."""

    def setUp(self) -> None:
        if _SKIP is not None:
            raise SkipTest(_SKIP)
        self.workdir = os.path.abspath(self.mktemp())
        os.makedirs(self.workdir)
        self.home = os.path.join(self.workdir, "home")  # the C++ client logs under ~/logs/rocketmq-cpp
        os.makedirs(self.home)

    def start(self, flush: str = "ASYNC_FLUSH", extra: tuple[str, ...] = ()) -> None:
        """Start rocketpy (stopped at cleanup) with ``extra`` options."""
        self.rocketpy = Rocketpy(self.workdir, flush, extra)
        self.addCleanup(self.rocketpy.stop)
        self.rocketpy.start()

    # -- child processes -----------------------------------------------------

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        env = dict(os.environ, HOME=self.home)
        return subprocess.Popen(
            [sys.executable, HARNESS, *args, "--namesrv", self.rocketpy.namesrv],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )

    def finish(self, child: subprocess.Popen[str]) -> list[dict[str, Any]]:
        """Wait for a child; its JSON events, or a failure with its stderr, C++ log and rocketpy log."""
        try:
            out, err = child.communicate(timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        events = child_events(child.returncode, out, err)
        if events is None:
            self.fail(
                f"C++ client {child.args!r} failed ({child.returncode}):\n{err[-3000:]}\n"
                f"--- C++ log ---\n{self.cpp_log_tail()}\n--- rocketpy ---\n{self.rocketpy.log_tail()}"
            )
        return events

    def run_child(self, *args: str) -> list[dict[str, Any]]:
        return self.finish(self.spawn(*args))

    def produce(self, topic: str, mode: str, count: int, *extra: str) -> list[dict[str, Any]]:
        events = self.run_child("produce", "--topic", topic, "--mode", mode, "--count", str(count), *extra)
        sent = [e for e in events if e["event"] == "sent"]
        self.assertTrue(all(e["status"] in (0, None) for e in sent), sent)
        return sent

    def consume(self, topic: str, group: str, expect: int, *extra: str) -> list[dict[str, Any]]:
        events = self.run_child("consume", "--topic", topic, "--group", group, "--expect", str(expect), *extra)
        return [e for e in events if e["event"] == "message"]

    def wait_for_held_pulls(self, count: int, seconds: float = 30.0) -> None:
        """Until the broker holds ``count`` long-polling pulls (GET_BROKER_RUNTIME_INFO's heldPullRequests)."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        deadline = time.monotonic() + seconds
        while int(json.loads(query(self.rocketpy.broker_port, request).body)["table"]["heldPullRequests"]) < count:
            self.assertLess(time.monotonic(), deadline, f"fewer than {count} pulls held")
            time.sleep(0.1)

    def cpp_log_tail(self, lines: int = 30) -> str:
        folder = os.path.join(self.home, "logs", "rocketmq-cpp")
        try:
            newest = max((os.path.join(folder, n) for n in os.listdir(folder)), key=os.path.getmtime)
            with open(newest, encoding="utf-8", errors="replace") as f:
                kept = [line for line in f if "session_credentials" not in line]
            return "".join(kept[-lines:])
        except (OSError, ValueError):
            return "(no C++ log)"

    @staticmethod
    def body(message: dict[str, Any]) -> bytes:
        return base64.b64decode(message["body"])


class CppClientTests(CppHarness):
    """Produce and consume with the real C++ client."""

    def test_send_modes_and_consume_all(self) -> None:
        """Auto-create a topic; sync, oneway, orderly and batch sends all reach a `*` consumer intact."""
        self.start()
        topic = "InteropAll"
        sync = self.produce(topic, "sync", 3, "--tag", "TagA", "--keys", "sync", "--prop", "color=red",
                            "--body-prefix", "sync")
        self.assertEqual(len({e["msg_id"] for e in sync}), 3)
        self.produce(topic, "sync", 1, "--tag", "TagA", "--keys", "big", "--body-prefix", "big", "--size", "9000")
        self.produce(topic, "oneway", 2, "--tag", "TagB", "--keys", "oneway", "--body-prefix", "oneway")
        orderly = self.produce(topic, "orderly", 3, "--tag", "TagC", "--keys", "orderly", "--body-prefix", "orderly",
                               "--order-key", "6")
        self.produce(topic, "batch", 3, "--tag", "TagD", "--keys", "batch", "--body-prefix", "batch")
        got = self.consume(topic, "CID_INTEROP_ALL", 12, "--show-prop", "color", "--show-prop", "CLUSTER")
        by_key = {m["keys"]: m for m in got}
        self.assertEqual(len(got), 12, sorted(by_key))
        self.assertEqual(len(by_key), 12)
        for i in range(3):
            m = by_key[f"sync-{i}"]
            self.assertEqual((self.body(m), m["tags"], m["topic"]), (b"sync-%d" % i, "TagA", topic))
            self.assertEqual(m["props"], {"color": "red", "CLUSTER": "DefaultCluster"})
            self.assertIn(m["msg_id"], {e["msg_id"] for e in sync})
        big = self.body(by_key["big-0"])
        self.assertEqual((len(big), big[:6]), (9000, b"big-0|"))
        self.assertEqual({self.body(by_key[f"oneway-{i}"]) for i in range(2)}, {b"oneway-0", b"oneway-1"})
        orderly_queue = {by_key[f"orderly-{i}"]["queue_id"] for i in range(3)}
        self.assertEqual(len(orderly_queue), 1)
        self.assertEqual(
            [by_key[f"orderly-{i}"]["queue_offset"] for i in range(3)], [e["offset"] for e in orderly]
        )
        self.assertEqual([by_key[f"batch-{i}"]["tags"] for i in range(3)], ["TagD"] * 3)
        self.assertEqual(len({by_key[f"batch-{i}"]["queue_id"] for i in range(3)}), 1)

    def test_tag_subscription(self) -> None:
        """A `TagB` consumer gets the TagB messages only (broker in SYNC_FLUSH: WAIT=true sends wait for the disk)."""
        self.start("SYNC_FLUSH")
        topic = "InteropTags"
        self.produce(topic, "sync", 2, "--tag", "TagA", "--keys", "a")
        self.produce(topic, "sync", 3, "--tag", "TagB", "--keys", "b")
        self.produce(topic, "sync", 1, "--keys", "untagged")
        got = self.consume(topic, "CID_INTEROP_TAGS", 3, "--expression", "TagB", "--linger", "3")
        self.assertEqual(sorted(m["keys"] for m in got), ["b-0", "b-1", "b-2"])

    def test_bad_input_keeps_the_connection(self) -> None:
        """Bad requests get their error codes on one connection, which then still serves a good one."""
        self.start()
        pull = {"consumerGroup": "G", "topic": "TBW102", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
                "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                "subVersion": "0"}
        send = {"a": "P", "b": "BadInput", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0"}
        cases = [
            (RemotingCommand.request(9999), 3),
            (RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "BadInput"}, b"x"), 1),
            (RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, dict(send, e="zero"), b"x"), 1),
            (RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, dict(send, e="99"), b"x"), 1),
            (RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(pull, topic="NoSuchTopic")), 17),
            (RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(pull, queueId="99")), 1),
            (RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(pull, maxMsgNums="many")), 1),
            (RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(pull, queueOffset="0")), 19),
            (RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send, b"x"), 0),
        ]
        with socket.create_connection(("127.0.0.1", self.rocketpy.broker_port), timeout=10) as sock:
            for opaque, (request, code) in enumerate(cases, 1):
                request.opaque = opaque
                response = exchange(sock, request)
                self.assertEqual((response.code, response.opaque), (code, opaque), (request, response.remark))
                self.assertTrue(all(isinstance(v, str) for v in response.ext_fields.values()))

    def test_offsets_resume_after_restart(self) -> None:
        """After a broker restart a group resumes at its committed offsets; a new message wakes its pull."""
        self.start()
        topic, group = "InteropResume", "CID_INTEROP_RESUME"
        self.produce(topic, "sync", 4, "--keys", "before")
        first = self.consume(topic, group, 4, "--linger", "1")
        self.assertEqual(sorted(m["keys"] for m in first), [f"before-{i}" for i in range(4)])
        self.rocketpy.stop()
        self.rocketpy.start()
        consumer = self.spawn("consume", "--topic", topic, "--group", group, "--expect", "2", "--linger", "3")
        self.assertEqual(json.loads(consumer.stdout.readline())["event"], "started")  # type: ignore[union-attr]
        self.wait_for_held_pulls(4)  # rebalance done, a pull parked on each of the topic's queues
        started = time.monotonic()
        self.produce(topic, "sync", 2, "--keys", "after")
        events = self.finish(consumer)
        second = [e for e in events if e["event"] == "message"]
        self.assertEqual(sorted(m["keys"] for m in second), ["after-0", "after-1"])
        self.assertLess(time.monotonic() - started, 12, "held pulls were not woken by the new messages")


    def test_reset_offset_by_time(self) -> None:
        """INVOKE_BROKER_TO_RESET_OFFSET (mqadmin resetOffsetByTime) to before every message: the
        C++ consumer gets RESET_CONSUMER_CLIENT_OFFSET in its list shape and consumes them again."""
        self.start()
        topic, group = "InteropReset", "CID_INTEROP_RESET"
        self.produce(topic, "sync", 3, "--keys", "m")
        consumer = self.spawn("consume", "--topic", topic, "--group", group, "--expect", "6", "--linger", "1")
        stats = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
        deadline = time.monotonic() + 30
        while b'"consumerOffset":1' not in query(self.rocketpy.broker_port, stats).body:  # committed (every 5 s)
            self.assertLess(time.monotonic(), deadline, "the C++ consumer committed nothing")
            time.sleep(0.5)
        reset = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {
            "topic": topic, "group": group, "timestamp": "1000", "isForce": "true"})
        response = query(self.rocketpy.broker_port, reset)
        self.assertEqual(response.code, 0, response.remark)
        got = [e for e in self.finish(consumer) if e["event"] == "message"]
        self.assertEqual(sorted(m["keys"] for m in got), sorted(["m-0", "m-1", "m-2"] * 2))


class ChildEventsTests(SynchronousTestCase):
    def test_outcomes(self) -> None:
        """Only a clean run, or the C++ client's known abort inside its own shutdown, counts as success."""
        done = '{"event": "done"}\n'
        stopped = '{"event": "stopped"}\n'
        self.assertIsNotNone(child_events(0, done + stopped, ""))
        self.assertIsNotNone(child_events(-6, done, "terminate called ... boost::thread_interrupted"))
        self.assertIsNone(child_events(-6, done, "Segmentation fault"))
        self.assertIsNone(child_events(1, done + stopped, "boost::thread_interrupted"))
        self.assertIsNone(child_events(0, '{"event": "started"}\n', ""))
