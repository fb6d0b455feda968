"""The ``rocketpy-admin`` command line: argparse sub-commands, one :class:`AdminClient` per run,
a table or ``--json`` on stdout, one line on stderr and exit status 1 when something fails."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from rocketpy.admin import aclcommands, commands, render  # noqa: F401 (aclcommands registers its sub-commands)
from rocketpy.client.admin import AdminClient
from rocketpy.client.errors import MQClientError, MQError, RemotingError, RemotingTimeoutError
from rocketpy.common.fastjson import BodyError

PROG = "rocketpy-admin"
DEFAULT_NAMESRV = "127.0.0.1:9876"


class UsageError(Exception):
    """A bad command line (argparse's message)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Administer RocketMQ 4.x clusters (rocketpy or Apache RocketMQ).")
    common = _Parser(add_help=False)
    common.add_argument("-n", "--namesrvAddr", default=os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV,
                        help="name servers, ip:port;ip:port (default $NAMESRV_ADDR or 127.0.0.1:9876)")
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    common.add_argument("--timeout", type=float, default=5.0, help="seconds per request (5)")
    common.add_argument("--accessKey", help="ACL access key: every request is signed (with --secretKey)")
    common.add_argument("--secretKey", help="ACL secret key of --accessKey")
    subs = parser.add_subparsers(dest="command", metavar="SUB-COMMAND", parser_class=_Parser)
    subs.required = True
    for name, cmd in commands.COMMANDS.items():
        sub = subs.add_parser(name, help=cmd.help, description=cmd.help, parents=[common])
        for flags, options in cmd.args:
            sub.add_argument(*flags, **options)
    return parser


def _check_one_of(cmd: commands.Command, args: argparse.Namespace) -> None:
    if cmd.one_of and sum(getattr(args, dest) is not None for dest in cmd.one_of) != 1:
        flags = " or ".join(f"--{dest}" for dest in cmd.one_of)
        raise UsageError(f"{PROG} {cmd.name}: give exactly one of {flags}")


def _credentials(args: argparse.Namespace) -> tuple[str, str] | None:
    if (args.accessKey is None) != (args.secretKey is None):
        raise UsageError(f"{PROG} {args.command}: give both --accessKey and --secretKey, or neither")
    return None if args.accessKey is None else (args.accessKey, args.secretKey)


def failure_text(error: BaseException, timeout: float) -> str:
    if isinstance(error, RemotingTimeoutError):
        return f"no answer within {timeout:g} s ({error})"
    if isinstance(error, RemotingError):
        return f"cannot reach the name server or broker: {error}"
    if isinstance(error, MQClientError):
        return error.message
    return str(error)


async def execute(reactor: IReactorTime, argv: Sequence[str], out: TextIO, err: TextIO) -> int:
    """Run one command line; returns the exit status (0 ok, 1 failed)."""
    try:
        args = build_parser().parse_args(list(argv))
        cmd = commands.COMMANDS[args.command]
        _check_one_of(cmd, args)
        credentials = _credentials(args)
    except UsageError as e:
        err.write(f"{e}\n")
        return 1
    admin = AdminClient(reactor, args.namesrvAddr, timeout=args.timeout, credentials=credentials)
    try:
        output = await cmd.run(admin, args)
    except (MQError, RemotingError, BodyError, ValueError) as e:
        one_line = " ".join(failure_text(e, args.timeout).splitlines())  # Java's ACL remarks hold newlines
        err.write(f"{PROG} {cmd.name}: {one_line}\n")
        return 1
    finally:
        await admin.close()
    out.write((render.to_json(output.data) if args.json else output.text) + "\n")
    return 0


async def _react_main(reactor: Any, argv: Sequence[str]) -> None:
    status = await execute(reactor, argv, sys.stdout, sys.stderr)
    if status:
        raise SystemExit(status)


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: runs :func:`execute` under ``twisted.internet.task.react``."""
    from twisted.internet import task

    argv = sys.argv[1:] if argv is None else argv
    try:
        build_parser().parse_args(list(argv))  # --help and usage errors before a reactor runs
    except UsageError as e:
        sys.stderr.write(f"{e}\n")
        raise SystemExit(1) from None
    task.react(lambda reactor: Deferred.fromCoroutine(_react_main(reactor, argv)))
