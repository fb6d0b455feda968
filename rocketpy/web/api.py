"""``/api/``: the dashboard's JSON API (doc/dashboard.md), a leaf resource routing each path to a
:class:`~rocketpy.web.views.Views` coroutine. Every answer is written when its Deferred fires, so
no request blocks the reactor; errors are ``{"error": "…"}`` with a status code, never a traceback.

Write actions (POST) are refused unless enabled (``--http-admin``); with ACL on, every call is
signed with the account the request names (:mod:`rocketpy.web.access`) and the broker decides.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from rocketpy.admin.cli import failure_text
from rocketpy.client.admin import NotFoundError
from rocketpy.client.admintypes import TopicSettings
from rocketpy.client.errors import MQBrokerError, MQError, RemotingError
from rocketpy.common.fastjson import BodyError
from rocketpy.web.access import CHALLENGE, AdminAccess, Unauthorized
from rocketpy.web.views import DEFAULT_LIMIT, MAX_LIMIT, BadRequest, MessageQuery, Views


class Forbidden(Exception):
    """A write action while they are off."""


_STATUS: list[tuple[type[BaseException], int]] = [
    (BadRequest, 400), (Unauthorized, 401), (Forbidden, 403), (NotFoundError, 404), (MQBrokerError, 502),
    (BodyError, 502), (RemotingError, 503), (MQError, 502),
]
#: How a broker's ACL refusal starts (rocketpy and Apache RocketMQ): answered 403.
_ACL_REFUSED = "org.apache.rocketmq.acl.common.AclException"
_NAME = r"([^/]+)"
#: Bytes a write action's JSON body may have.
MAX_BODY = 64 * 1024
#: A route's coroutine: the request's views, its query arguments (GET) or JSON body (POST), then
#: the path's captures.
Handler = Callable[..., Awaitable[Any]]


class Args:
    """A request's query arguments as text, with typed, checked getters."""

    def __init__(self, request: Request) -> None:
        self._args = {k.decode("utf-8", "replace"): v[-1].decode("utf-8", "replace")
                      for k, v in (request.args or {}).items() if v}

    def text(self, name: str, required: bool = False) -> str | None:
        value = (self._args.get(name) or "").strip() or None
        if value is None and required:
            raise BadRequest(f"missing argument {name!r}")
        return value

    def integer(self, name: str, default: int | None = None) -> int | None:
        value = self.text(name)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise BadRequest(f"{name} must be an integer (milliseconds since the epoch for times), "
                             f"not {value!r}") from None

    def limit(self) -> int:
        limit = self.integer("limit", DEFAULT_LIMIT)
        assert limit is not None
        if not 1 <= limit <= MAX_LIMIT:
            raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}")
        return limit


