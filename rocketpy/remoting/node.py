"""What client and server share: request dispatch, RPC hooks, channel events, the timeout scan.

Both ends of a connection can receive requests (the broker sends
NOTIFY_CONSUMER_IDS_CHANGED to clients), so :class:`RemotingNode` is the base
of :class:`~rocketpy.remoting.client.RemotingClient` and
:class:`~rocketpy.remoting.server.RemotingServer`.
"""

from __future__ import annotations

from inspect import iscoroutine
from typing import Any, Callable, Iterable

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from rocketpy.common import speedups
from rocketpy.common.errors import RequestError
from rocketpy.interfaces import IBatchRequestProcessor, IChannelEventListener, IRequestProcessor, IRPCHook
from rocketpy.remoting.codes import ONEWAY_FLAG, RESPONSE_FLAG, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RequestRefused
from rocketpy.remoting.protocol import RemotingProtocol
from rocketpy.remoting.writenow import PLAIN_SEND, write_now
from rocketpy.util.ratelimit import EveryFewSeconds

#: ``_reply_run``'s answers as frames in one C call (rocketpy/_speedups_remoting.h
#: ``response_frames``; None when not built): for a run of JSON requests that want an answer,
#: each answered by a command the C encoder takes; None otherwise (then the Python loop answers).
_response_frames: Callable[[list[RemotingCommand], list[Any]], list[bytes] | None] | None = (
    speedups.compiled.response_frames if speedups.compiled is not None else None)

#: Default bound of requests queued on (or running in) one registration's thread pool.
DEFAULT_MAX_QUEUE = 10_000
BUSY_REMARK = "system busy, start flow control for a while"
TIMEOUT_CLEAN_QUEUE_REMARK = (
    "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: {waited}ms, size of queue: {size}"
)


class _Registration:
    """A processor, where it runs, and how many of its requests are in the pool."""

    __slots__ = ("processor", "executor", "max_queue", "max_wait", "queued", "batch", "lone")

    def __init__(
        self, processor: IRequestProcessor, executor: ThreadPool | None, max_queue: int, max_wait: float | None = None
    ) -> None:
        self.processor = processor
        self.executor = executor
        self.max_queue = max_queue
        self.max_wait = max_wait
        self.queued = 0
        #: runs of its requests go to ``process_requests`` together (reactor-thread processors only)
        self.batch = executor is None and IBatchRequestProcessor.providedBy(processor)
        #: the processor's ``lone_request`` (reactor-thread processors only), for a request that came
        #: alone: True once it wrote the answer, its answer's frame, or what ``process_request`` returns,
        #: or None for "not mine"
        self.lone: Callable[[Any, RemotingCommand], Any] | None = (
            getattr(processor, "lone_request", None) if executor is None else None)


