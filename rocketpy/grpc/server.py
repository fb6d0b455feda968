"""``GrpcService``: grpcio's asyncio server on its own thread, every RPC handed to the reactor.

grpc.aio runs on an asyncio loop in one thread owned by this service (started in
``startService``, ended in ``stopService``). A handler does no broker work there: it hops to
the reactor with ``callFromThread``, runs :class:`~rocketpy.grpc.messaging.Messaging` there,
and awaits the result through an asyncio future settled with ``call_soon_threadsafe``. A
long poll therefore holds neither a thread nor the reactor (doc/grpc.md, "Threads").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import grpc
from twisted.application.service import Service
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.interfaces import IReactorFromThreads, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from rocketpy.acl.addresses import host_of
from rocketpy.grpc.acl import GrpcAccessCheck
from rocketpy.grpc.checkpoint import CHECKPOINT_INTERVAL_S
from rocketpy.grpc.endpoint import listen_address
from rocketpy.grpc.messaging import CallContext, Messaging
from rocketpy.grpc.status import GrpcError, status
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.grpc.v2 import service_pb2_grpc
from rocketpy.grpc.v2.definition_pb2 import Code
from rocketpy.remoting.tls import ServerTLS
from rocketpy.util.ratelimit import EveryFewSeconds
from rocketpy.util.wakeups import CoalescedJobs

GRACE_SECONDS = 1.0
#: ProxyConfig.grpcMaxInboundMessageSize: a SendMessage of several 4 MiB bodies still arrives, and
#: too large a body gets MESSAGE_BODY_TOO_LARGE instead of grpcio's RESOURCE_EXHAUSTED.
MAX_INBOUND_MESSAGE_SIZE = 130 * 1024 * 1024
#: seconds between the server's HTTP/2 pings on a connection, and how long it waits for the ack
#: before closing it: a client whose host vanished ends its Telemetry stream (and is forgotten,
#: ``Messaging.forget_gone_clients``) instead of keeping it open until TCP gives up after hours
KEEPALIVE = (60.0, 20.0)


class ReactorHop:
    """Runs functions on the reactor from asyncio code and awaits their (Deferred) results.

    Both directions coalesce wake-ups (:class:`~rocketpy.util.wakeups.CoalescedJobs`): calls
    arriving together reach the reactor in one turn, results go back to the loop in one.
    """

    def __init__(self, reactor: IReactorFromThreads) -> None:
        self._to_reactor = CoalescedJobs(reactor.callFromThread)
        self._to_loop: CoalescedJobs | None = None

    def run_soon(self, job: Callable[[], object]) -> None:
        """Run ``job`` on the reactor; nothing waits for it."""
        self._to_reactor.run_soon(job)

    async def __call__(self, f: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        if self._to_loop is None:
            self._to_loop = CoalescedJobs(loop.call_soon_threadsafe)
        to_loop = self._to_loop
        future: asyncio.Future[Any] = loop.create_future()
        deferreds: list[Deferred[Any]] = []

        def settle(result: Any) -> None:
            if future.done():
                return
            if isinstance(result, Failure):
                future.set_exception(cast(BaseException, result.value))
            else:
                future.set_result(result)

        def run() -> None:
            d = maybeDeferred(f, *args)
            deferreds.append(d)
            d.addBoth(lambda result: to_loop.run_soon(lambda: settle(result)))

        self._to_reactor.run_soon(run)
        try:
            return await future
        except asyncio.CancelledError:  # the client went away: stop waiting on the reactor too
            def cancel() -> None:
                for d in deferreds:
                    d.cancel()

            self._to_reactor.run_soon(cancel)
            raise


_END = object()


class TelemetryOutbox:
    """What goes down one Telemetry stream, in order: answers (from the loop) and the broker's
    commands (:meth:`write`, from the reactor thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        #: set once the stream ended (on the loop thread)
        self.closed = False

    def write(self, command: rpc.TelemetryCommand) -> bool:
        if self.closed:
            return False
        try:
            self._loop.call_soon_threadsafe(self.queue.put_nowait, command)
        except RuntimeError:  # the loop is closed: the endpoint stopped
            return False
        return True


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, Any]:
    return dict(context.invocation_metadata() or ())


