"""``rocketpy-bench produce|consume``: options, the run, the progress lines and the summary."""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any, TextIO

from twisted.internet.defer import Deferred
from twisted.python import usage

from rocketpy.bench.runs import SEND_MODES, BenchError, Limits, Run, consume, produce
from rocketpy.bench.stats import progress_line, summary_lines


class _Common(usage.Options):
    optFlags = [["json", None, "print the final figures as one JSON object (progress goes to stderr)"]]
    optParameters = [
        ["namesrv", "n", "127.0.0.1:9876", "name server address(es), ip:port;ip:port"],
        ["topic", "t", "BenchmarkTest", "topic"],
        ["duration", None, None, "seconds to run [default: until --count, or Ctrl-C]"],
        ["count", None, None, "messages to send or receive, then stop"],
    ]
    #: numeric options and their type, checked in postOptions (usage's own message names no option)
    numbers: dict[str, type] = {"duration": float, "count": int}

    def postOptions(self) -> None:
        for name, kind in self.numbers.items():
            if self[name] is None:
                continue
            try:
                self[name] = kind(self[name])
            except ValueError:
                raise usage.UsageError(f"--{name} must be a number, not {self[name]!r}") from None
            if self[name] <= 0:
                raise usage.UsageError(f"--{name} must be more than 0")
        self["namesrv-list"] = [a.strip() for a in self["namesrv"].replace(",", ";").split(";") if a.strip()]
        if not self["namesrv-list"]:
            raise usage.UsageError("-n needs at least one name server ip:port")


class ProduceOptions(_Common):
    optParameters = [
        ["group", "g", "BenchmarkProducer", "producer group"],
        ["size", "s", "128", "message body bytes"],
        ["window", "w", "64", "requests in flight"],
        ["mode", "m", "sync", "send mode: " + ", ".join(SEND_MODES)],
        ["batch", "b", "32", "messages per batch (--mode batch)"],
        ["tags", None, None, "the messages' tag"],
    ]
    numbers = {**_Common.numbers, "size": int, "window": int, "batch": int}

    def postOptions(self) -> None:
        super().postOptions()
        if self["mode"] not in SEND_MODES:
            raise usage.UsageError(f"--mode must be one of {', '.join(SEND_MODES)}, not {self['mode']!r}")


class ConsumeOptions(_Common):
    optFlags = [["from-first", None, "a new group starts at the oldest message, not the newest"]]
    optParameters = [
        ["group", "g", "BenchmarkConsumer", "consumer group"],
        ["tags", None, "*", 'subscription expression: "*" or "TagA || TagB"'],
    ]


class Options(usage.Options):
    synopsis = "rocketpy-bench produce|consume [options]"
    longdesc = "Load a RocketMQ 4.x cluster: TPS and RT once a second, then a summary."
    subCommands = [
        ["produce", None, ProduceOptions, "send messages"],
        ["consume", None, ConsumeOptions, "receive messages with a push consumer"],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("say produce or consume")


async def run_bench(reactor: Any, options: Options, out: TextIO, err: TextIO) -> int:
    """Run the sub-command; prints progress and the summary; the exit status."""
    from rocketpy.client import ConsumeFromWhere, Producer, PushConsumer

    sub = options.subOptions
    what = "send" if options.subCommand == "produce" else "receive"
    progress_out = err if sub["json"] else out

    def report(figures: dict[str, Any], total: int) -> None:
        print(progress_line(what, figures, total), file=progress_out, flush=True)

    run = Run(reactor, Limits(sub["count"], sub["duration"]), report)
    client: Any
    if options.subCommand == "produce":
        client = Producer(sub["group"], sub["namesrv-list"], reactor)
        await client.start()
        work = produce(run, client, sub["topic"], sub["size"], sub["window"], sub["mode"], sub["batch"], sub["tags"])
    else:
        where = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET if sub["from-first"] else \
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
        client = PushConsumer(sub["group"], sub["namesrv-list"], reactor, consume_from_where=where)
        work = consume(run, client, sub["topic"], sub["tags"])
    ended: Deferred[None] = Deferred()  # Ctrl-C: the reactor waits for the summary

    def interrupted() -> Deferred[None]:
        run.stop()
        return ended

    trigger = reactor.addSystemEventTrigger("before", "shutdown", interrupted)
    try:
        return await _finish(run, work, client, options, out, err)
    finally:
        reactor.removeSystemEventTrigger(trigger)
        ended.callback(None)


async def _finish(run: Run, work: Any, client: Any, options: Options, out: TextIO, err: TextIO) -> int:
    sub = options.subOptions
    try:
        await work
    except BenchError as e:
        print(f"rocketpy-bench: {e}", file=err)
        return 1
    finally:
        run.stop()
        await client.shutdown()
    figures = run.summary()
    if sub["json"]:
        settings = {name: sub[name] for name in ("topic", "mode", "size", "window", "batch") if name in sub}
        print(json.dumps({"command": options.subCommand, **settings, **figures}), file=out)
    else:
        for line in summary_lines("send" if options.subCommand == "produce" else "receive", figures):
            print(line, file=out)
    return 0


def main(argv: list[str] | None = None) -> None:
    options = Options()
    try:
        options.parseOptions(sys.argv[1:] if argv is None else argv)
    except usage.UsageError as e:
        print(f"rocketpy-bench: {e}\n{options}", file=sys.stderr)
        sys.exit(2)
    if importlib.util.find_spec("hdrh") is None:
        print("rocketpy-bench: the hdrhistogram package is missing: pip install 'rocketpy[bench]'", file=sys.stderr)
        sys.exit(2)
    from twisted.internet.task import react

    react(lambda reactor: Deferred.fromCoroutine(_exit_status(reactor, options)))


async def _exit_status(reactor: Any, options: Options) -> None:
    status = await run_bench(reactor, options, sys.stdout, sys.stderr)
    if status:
        raise SystemExit(status)