class RemotingNode:
    """Processors by request code, RPC hooks, listeners and the live channels.

    :ivar rpc_hooks: the :class:`~rocketpy.interfaces.IRPCHook` providers, in call order.
    """

    log = Logger()
    #: Whether requests this node sends run the hooks too (clients); a server's hooks (the
    #: broker's ACL check) see only what it receives, as in Java's ``NettyRemotingServer``.
    hooks_on_send = True

    def __init__(
        self,
        reactor: IReactorTime,
        *,
        idle_timeout: float | None = 120.0,
        rpc_hooks: Iterable[IRPCHook] = (),
        listeners: Iterable[IChannelEventListener] = (),
        scan_interval: float = 1.0,
    ) -> None:
        """
        :param reactor: the clock, and for thread-pool executors ``callFromThread``.
        :param idle_timeout: seconds without traffic before a channel is closed; None disables.
        :param rpc_hooks: called around every request sent and processed.
        :param listeners: told about CONNECT, CLOSE, IDLE and EXCEPTION events.
        :param scan_interval: seconds between scans for timed-out requests.
        """
        self._reactor = reactor
        #: one refusal line per peer, request code and reason every 10 s (a hostile or misconfigured
        #: client retrying must not flood the log); the line says how many it stands for
        self._refusals_logged = EveryFewSeconds(reactor)
        self._idle_timeout = idle_timeout
        self.rpc_hooks = tuple(rpc_hooks)
        self._listeners = tuple(listeners)
        self._processors: dict[int, _Registration] = {}
        self._default: _Registration | None = None
        self._channels: dict[RemotingProtocol, None] = {}
        #: requests answered SYSTEM_BUSY because their processor rejected them (a busy store)
        self.busy_rejections = 0
        self._scan_interval = scan_interval
        self._scan = LoopingCall(self._scan_requests)
        self._scan.clock = reactor

    # registration

    def register_processor(
        self,
        code: int,
        processor: IRequestProcessor,
        executor: ThreadPool | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        max_wait: float | None = None,
    ) -> None:
        """Route requests with *code* to *processor*.

        :param executor: None runs ``process_request`` on the reactor thread (it may
            return a command, a Deferred or coroutine of one, or None for no reply);
            a started :class:`ThreadPool` runs it there (it must return a value and
            touch no Twisted object).
        :param max_queue: with a pool: requests beyond this many queued or running
            get SYSTEM_BUSY.
        :param max_wait: with a pool: seconds a request may wait in the pool's queue;
            one that waited at least this long when a pool thread picks it up is
            answered SYSTEM_BUSY ``[TIMEOUT_CLEAN_QUEUE]`` without being processed
            (Java's BrokerFastFailure). None: no bound.
        """
        self._processors[int(code)] = _Registration(processor, executor, max_queue, max_wait)

    def register_default_processor(
        self,
        processor: IRequestProcessor,
        executor: ThreadPool | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        max_wait: float | None = None,
    ) -> None:
        """Route requests of every code without its own processor to *processor*."""
        self._default = _Registration(processor, executor, max_queue, max_wait)

    @property
    def channels(self) -> tuple[RemotingProtocol, ...]:
        """The connected channels."""
        return tuple(self._channels)

    def build_channel(self) -> RemotingProtocol:
        """A new protocol owned by this node."""
        return RemotingProtocol(self, self._reactor, self._idle_timeout)

    def close_channels(self) -> Deferred[None]:
        """Close every channel; fires once all are closed."""
        channels = list(self._channels)
        closed = [channel.when_closed() for channel in channels]
        for channel in channels:
            channel.close()
        return gatherResults(closed).addCallback(lambda _: None)

    # called by RemotingProtocol

    def channel_connected(self, channel: RemotingProtocol) -> None:
        self._channels[channel] = None
        if not self._scan.running:
            self._scan.start(self._scan_interval, now=False)
        self._notify("on_channel_connect", channel)

    def channel_closed(self, channel: RemotingProtocol) -> None:
        self._channels.pop(channel, None)
        if not self._channels and self._scan.running:
            self._scan.stop()
        self._notify("on_channel_close", channel)

    def channel_idle(self, channel: RemotingProtocol) -> None:
        self._notify("on_channel_idle", channel)

    def channel_exception(self, channel: RemotingProtocol, error: Exception) -> None:
        self._notify("on_channel_exception", channel)

    def run_after_hooks(self, response: RemotingCommand, address: str, request: RemotingCommand) -> RemotingCommand:
        """Call every hook's ``after_response``; return *response*."""
        for hook in self.rpc_hooks:
            hook.after_response(address, request, response)
        return response

    def requests_received(self, channel: RemotingProtocol, requests: list[RemotingCommand]) -> None:
        """Dispatch the requests of one read in order; consecutive requests for the same
        batch processor (:class:`IBatchRequestProcessor`, whichever of its codes) go to it
        as one run."""
        if len(requests) == 1:
            request = requests[0]
            registration = self._processors.get(request.code, self._default)
            lone = registration.lone if registration is not None else None
            if lone is not None and not self.rpc_hooks and type(channel) is RemotingProtocol:
                try:  # the usual lone send in one call: no reject_request, process_request, _reply
                    result = lone(channel, request)
                except Exception:
                    self._reply_failure(Failure(), channel, request)
                    return
                if result is not True:  # True: answered (RemotingProtocol.answer_now)
                    self.lone_result(result, channel, request)
                return
            self.request_received(channel, request)
            return
        processors, default = self._processors, self._default
        run: list[RemotingCommand] = []
        owner: _Registration | None = None
        for request in requests:
            registration = processors.get(request.code, default)
            if registration is not None and registration.batch:
                if owner is None or registration.processor is not owner.processor:  # one processor, any code
                    if run:
                        self._run_received(owner, channel, run)  # type: ignore[arg-type]
                    run, owner = [], registration
                run.append(request)
                continue
            if run:
                self._run_received(owner, channel, run)  # type: ignore[arg-type]
                run, owner = [], None
            self.request_received(channel, request)
        if run:
            self._run_received(owner, channel, run)  # type: ignore[arg-type]

    def lone_result(self, result: Any, channel: RemotingProtocol, request: RemotingCommand) -> None:
        """Answer what a processor's ``lone_request`` gave for *request* other than True (answered):
        its answer's frame, None (not its case: the full path), or what ``process_request`` returns.
        (:meth:`requests_received`, and the reactor's C read of one frame: rocketpy/_speedups_loneread.h.)"""
        if type(result) is bytes:
            channel.reply_frame(result)
        elif result is None:  # not the usual case: nothing was done
            self.request_received(channel, request)
        elif isinstance(result, Deferred):
            self._reply_when_done(result, channel, request)
        else:
            self._reply(result, channel, request)

    def _run_received(self, registration: _Registration, channel: RemotingProtocol,
                      run: list[RemotingCommand]) -> None:
        if len(run) == 1:
            self.request_received(channel, run[0])
            return
        processor: Any = registration.processor  # an IBatchRequestProcessor
        try:
            if processor.reject_request():
                self.busy_rejections += len(run)
                for request in run:
                    self._respond(channel, request,
                                  request.make_response(ResponseCode.SYSTEM_BUSY, "[REJECTREQUEST]" + BUSY_REMARK))
                return
        except Exception:
            self._reply_run_failure(Failure(), channel, run)
            return
        if self.rpc_hooks:
            run = [request for request in run if self._hooks_pass(channel, request)]
            if not run:
                return
        try:
            results = processor.process_requests(channel, run)
        except Exception:
            self._reply_run_failure(Failure(), channel, run)
            return
        if type(results) is list or not isinstance(results, Deferred):  # answered at once: no ABC check
            self._reply_run(results, channel, run)
        else:
            args = (channel, run)
            results.addCallbacks(self._reply_run, self._reply_run_failure, callbackArgs=args, errbackArgs=args)

    def _hooks_pass(self, channel: RemotingProtocol, request: RemotingCommand) -> bool:
        """Run the ``before_request`` hooks; one raising (an ACL refusal) answers SYSTEM_ERROR."""
        try:
            for hook in self.rpc_hooks:
                hook.before_request(channel.remote_address, request)
        except Exception:
            self._reply_failure(Failure(), channel, request)
            return False
        return True

    def _reply_run(self, results: Any, channel: RemotingProtocol, run: list[RemotingCommand]) -> None:
        if type(results) is not list or len(results) != len(run):
            error = TypeError(f"process_requests gave {type(results).__name__}, not a list of {len(run)} results")
            self._reply_run_failure(Failure(error), channel, run)
            return
        if _response_frames is not None and not self.rpc_hooks and type(channel) is RemotingProtocol:
            frames = _response_frames(run, results)  # the plain case in one C call
            if frames is not None:
                try:
                    channel.send_frames(frames)
                finally:
                    channel.answered(len(run))
                return
        with channel.writes_together():
            for request, result in zip(run, results):
                self._reply(result, channel, request)

    def _reply_run_failure(self, failure: Failure, channel: RemotingProtocol, run: list[RemotingCommand]) -> None:
        self.log.failure("{count} requests {code} from {peer} failed", failure, level=LogLevel.error,
                         count=len(run), code=run[0].code, peer=channel.remote_address)
        with channel.writes_together():
            for request in run:
                self._respond(channel, request, self._system_error(request, failure.value))

    def request_received(self, channel: RemotingProtocol, request: RemotingCommand) -> None:
        """Dispatch *request* to its processor and send the outcome back."""
        registration = self._processors.get(request.code, self._default)
        if registration is None:
            remark = f" request type {request.code} not supported"
            self._respond(channel, request, request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark))
            return
        processor = registration.processor
        try:
            if processor.reject_request():
                self.busy_rejections += 1
                busy = request.make_response(ResponseCode.SYSTEM_BUSY, "[REJECTREQUEST]" + BUSY_REMARK)
                self._respond(channel, request, busy)
                return
            if self.rpc_hooks:
                for hook in self.rpc_hooks:
                    hook.before_request(channel.remote_address, request)
            if registration.executor is not None:
                self._submit(registration, channel, request)
                return
            result = processor.process_request(channel, request)
        except Exception:
            self._reply_failure(Failure(), channel, request)
            return
        if type(result) is RemotingCommand:  # the common case first
            if _response_frames is not None and not self.rpc_hooks and type(channel) is RemotingProtocol:
                frames = _response_frames([request], [result])  # a plain answer: as _reply_run's, in C
                if frames is not None:
                    try:
                        channel.send_frames(frames)
                    finally:
                        channel.answered()
                    return
            self._respond(channel, request, result)
            return
        if isinstance(result, Deferred):  # before iscoroutine: the usual case, one call less
            self._reply_when_done(result, channel, request)
        elif iscoroutine(result):
            self._reply_when_done(Deferred.fromCoroutine(result), channel, request)
        else:
            self._reply(result, channel, request)

    # internals

    def _submit(self, registration: _Registration, channel: RemotingProtocol, request: RemotingCommand) -> None:
        if registration.queued >= registration.max_queue:
            busy = request.make_response(ResponseCode.SYSTEM_BUSY, "[OVERLOAD]" + BUSY_REMARK)
            self._respond(channel, request, busy)
            return
        registration.queued += 1
        if registration.max_wait is None:
            d = deferToThreadPool(
                self._reactor,  # type: ignore[arg-type]
                registration.executor,  # type: ignore[arg-type]
                registration.processor.process_request,
                channel,
                request,
            )
        else:
            d = deferToThreadPool(
                self._reactor,  # type: ignore[arg-type]
                registration.executor,  # type: ignore[arg-type]
                self._process_unless_stale,
                registration,
                channel,
                request,
                self._reactor.seconds(),
            )
        d.addBoth(self._dequeued, registration)
        self._reply_when_done(d, channel, request)

    def _process_unless_stale(
        self, registration: _Registration, channel: RemotingProtocol, request: RemotingCommand, enqueued: float
    ) -> Any:
        """In a pool thread: SYSTEM_BUSY if *request* waited ``max_wait`` or more, else process it.

        Reads only the clock's ``seconds()`` and the registration's counter.
        """
        waited = self._reactor.seconds() - enqueued
        if waited >= registration.max_wait:  # type: ignore[operator]  # set: this runs only with a bound
            # the size Java reports is its queue's after removal: the others still queued or running
            remark = TIMEOUT_CLEAN_QUEUE_REMARK.format(waited=round(waited * 1000), size=registration.queued - 1)
            return request.make_response(ResponseCode.SYSTEM_BUSY, remark)
        return registration.processor.process_request(channel, request)

    @staticmethod
    def _dequeued(result: Any, registration: _Registration) -> Any:
        registration.queued -= 1
        return result

    def _reply_when_done(self, d: Deferred[Any], channel: RemotingProtocol, request: RemotingCommand) -> None:
        args = (channel, request)
        d.addCallbacks(self._reply, self._reply_failure, callbackArgs=args, errbackArgs=args)

    def _reply(self, result: Any, channel: RemotingProtocol, request: RemotingCommand) -> None:
        if result is None:
            channel.answered()
            return
        if type(result) is not RemotingCommand:
            error = TypeError(f"processor returned {type(result).__name__}, not a RemotingCommand")
            self._reply_failure(Failure(error), channel, request)
            return
        self._respond(channel, request, result)

    def _reply_failure(self, failure: Failure, channel: RemotingProtocol, request: RemotingCommand) -> None:
        refused = failure.value
        if isinstance(refused, RequestRefused):  # a hook's refusal: one line, no traceback
            self.request_refused(channel, request, refused.remark, refused.code)
            return
        if isinstance(refused, (RequestError, RecursionError)):  # bad input: one line, no traceback
            self.request_refused(channel, request, str(refused) if isinstance(refused, RequestError)
                                 else "request body nested too deeply")
            return
        self.log.failure(
            "request {code} from {peer} failed", failure, level=LogLevel.error, code=request.code,
            peer=channel.remote_address,
        )
        self._respond(channel, request, self._system_error(request, failure.value))

    def request_refused(self, channel: RemotingProtocol, request: RemotingCommand, remark: str,
                        code: int = ResponseCode.SYSTEM_ERROR) -> None:
        """Answer *request* *code* with *remark* (invalid input, or a hook's refusal), logging one warning line."""
        held = self._refusals_logged.admit((channel.remote_address, request.code, remark))
        if held is not None:
            self.log.warn("request {code} from {peer} refused: {remark}{held_back}", code=request.code,
                          peer=channel.remote_address, remark=remark,
                          held_back=f" ({held} more like it in the last 10 s)" if held else "")
        self._respond(channel, request, request.make_response(code, remark))

    def _respond(self, channel: RemotingProtocol, request: RemotingCommand, response: RemotingCommand) -> None:
        """Send *response* unless *request* is oneway; a hook or encoding error becomes SYSTEM_ERROR."""
        try:
            if not request.flag & ONEWAY_FLAG:
                self._send_response(channel, request, response)
        finally:
            channel.answered()

    def _send_response(self, channel: RemotingProtocol, request: RemotingCommand, response: RemotingCommand) -> None:
        response.opaque = request.opaque
        response.flag |= RESPONSE_FLAG
        response.serialize_type = request.serialize_type
        try:
            if self.rpc_hooks:
                self.run_after_hooks(response, channel.remote_address, request)
            channel.send_command(response)
        except Exception:
            failure = Failure()
            self.log.failure("cannot send response to {peer}", failure, level=LogLevel.error,
                             peer=channel.remote_address)
            if response.code != ResponseCode.SYSTEM_ERROR:
                self._send_response(channel, request, self._system_error(request, failure.value))

    @staticmethod
    def _system_error(request: RemotingCommand, error: BaseException | None) -> RemotingCommand:
        return request.make_response(ResponseCode.SYSTEM_ERROR, f"{type(error).__name__}: {error}")

    def _notify(self, method: str, channel: RemotingProtocol) -> None:
        for listener in self._listeners:
            try:
                getattr(listener, method)(channel.remote_address, channel)
            except Exception:
                self.log.failure("listener {method} failed", level=LogLevel.error, method=method)

    def _scan_requests(self) -> None:
        now = self._reactor.seconds()
        for channel in list(self._channels):
            try:
                channel.expire_requests(now)
            except Exception:  # an escaping exception would end the LoopingCall
                self.log.failure("timeout scan of {peer} failed", level=LogLevel.error, peer=channel.remote_address)


if speedups.compiled is not None and hasattr(speedups.compiled, "set_lone_read"):
    # the reactor's C turn reads one whole frame without dataReceived (rocketpy/_speedups_loneread.h): for
    # a RemotingProtocol owned by a node whose requests_received is this one, as these two do it
    speedups.compiled.set_lone_read(RemotingProtocol, RemotingProtocol.dataReceived, RemotingNode.requests_received,
                                    Failure, PLAIN_SEND, write_now)