def _context(context: grpc.aio.ServicerContext) -> CallContext:
    """Who calls. :raises GrpcError: CLIENT_ID_REQUIRED without ``x-mq-client-id`` (as the Java proxy)."""
    metadata = _metadata(context)
    client_id = str(metadata.get("x-mq-client-id", "")).strip()
    if not client_id:
        raise GrpcError(Code.CLIENT_ID_REQUIRED, "client id cannot be empty")
    peer = context.peer() or ""  # "ipv4:127.0.0.1:5555"
    if peer.startswith(("ipv4:", "ipv6:")):
        peer = peer.split(":", 1)[1]
    return CallContext(client_id, peer)


class Servicer(service_pb2_grpc.MessagingServiceServicer):
    """The asyncio side of every RPC: read the context, hop to the reactor, answer."""

    log = Logger()

    def __init__(self, messaging: Messaging, hop: ReactorHop, access: GrpcAccessCheck | None = None,
                 clock: IReactorTime | None = None) -> None:
        self._messaging = messaging
        self._hop = hop
        self._access = access
        #: one refusal line per peer, RPC and reason every 10 s, as the 4.x port (used on the loop thread only)
        self._refusals_logged = EveryFewSeconds(clock)

    def _admit(self, context: grpc.aio.ServicerContext, request: Any) -> CallContext:
        """Who calls, once the ACL (when on) lets *request* through.

        :raises GrpcError: CLIENT_ID_REQUIRED, or UNAUTHORIZED / FORBIDDEN (logged as one warning).
        """
        call = _context(context)
        if self._access is not None:
            try:
                self._access(_metadata(context), host_of(call.peer), request)
            except GrpcError as e:
                rpc_name = request.DESCRIPTOR.name
                held = self._refusals_logged.admit((call.peer, rpc_name, e.message))
                if held is not None:
                    self.log.warn("gRPC ACL refused {rpc} from {peer}: {code} {reason}{held_back}", rpc=rpc_name,
                                  peer=call.peer, code=Code.Name(e.code), reason=e.message,
                                  held_back=f" ({held} more like it in the last 10 s)" if held else "")
                raise
        return call

    def _to_reactor(self, f: Callable[..., Any], *args: Any) -> None:
        """Run ``f`` on the reactor without waiting for it (safe while this call is cancelled)."""
        self._hop.run_soon(lambda: f(*args))

    async def _unary(self, method: Callable[..., Any], request: Any, context: grpc.aio.ServicerContext,
                     response_type: Callable[..., Any]) -> Any:
        try:
            return await self._hop(method, self._admit(context, request), request)
        except GrpcError as e:
            return response_type(status=status(e.code, e.message))
        except Exception as e:  # a bug: the client gets INTERNAL_SERVER_ERROR, the log the traceback
            self.log.failure("gRPC {method} failed", Failure(e), method=method.__name__)
            return response_type(status=status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"))

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        return await self._unary(self._messaging.query_route, request, context, rpc.QueryRouteResponse)

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        return await self._unary(self._messaging.query_assignment, request, context, rpc.QueryAssignmentResponse)

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        return await self._unary(self._messaging.heartbeat, request, context, rpc.HeartbeatResponse)

    async def SendMessage(self, request: Any, context: Any) -> Any:
        return await self._unary(self._messaging.send_message, request, context, rpc.SendMessageResponse)

    async def AckMessage(self, request: Any, context: Any) -> Any:
        return await self._unary(self._messaging.ack_message, request, context, rpc.AckMessageResponse)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        return await self._unary(self._messaging.change_invisible_duration, request, context,
                                 rpc.ChangeInvisibleDurationResponse)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        return await self._unary(self._messaging.forward_message_to_dead_letter_queue, request, context,
                                 rpc.ForwardMessageToDeadLetterQueueResponse)

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        return await self._unary(self._messaging.notify_client_termination, request, context,
                                 rpc.NotifyClientTerminationResponse)

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        async for response in self._stream(lambda: self._messaging.receive_message, request, context,
                                           rpc.ReceiveMessageResponse):
            yield response

    def _part(self, name: str) -> Any:
        """``messaging.queues`` or ``messaging.recall``. :raises GrpcError: NOT_IMPLEMENTED when it is not served."""
        part = getattr(self._messaging, name)
        if part is None:
            raise GrpcError(Code.NOT_IMPLEMENTED, f"this endpoint does not serve {name}")
        return part

    async def _served(self, name: str, method: str, request: Any, context: Any, response_type: Any) -> Any:
        try:
            call = getattr(self._part(name), method)
        except GrpcError as e:
            return response_type(status=status(e.code, e.message))
        return await self._unary(call, request, context, response_type)

    async def RecallMessage(self, request: Any, context: Any) -> Any:
        return await self._served("recall", "recall_message", request, context, rpc.RecallMessageResponse)

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        return await self._served("queues", "update_offset", request, context, rpc.UpdateOffsetResponse)

    async def GetOffset(self, request: Any, context: Any) -> Any:
        return await self._served("queues", "get_offset", request, context, rpc.GetOffsetResponse)

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        return await self._served("queues", "query_offset", request, context, rpc.QueryOffsetResponse)

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """A status, the messages, then the next offset (``PullMessageResponseStreamWriter``)."""
        async for response in self._stream(lambda: self._part("queues").pull_message, request, context,
                                           rpc.PullMessageResponse):
            yield response

    async def _stream(self, method: Callable[[], Any], request: Any, context: Any,
                      response_type: Any) -> AsyncIterator[Any]:
        """A server-streaming RPC whose whole stream the reactor answers as a list; an error is one status."""
        remaining = context.time_remaining()
        remaining_ms = None if remaining is None else int(remaining * 1000)
        try:
            stream = await self._hop(method(), self._admit(context, request), request, remaining_ms)
        except GrpcError as e:
            stream = [response_type(status=status(e.code, e.message))]
        except Exception as e:
            self.log.failure("gRPC {rpc} failed", Failure(e), rpc=type(request).__name__)
            stream = [response_type(status=status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"))]
        for response in stream:
            yield response

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        return await self._unary(self._messaging.end_transaction, request, context, rpc.EndTransactionResponse)

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        """The client's commands are read by a task of their own; what goes back (answers, and the
        broker's commands written from the reactor) passes through one :class:`TelemetryOutbox`."""
        try:
            call = _context(context)
        except GrpcError as e:  # ClientActivity.processTelemetryException: a 4xxxx code is INVALID_ARGUMENT
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"process client telemetryCommand failed. {e}")
            return
        outbox = TelemetryOutbox(asyncio.get_running_loop())
        reader = asyncio.ensure_future(self._read_telemetry(call, request_iterator, context, outbox))
        try:
            while True:
                item = await outbox.queue.get()
                if item is _END:
                    break
                if isinstance(item, Exception):
                    await context.abort(grpc.StatusCode.INTERNAL, f"process client telemetryCommand failed. {item}")
                yield item
        finally:
            outbox.closed = True
            reader.cancel()
            self._to_reactor(self._messaging.telemetry_closed, call, outbox)

    async def _read_telemetry(self, call: CallContext, request_iterator: Any, context: Any,
                              outbox: TelemetryOutbox) -> None:
        """Each command of the client applied on the reactor, its answer (if any) to ``outbox``; then the end."""
        try:
            async for command in request_iterator:
                try:
                    self._admit(context, command)
                except GrpcError as e:  # the command is not applied; the stream stays for the next one
                    outbox.queue.put_nowait(rpc.TelemetryCommand(status=status(e.code, e.message)))
                    continue
                answer = await self._hop(self._messaging.telemetry, call, command, outbox)
                if answer is not None:
                    outbox.queue.put_nowait(answer)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.log.failure("gRPC Telemetry failed", Failure(e))
            outbox.queue.put_nowait(e)
        outbox.queue.put_nowait(_END)


class GrpcService(Service):
    """Serves :class:`Messaging` on ``listen`` (``tcp:PORT:interface=HOST``) from a loop thread.

    :param make_messaging: builds the Messaging on the reactor at start (the broker is started by then).
    :param access: the plain ACL check of every request (``--acl-enable``), None for none.
    :param keepalive: ``(interval, timeout)`` seconds of the server's keepalive pings.
    :param tls: the broker's ``--tls-*`` settings: ``enforcing`` serves TLS only (client
        certificates required with a client CA); ``permissive`` and ``disabled`` serve plaintext
        (grpcio cannot serve both on one port; doc/grpc.md, "TLS").
    """

    log = Logger()

    def __init__(self, reactor: Any, listen: str, make_messaging: Callable[[], Messaging],
                 access: GrpcAccessCheck | None = None, tls: ServerTLS | None = None,
                 keepalive: tuple[float, float] = KEEPALIVE) -> None:
        self._reactor = reactor
        self._keepalive = keepalive
        self._access = access
        #: the TLS the port speaks (``enforcing``), None for plaintext
        self.tls = tls if tls is not None and tls.mode == "enforcing" else None
        self._permissive = tls is not None and tls.mode == "permissive"
        self._address = listen_address(listen)
        self._make_messaging = make_messaging
        self.messaging: Messaging | None = None
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: grpc.aio.Server | None = None
        self._thread_done: Deferred[None] | None = None
        self._checkpoints: LoopingCall | None = None
        self._started: Deferred[None] = succeed(None)

    def startService(self) -> Deferred[None]:
        """Start serving; fires once listening (the service tree waits for it), fails when the endpoint cannot start."""
        super().startService()
        self._started = Deferred.fromCoroutine(self._start())
        return self.when_started()

    def when_started(self) -> Deferred[None]:
        """A new Deferred: fires once listening, fails when the endpoint cannot start."""
        return _chain(self._started)

    async def _start(self) -> None:
        self.messaging = self._make_messaging()
        self.messaging.start()
        checkpoint = self.messaging.checkpoint
        if checkpoint is not None:
            self._checkpoints = LoopingCall(checkpoint.persist)
            self._checkpoints.clock = self._reactor
            self._checkpoints.start(CHECKPOINT_INTERVAL_S, now=False)
        loop = self._loop = _new_event_loop()
        self._thread_done = Deferred()
        thread = threading.Thread(target=self._run_loop, args=(loop,), name="rocketpy-grpc", daemon=True)
        thread.start()
        servicer = Servicer(self.messaging, ReactorHop(self._reactor), self._access, self._reactor)
        self.port = await self._in_loop(self._serve(servicer))
        if self.messaging.cluster is not None:
            self.messaging.cluster.listening(self.port)
        if self._permissive:
            self.log.warn("--tls-mode permissive: the gRPC endpoint {address} speaks plaintext only (grpcio "
                          "cannot serve TLS and plaintext on one port); --tls-mode enforcing makes it TLS only",
                          address=self._address)
        security = "plaintext" if self.tls is None else (
            "TLS only, client certificates required" if self.tls.ca else "TLS only")
        self.log.info("gRPC (RocketMQ 5.x) endpoint listening on {address} (port {port}, {security}, {loop} loop)",
                      address=self._address, port=self.port, security=security,
                      loop=type(loop).__module__.split(".")[0])

    async def _serve(self, servicer: Servicer) -> int:
        interval, timeout = self._keepalive
        server = self._server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", MAX_INBOUND_MESSAGE_SIZE),
            ("grpc.keepalive_time_ms", int(interval * 1000)),
            ("grpc.keepalive_timeout_ms", int(timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),  # ping an idle Telemetry stream too
            ("grpc.http2.ping_timeout_ms", int(timeout * 1000)),
        ])
        service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, server)
        if self.tls is None:
            port = server.add_insecure_port(self._address)
        else:  # the files are read here, on the loop thread
            port = server.add_secure_port(self._address, server_credentials(self.tls))
        await server.start()
        return port

    def _run_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            done = self._thread_done
            if done is not None:
                self._reactor.callFromThread(done.callback, None)

    def stopService(self) -> Deferred[None]:
        if not self.running:  # never started, or stopped already
            return succeed(None)
        super().stopService()
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        try:
            await self._started
        except Exception:  # a failed start was reported by when_started(); stop what did start
            self.log.info("gRPC endpoint stopping after a failed start")
        if self._checkpoints is not None and self._checkpoints.running:
            self._checkpoints.stop()
        if self.messaging is not None:
            self.messaging.stop()
            if self.messaging.cluster is not None:
                await Deferred.fromCoroutine(self.messaging.cluster.stop())
            if self.messaging.checkpoint is not None:
                await self.messaging.checkpoint.persist()
        loop, server = self._loop, self._server
        if loop is None:
            return
        if server is not None:
            try:
                await self._in_loop(server.stop(GRACE_SECONDS))
            except Exception:
                self.log.failure("gRPC server stop failed")
        loop.call_soon_threadsafe(loop.stop)
        if self._thread_done is not None:
            await self._thread_done
        self._loop = self._server = None

    def _in_loop(self, coro: Any) -> Deferred[Any]:
        """Run ``coro`` on the loop thread; a Deferred (fired on the reactor) of its result."""
        assert self._loop is not None
        d: Deferred[Any] = Deferred()
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)

        def done(f: concurrent.futures.Future[Any]) -> None:
            error = f.exception()
            if error is None:
                self._reactor.callFromThread(d.callback, f.result())
            else:
                self._reactor.callFromThread(d.errback, Failure(error))

        future.add_done_callback(done)
        return d


