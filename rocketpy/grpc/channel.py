"""A 5.x client as the broker's client tables see it: a channel per client id.

The Java proxy registers gRPC clients with the broker's ``ProducerManager`` and
``ConsumerManager`` (``ClientActivity.registerProducer/registerConsumer``), so admin tools list
them (GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST) and they expire like 4.x
clients without heartbeats. Requests the broker would send them over remoting are not delivered
yet: oneway ones (NOTIFY_CONSUMER_IDS_CHANGED) are dropped, others fail (a later slice maps
them to Telemetry commands).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from rocketpy.interfaces import IChannel
from rocketpy.remoting.command import RemotingCommand


class NotDeliverable(Exception):
    """A remoting request to a 5.x client, which only speaks gRPC."""


@implementer(IChannel)
class GrpcClientChannel:
    """One 5.x client (by its ``x-mq-client-id``) in the broker's client tables."""

    def __init__(self, client_id: str, remote_address: str) -> None:
        self.client_id = client_id
        self.remote_address = remote_address

    def invoke_sync(self, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        return fail(NotDeliverable(f"request {request.code} cannot reach gRPC client {self.client_id}"))

    def invoke_oneway(self, request: RemotingCommand) -> Deferred[None]:
        return succeed(None)

    def close(self) -> None:
        pass
