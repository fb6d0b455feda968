"""rocketpy-bench: the figures, the once-a-second progress, and real runs against rocketpy.testing's broker."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys

from twisted.internet import reactor
from twisted.internet.task import Clock
from twisted.internet.utils import getProcessOutputAndValue
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase, TestCase

from rocketpy.bench.cli import Options, main, run_bench
from rocketpy.bench.runs import Limits, Run
from rocketpy.bench.stats import RunStats, progress_line
from rocketpy.client.admin import AdminClient
from rocketpy.testing import BrokerFixture
from tests.processes import LogWatcher

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse(*argv: str) -> Options:
    options = Options()
    options.parseOptions(list(argv))
    return options


class StatsTests(SynchronousTestCase):
    def test_figures(self) -> None:
        """99 requests of 1 ms and one of 100 ms: p99 is 1 ms, max 100 ms, the mean 1.99 ms; a progress
        interval starts afresh while the summary keeps the whole run."""
        stats = RunStats(started=10.0)
        for _ in range(99):
            stats.record(0.001)
        stats.record(0.1, messages=2)
        stats.fail(3)
        first = stats.progress(12.0)
        self.assertEqual((first["messages"], first["failed"], first["tps"]), (101, 3, 50.5))
        self.assertLess(abs(first["rt_p99_ms"] - 1.0), 0.01, first["rt_p99_ms"])
        self.assertLess(abs(first["rt_max_ms"] - 100.0), 0.1, first["rt_max_ms"])  # 3 significant digits
        self.assertLess(abs(first["rt_avg_ms"] - 1.99), 0.01, first["rt_avg_ms"])
        stats.record(0.005)
        second = stats.progress(13.0)
        self.assertEqual((second["messages"], second["failed"], second["tps"]), (1, 0, 1.0))
        self.assertLess(abs(second["rt_max_ms"] - 5.0), 0.01, second["rt_max_ms"])
        total = stats.summary(13.0)
        self.assertEqual((total["messages"], total["failed"], total["seconds"]), (102, 3, 3.0))
        self.assertLess(abs(total["rt_max_ms"] - 100.0), 0.1, total["rt_max_ms"])
        self.assertIn("TPS 1 | RT(ms) avg 5.", progress_line("send", second, 102))

    def test_empty_interval(self) -> None:
        """A second without messages reads 0, not a histogram's sentinel values."""
        figures = RunStats(0.0).progress(1.0)
        self.assertEqual((figures["tps"], figures["rt_avg_ms"], figures["rt_max_ms"]), (0.0, 0.0, 0.0))


class RunTests(SynchronousTestCase):
    def test_progress_every_second_until_the_duration(self) -> None:
        """One progress report a second; the run ends at its duration and leaves no timer behind."""
        clock = Clock()
        reports: list[tuple[int, int]] = []
        run = Run(clock, Limits(duration=2.5), lambda figures, total: reports.append((figures["messages"], total)))
        run.start()
        run.stats.record(0.001, 5)
        clock.advance(1)
        run.stats.record(0.001, 2)
        clock.advance(1)
        self.assertEqual(reports, [(5, 5), (2, 7)])
        self.assertTrue(run.more())
        clock.advance(0.5)
        self.assertFalse(run.more())
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertEqual(run.summary()["messages"], 7)


class OptionsTests(SynchronousTestCase):
    def test_defaults_and_errors(self) -> None:
        """Defaults as RocketMQ's benchmark; bad values are usage errors naming the option."""
        sub = parse("produce", "-n", "10.0.0.1:9876;10.0.0.2:9876").subOptions
        self.assertEqual((sub["mode"], sub["size"], sub["window"], sub["topic"]), ("sync", 128, 64, "BenchmarkTest"))
        self.assertEqual(sub["namesrv-list"], ["10.0.0.1:9876", "10.0.0.2:9876"])
        for argv, text in [
            (["produce", "-m", "fast"], "--mode"),
            (["produce", "--window", "0"], "--window"),
            (["consume", "--count", "0"], "--count"),
            (["consume", "--duration", "x"], "--duration must be a number"),
            (["produce", "--size", "-1"], "--size must be more than 0"),
            ([], "produce or consume"),
        ]:
            e = self.assertRaises(usage.UsageError, parse, *argv)
            self.assertIn(text, str(e))

    def test_bad_arguments_exit_2(self) -> None:
        """main() with bad arguments prints one line and the usage, and exits 2."""
        err = io.StringIO()
        self.patch(sys, "stderr", err)
        exit = self.assertRaises(SystemExit, main, ["produce", "-m", "fast"])
        self.assertEqual(exit.code, 2)
        self.assertTrue(err.getvalue().startswith("rocketpy-bench: --mode must be one of"))


    def test_missing_histogram_package(self) -> None:
        """Without hdrhistogram (the bench extra), main() says what to install and exits 2."""
        err = io.StringIO()
        self.patch(sys, "stderr", err)
        self.patch(importlib.util, "find_spec", lambda name: None)
        exit = self.assertRaises(SystemExit, main, ["produce"])
        self.assertEqual(exit.code, 2)
        self.assertIn("pip install 'rocketpy[bench]'", err.getvalue())