def _json_body(request: Request) -> dict[str, Any]:
    """A POST's JSON object. Only ``application/json`` is read: a cross-site form cannot send it
    without a CORS preflight, which this API never grants."""
    content_type = (request.getHeader("content-type") or "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise BadRequest("write actions take a JSON body with Content-Type: application/json")
    assert request.content is not None
    raw = request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise BadRequest(f"the body is over {MAX_BODY} bytes")
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, RecursionError) as e:
        raise BadRequest(f"the body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _field(body: dict[str, Any], name: str, kind: type, default: Any = ...) -> Any:
    value = body.get(name, default)
    if value is ...:
        raise BadRequest(f"missing field {name!r}")
    if value is not None and not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise BadRequest(f"field {name!r} must be {kind.__name__}")
    return value


class ApiResource(Resource):
    """Routes ``/api/<path>`` to a view; see doc/dashboard.md for the paths.

    :param access: gives the admin client of each request.
    :param writes: whether write actions are enabled (``--http-admin``).
    """

    isLeaf = True
    log = Logger()

    def __init__(self, access: AdminAccess, clock: IReactorTime, writes: bool = False) -> None:
        super().__init__()
        self._access = access
        self._clock = clock
        self._writes = writes
        gets: list[tuple[str, Handler]] = [
            (r"", self._index),
            (r"overview", lambda v, a: v.overview()),
            (r"replication", lambda v, a: v.replication()),
            (r"topics", lambda v, a: v.topics()),
            (rf"topics/{_NAME}", lambda v, a, t: v.topic(t)),
            (r"groups", lambda v, a: v.groups()),
            (rf"groups/{_NAME}", lambda v, a, g: v.group(g, a.text("clients") == "1")),
            (r"producers", lambda v, a: v.producers()),
            (r"messages", self._messages),
            (rf"messages/{_NAME}/{_NAME}", lambda v, a, t, i: v.message(t, i)),
            (rf"dlq/{_NAME}", lambda v, a, g: v.dead_letters(g, a.integer("begin"), a.integer("end"), a.limit())),
        ]
        posts: list[tuple[str, Handler]] = [
            (r"topics", self._create_topic),
            (rf"groups/{_NAME}/reset", self._reset_offsets),
            (rf"dlq/{_NAME}/resend", self._resend),
        ]
        self._gets = [(re.compile(p), h) for p, h in gets]
        self._posts = [(re.compile(p), h) for p, h in posts]

    # handlers that need more than a view call

    async def _index(self, views: Views, args: Args) -> dict[str, Any]:
        return {"writes": self._writes}

    async def _messages(self, views: Views, args: Args) -> Any:
        topic = args.text("topic", True)
        assert topic is not None
        query = MessageQuery(topic, args.text("id"), args.text("key"), args.integer("begin"), args.integer("end"),
                             args.limit())
        return await views.messages(query)

    async def _create_topic(self, views: Views, body: dict[str, Any]) -> Any:
        settings = TopicSettings(
            _field(body, "topic", str), _field(body, "read_queue_nums", int, 8),
            _field(body, "write_queue_nums", int, 8),
            _field(body, "perm", int, 6), _field(body, "order", bool, False))
        return await views.create_topic(settings, _field(body, "cluster", str, None))

    async def _reset_offsets(self, views: Views, body: dict[str, Any], group: str) -> Any:
        return await views.reset_offsets(group, _field(body, "topic", str), _field(body, "timestamp", int))

    async def _resend(self, views: Views, body: dict[str, Any], group: str) -> Any:
        return await views.resend_dead_letter(group, _field(body, "msg_id", str))

    # dispatch

    def _path(self, request: Request) -> str:
        return "/".join(p.decode("utf-8", "replace") for p in request.postpath or []).rstrip("/")

    def _views(self, request: Request) -> Views:
        return Views(self._access.admin_for(request), self._clock)

    async def _get(self, request: Request) -> Any:
        path = self._path(request)
        for pattern, handler in self._gets:
            match = pattern.fullmatch(path)
            if match:
                return await handler(self._views(request), Args(request), *match.groups())
        raise NotFoundError(f"no API resource /api/{path}")

    async def _post(self, request: Request) -> Any:
        path = self._path(request)
        for pattern, handler in self._posts:
            match = pattern.fullmatch(path)
            if match:
                if not self._writes:
                    raise Forbidden("write actions are off: start the broker with --http-admin")
                views = self._views(request)
                return await handler(views, _json_body(request), *match.groups())
        raise NotFoundError(f"no API action POST /api/{path}")

    def render_GET(self, request: Request) -> int:
        return self._answer(request, self._get(request))

    def render_POST(self, request: Request) -> int:
        return self._answer(request, self._post(request))

    def _answer(self, request: Request, work: Any) -> int:
        gone: list[Failure] = []
        request.notifyFinish().addErrback(gone.append)  # the browser left: nothing to write
        d = Deferred.fromCoroutine(work)
        d.addCallbacks(lambda value: (200, value), self._error, errbackArgs=(request,))
        d.addCallback(self._write, request, gone)
        d.addErrback(lambda f: self.log.failure("writing an API answer failed", f))
        return NOT_DONE_YET

    def _error(self, failure: Failure, request: Request) -> tuple[int, dict[str, str]]:
        error = failure.value
        if isinstance(error, MQBrokerError) and (error.remark or "").startswith(_ACL_REFUSED):
            return 403, {"error": error.remark or ""}
        if isinstance(error, Unauthorized):
            request.setHeader(b"www-authenticate", CHALLENGE)
        for kind, code in _STATUS:
            if failure.check(kind):
                assert error is not None
                return code, {"error": failure_text(error, self._access.timeout)}
        self.log.failure("API request {path} failed", failure, path=request.path)
        return 500, {"error": f"internal error: {failure.getErrorMessage()}"}

    def _write(self, answer: tuple[int, Any], request: Request, gone: list[Failure]) -> None:
        if gone:
            return
        code, value = answer
        request.setResponseCode(code)
        request.setHeader(b"content-type", b"application/json; charset=utf-8")
        request.setHeader(b"cache-control", b"no-store")
        request.write(json.dumps(value).encode("utf-8"))
        request.finish()