def server_credentials(tls: ServerTLS) -> grpc.ServerCredentials:
    """grpcio's credentials for ``tls``: its certificate and key; with a client CA, client
    certificates it signed are required (as the 4.x ports with ``--tls-ca``).

    :raises TLSConfigError: a file cannot be read.
    """
    cert, key, ca = tls.pem()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (the ``grpc`` extra brings it, but on Windows): 10-20 %
    less broker CPU per gRPC call than asyncio's own loop, the fallback (doc/benchmarks.md)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _chain(d: Deferred[Any]) -> Deferred[None]:
    """A new Deferred that fires (or fails) when ``d`` does; ``d`` keeps its result."""
    out: Deferred[None] = Deferred()

    def passed(result: Any) -> Any:
        out.callback(None)
        return result

    def failed(failure: Failure) -> None:
        out.errback(failure)

    d.addCallbacks(passed, failed)
    return out



def broker_messaging(reactor: Any, broker: Any, retry_delays_ms: list[int],
                     advertised: tuple[str, int] | None = None) -> Messaging:
    """The :class:`Messaging` of a ``BrokerService``: its topics, send processor, store and offsets.

    :param retry_delays_ms: the consumers' retry back-off (the broker's delay levels).
    """
    from rocketpy.grpc.checkpoint import PopCheckpoint
    from rocketpy.grpc.cluster import ClusterView
    from rocketpy.broker.processors import ConsumerManageProcessor
    from rocketpy.grpc.pop import PopService
    from rocketpy.grpc.queues import OFFSET_CODES, QueueRpcs
    from rocketpy.grpc.recall import Recall
    from rocketpy.remoting.responders import Responder
    from rocketpy.store.timer import TimerRules

    slave = broker.config.broker_role == "SLAVE"
    pop = PopService(reactor, broker.store, broker.topics, broker.offsets)
    pop.listen_to(broker.store)
    offsets_path = broker.offsets.path
    checkpoint = PopCheckpoint(pop, None if offsets_path is None else
                               os.path.join(os.path.dirname(offsets_path), "popReceipts.json"))
    checkpoint.writer = broker.offsets.writer  # the broker's config pool, off the reactor
    checkpoint.load()
    messaging = Messaging(reactor, broker.config.broker_name, broker.topics, broker.subscriptions, broker.send_processor,
                     broker.send_back, pop, retry_delays_ms,
                     auto_create_topic=broker.config.auto_create_topic_enable, advertised=advertised,
                     consumers=broker.consumers, producers=broker.producers, end_transaction=broker.end_transaction,
                     cluster=ClusterView(reactor, broker.client, lambda: broker.config.namesrv_addr,
                                         "" if slave else broker.config.broker_name,
                                         broker.config.advertised_address, advertised),
                     slave=slave)
    messaging.checkpoint = checkpoint
    messaging.timer = TimerRules(broker.store_config)
    messaging.recall = Recall(reactor, broker.config.broker_name, broker.topics, broker.send_processor, messaging.timer)
    offsets = ConsumerManageProcessor(broker.tables).handlers
    messaging.queues = QueueRpcs(broker.config.broker_name, broker.pull_processor,
                                 {code: Responder(offsets[code]) for code in OFFSET_CODES}, pop.now_ms)
    return messaging


def broker_access(broker: Any) -> GrpcAccessCheck | None:
    """The ACL check of a ``BrokerService`` with ``--acl-enable`` (its validator's current file), else None."""
    validator = getattr(broker, "acl_validator", None)
    return None if validator is None else GrpcAccessCheck(lambda: validator.acl)
