"""A 5.x client as the broker's client tables see it: a channel per client id.

The Java proxy registers gRPC clients with the broker's ``ProducerManager`` and
``ConsumerManager`` (``ClientActivity.registerProducer/registerConsumer``), so admin tools list
them (GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST) and they expire like 4.x
clients without heartbeats. What the broker sends such a client over "remoting" becomes a command
on its Telemetry stream (``GrpcClientChannel`` of the Java proxy): CHECK_TRANSACTION_STATE a
RecoverOrphanedTransactionCommand. Other oneway requests (NOTIFY_CONSUMER_IDS_CHANGED) mean
nothing to a 5.x client and are dropped; other requests fail with :class:`NotDeliverable`.
"""

from __future__ import annotations

from typing import Protocol

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from rocketpy.common.message import RecordError, decode_record
from rocketpy.grpc.transaction import recover_command
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.interfaces import IChannel
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand


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
    """

    def __init__(self, client_id: str, remote_address: str, broker_name: str = "") -> None:
        self.client_id = client_id
        self.remote_address = remote_address
        self.broker_name = broker_name
        #: the client's open Telemetry stream (its latest), None when it has none
        self.stream: TelemetryStream | None = None

    def attach(self, stream: TelemetryStream) -> None:
        """Server commands go down ``stream`` from now on."""
        self.stream = stream

    def detach(self, stream: TelemetryStream) -> None:
        """``stream`` ended: forget it unless a newer one replaced it."""
        if self.stream is stream:
            self.stream = None

    def write(self, command: rpc.TelemetryCommand) -> Deferred[None]:
        """Send ``command`` down the Telemetry stream; fails with NotDeliverable when there is none."""
        stream = self.stream
        if stream is None or not stream.write(command):
            return fail(NotDeliverable(f"gRPC client {self.client_id} has no open Telemetry stream"))
        return succeed(None)

    def invoke_sync(self, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        return fail(NotDeliverable(f"request {request.code} cannot reach gRPC client {self.client_id}"))

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
