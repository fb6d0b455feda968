"""Test doubles for the name server tests."""

from __future__ import annotations

from zope.interface import implementer

from rocketpy.common.topic import DataVersion, TopicConfig
from rocketpy.interfaces import IChannel
from rocketpy.namesrv.bodies import RegisterBrokerBody, encode_register_body
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand


@implementer(IChannel)
class FakeChannel:
    """A channel that records whether it was closed."""

    def __init__(self, remote_address: str = "127.0.0.1:50000") -> None:
        self.remote_address = remote_address
        self.closed = False

    def invoke_sync(self, request: RemotingCommand, timeout: float) -> None:
        raise AssertionError("the name server never calls brokers")

    def invoke_oneway(self, request: RemotingCommand) -> None:
        raise AssertionError("the name server never calls brokers")

    def close(self) -> None:
        self.closed = True


def register_request(
    broker_name: str = "broker-a",
    broker_addr: str = "127.0.0.1:10911",
    broker_id: int = 0,
    topics: dict[str, int] | None = None,
    version: DataVersion = DataVersion(1, 1000),
    cluster: str = "DefaultCluster",
    compressed: bool = False,
) -> RemotingCommand:
    """A REGISTER_BROKER request for ``topics`` (name -> queue count)."""
    configs = {name: TopicConfig(name, count, count, 6) for name, count in (topics or {"T": 4}).items()}
    body = encode_register_body(RegisterBrokerBody(version, configs, []), compressed)
    ext = {
        "brokerName": broker_name,
        "brokerAddr": broker_addr,
        "clusterName": cluster,
        "haServerAddr": broker_addr.rsplit(":", 1)[0] + ":10912",
        "brokerId": str(broker_id),
        "compressed": "true" if compressed else "false",
        "bodyCrc32": "0",
    }
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body)