class LiveTests(TestCase):
    """Short runs against an in-process broker (rocketpy.testing)."""

    timeout = 120

    async def bench(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        status = await run_bench(reactor, parse(*argv), out, err)
        return status, out.getvalue(), err.getvalue()

    async def test_every_send_mode_then_consume(self) -> None:
        """Each send mode sends exactly --count messages; a consumer from the first offset then receives them all."""
        async with BrokerFixture(reactor) as ns:
            sent = 0
            for mode, count in (("sync", 50), ("async", 200), ("oneway", 100), ("batch", 70)):
                status, out, err = await self.bench("produce", "-n", ns, "-t", "Bench", "-m", mode, "--count",
                                                    str(count), "-b", "32", "-w", "8", "--json")
                self.assertEqual(status, 0, err)
                figures = json.loads(out)
                self.assertEqual((figures["messages"], figures["failed"]), (count, 0), mode)
                self.assertEqual((figures["command"], figures["mode"], figures["window"], figures["size"]),
                                 ("produce", mode, 8, 128))
                self.assertGreater(figures["rt_max_ms"], 0, mode)
                sent += count
            status, out, err = await self.bench("consume", "-n", ns, "-t", "Bench", "--from-first", "--count",
                                                str(sent), "--json")
            self.assertEqual(status, 0, err)
            self.assertEqual(json.loads(out)["messages"], sent)
            admin = AdminClient(reactor, ns)
            try:  # the last message's offset was committed before the consumer stopped
                stats = await admin.consume_stats("BenchmarkConsumer", "Bench")
            finally:
                await admin.close()
            self.assertEqual((stats.total_lag, sum(q.consumer_offset for q in stats.queues)), (0, sent))

    async def test_tags(self) -> None:
        """--tags on produce sets the messages' tag; on consume it filters: only B's arrive in the run."""
        async with BrokerFixture(reactor) as ns:
            for tag, count in (("A", 30), ("B", 20)):
                status, _, err = await self.bench("produce", "-n", ns, "-t", "Tagged", "--tags", tag, "--count",
                                                  str(count))
                self.assertEqual(status, 0, err)
            status, out, err = await self.bench("consume", "-n", ns, "-t", "Tagged", "--tags", "B", "--from-first",
                                                "--duration", "3")
            self.assertEqual(status, 0, err)
            self.assertIn("receive: 20 messages", out)

    async def test_duration_and_progress(self) -> None:
        """--duration runs that long, printing a progress line each second, then the summary."""
        async with BrokerFixture(reactor) as ns:
            status, out, err = await self.bench("produce", "-n", ns, "-t", "Timed", "--duration", "2.2", "-w", "4")
        self.assertEqual(status, 0, err)
        *progress, summary, latency = out.splitlines()
        self.assertIn(len(progress), (1, 2), out)  # at 1 s and 2 s (a loaded machine may skip one)
        for line in progress:
            self.assertRegex(line, r"^send TPS \d+ \| RT\(ms\) avg [\d.]+ p99 [\d.]+ max [\d.]+ \| failed 0 \| total \d+$")
        self.assertRegex(summary, r"^send: \d+ messages in 2\.\d s, \d+ TPS, 0 failed$")
        self.assertTrue(latency.startswith("RT(ms): avg "))

    async def test_errors(self) -> None:
        """A topic that does not exist and a name server nobody listens on end the run with one line and status 1."""
        async with BrokerFixture(reactor) as ns:
            status, out, err = await self.bench("consume", "-n", ns, "-t", "Missing", "--count", "1")
        self.assertEqual((status, err), (1, "rocketpy-bench: topic 'Missing' does not exist\n"))
        status, out, err = await self.bench("produce", "-n", ns, "--count", "1")  # the fixture is gone
        self.assertEqual(status, 1)
        self.assertTrue(err.startswith("rocketpy-bench: cannot send to topic 'BenchmarkTest': "), err)
        self.assertEqual(len(err.splitlines()), 1, err)

    async def test_interrupted(self) -> None:
        """Ctrl-C (SIGINT) of a run without limits still prints the summary, and the exit status is 0."""
        async with BrokerFixture(reactor) as ns:
            bench = LogWatcher()
            reactor.spawnProcess(bench, sys.executable, [sys.executable, "-m", "rocketpy.bench", "produce", "-n", ns,
                                                         "-t", "Endless"], env={**os.environ, "PYTHONPATH": ROOT})
            self.addCleanup(bench.kill)
            await bench.wait_for("send TPS")
            await bench.kill("INT")
        self.assertEqual(bench.exit_code, 0, bench.output)
        self.assertRegex(bench.output, r"send: \d+ messages in [\d.]+ s, \d+ TPS, 0 failed\nRT\(ms\): avg ")

    async def test_command(self) -> None:
        """``python -m rocketpy.bench`` (the console script's main) runs and prints the JSON figures."""
        async with BrokerFixture(reactor) as ns:
            out, err, code = await getProcessOutputAndValue(
                sys.executable, ["-m", "rocketpy.bench", "produce", "-n", ns, "-t", "Cli", "--count", "20", "--json"],
                env={**os.environ, "PYTHONPATH": ROOT}, path=ROOT)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["messages"], 20)
