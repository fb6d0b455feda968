"""Requests for the name server tests."""

from __future__ import annotations

from rocketpy.common.topic import DataVersion, TopicConfig
from rocketpy.namesrv.bodies import RegisterBrokerBody, encode_register_body
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand


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
