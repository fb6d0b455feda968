"""A 5.x client as the broker's client tables see it: a channel per client id.

The Java proxy registers gRPC clients with the broker's ``ProducerManager`` and
``ConsumerManager`` (``ClientActivity.registerProducer/registerConsumer``), so admin tools list
them (GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST) and they expire like 4.x
clients without heartbeats. What the broker sends such a client over "remoting" becomes a command
on its Telemetry stream (``GrpcClientChannel`` of the Java proxy): CHECK_TRANSACTION_STATE a
RecoverOrphanedTransactionCommand, CONSUME_MESSAGE_DIRECTLY and GET_CONSUMER_RUNNING_INFO the
commands of :mod:`rocketpy.grpc.commands`, whose answers (matched by nonce) are the responses; a
client that does not answer in time fails the call with ``RemotingTimeoutError``. Other oneway
requests (NOTIFY_CONSUMER_IDS_CHANGED) mean nothing to a 5.x client and are dropped; other
requests fail with :class:`NotDeliverable`.
"""

from __future__ import annotations

import itertools
from typing import Any, Protocol

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from zope.interface import implementer

from rocketpy.common.message import RecordError, decode_record
from rocketpy.grpc import commands
from rocketpy.grpc.transaction import recover_command
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.interfaces import IChannel
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingTimeoutError


class NotDeliverable(Exception):
    """A remoting request to a 5.x client that it cannot get (no Telemetry stream, or no such command)."""


class TelemetryStream(Protocol):
    """The server's side of one client's Telemetry stream."""

    def write(self, command: rpc.TelemetryCommand) -> bool:
        """Send ``command`` to the client (from any thread); False once the stream has ended."""


@implementer(IChannel)
class GrpcClientChannel:
    """One 5.x client (by its ``x-mq-client-id``) in the broker's client tables.

    :param broker_name: the broker whose half messages the transaction ids name.
    :param clock: times the calls waiting for the client's answer.
    """

    def __init__(self, client_id: str, remote_address: str, broker_name: str = "",
                 clock: IReactorTime | None = None) -> None:
        self.client_id = client_id
        self.remote_address = remote_address
        self.broker_name = broker_name
        self._clock = clock
        #: the client's open Telemetry stream (its latest), None when it has none
        self.stream: TelemetryStream | None = None
        #: the client's settings (what GET_CONSUMER_RUNNING_INFO tells of it)
        self.settings: pb.Settings | None = None
        self._nonces = itertools.count()
        #: calls waiting for the client's answer, by nonce: the request and its response Deferred
        self._waiting: dict[str, tuple[RemotingCommand, Deferred[RemotingCommand]]] = {}

    @property
    def writable(self) -> bool:
        """Whether the broker's requests can reach the client now (its Telemetry stream is open)."""
        return self.stream is not None

    def attach(self, stream: TelemetryStream) -> None:
        """Server commands go down ``stream`` from now on."""
        self.stream = stream

    def detach(self, stream: TelemetryStream) -> None:
        """``stream`` ended: forget it unless a newer one replaced it."""
        if self.stream is stream:
            self.stream = None

    def write(self, command: rpc.TelemetryCommand) -> Deferred[None]:
        """Send ``command`` down the Telemetry stream; fails with NotDeliverable when there is none."""
        return succeed(None) if self._deliver(command) else fail(self._no_stream())

    def _deliver(self, command: rpc.TelemetryCommand) -> bool:
        stream = self.stream
        return stream is not None and stream.write(command)

    def _no_stream(self) -> NotDeliverable:
        return NotDeliverable(f"gRPC client {self.client_id} has no open Telemetry stream")

    def invoke_sync(self, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        """Ask the client (:data:`commands.ASKED`); the response once it answers, or RemotingTimeoutError."""
        if request.code not in commands.ASKED or self._clock is None:
            return fail(NotDeliverable(f"request {request.code} cannot reach gRPC client {self.client_id}"))
        if request.code == RequestCode.GET_CONSUMER_RUNNING_INFO and not commands.wants_jstack(request):
            return succeed(request.make_response(ResponseCode.SUCCESS, None, None,
                                                 commands.running_info(self.settings)))
        nonce = str(next(self._nonces))
        try:
            command = commands.command_for(request, nonce)
        except RecordError as e:
            return fail(NotDeliverable(f"request {request.code} for {self.client_id}: unreadable message: {e}"))
        if not self._deliver(command):
            return fail(self._no_stream())
        answered: Deferred[RemotingCommand] = Deferred()
        self._waiting[nonce] = (request, answered)

        def forget(result: Any) -> Any:
            self._waiting.pop(nonce, None)
            return result

        def timed_out(result: Any, seconds: float) -> Failure:
            return Failure(RemotingTimeoutError(f"gRPC client {self.client_id} did not answer the "
                                                f"{command.WhichOneof('command')} within {seconds} s"))

        answered.addTimeout(timeout, self._clock, onTimeoutCancel=timed_out)
        return answered.addBoth(forget)

    def answered(self, answer: rpc.TelemetryCommand) -> None:
        """The client's answer (ThreadStackTrace, VerifyMessageResult) to a call still waiting; late ones are dropped."""
        nonce = commands.answer_nonce(answer)
        waiting = self._waiting.pop(nonce, None) if nonce is not None else None
        if waiting is not None:
            request, d = waiting
            d.callback(commands.response_to(request, answer, self.settings))

    def invoke_oneway(self, request: RemotingCommand) -> Deferred[None]:
        if request.code != RequestCode.CHECK_TRANSACTION_STATE:
            return succeed(None)
        try:
            half = decode_record(request.body)
            command = recover_command(self.broker_name, request, half)
        except (RecordError, KeyError, ValueError) as e:
            return fail(NotDeliverable(f"CHECK_TRANSACTION_STATE for {self.client_id} is unreadable: {e}"))
        return self.write(command)

    def close(self) -> None:
        pass
