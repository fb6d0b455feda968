"""JSON bodies of the name server commands (doc/wire.md §2).

Outgoing bodies are standard JSON with sorted keys, like fastjson's output but
with quoted broker-id keys (``{"0":"127.0.0.1:10911"}``). Incoming bodies come
from Java brokers' fastjson, which writes ``Map<Long,…>`` keys unquoted, so
they are read with :func:`loads_tolerant`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketpy.common.fastjson import BodyError, as_int, dump_json, loads_tolerant
from rocketpy.common.route import BrokerData, TopicRouteData
from rocketpy.common.topic import DataVersion, TopicConfig


#: Upper bound for an inflated registration body (guards against zip bombs).
MAX_INFLATED_SIZE = 64 * 1024 * 1024


# -- outgoing bodies -------------------------------------------------------


def encode_topic_route(route: TopicRouteData) -> bytes:
    """TopicRouteData JSON; ``orderTopicConf`` only when set."""
    return dump_json(route.to_json())


def encode_cluster_info(brokers: Mapping[str, BrokerData], clusters: Mapping[str, Iterable[str]]) -> bytes:
    """ClusterInfo JSON: ``brokerAddrTable`` and ``clusterAddrTable``."""
    return dump_json(
        {
            "brokerAddrTable": {name: b.to_json() for name, b in brokers.items()},
            "clusterAddrTable": {cluster: sorted(names) for cluster, names in clusters.items()},
        }
    )


def encode_topic_list(topics: Iterable[str], broker_addr: str | None = None) -> bytes:
    """TopicList JSON; ``brokerAddr`` only when given."""
    body: dict[str, Any] = {"topicList": list(topics)}
    if broker_addr is not None:
        body["brokerAddr"] = broker_addr
    return dump_json(body)


def encode_kv_table(table: Mapping[str, str]) -> bytes:
    """KVTable JSON: ``{"table":{…}}``."""
    return dump_json({"table": dict(table)})


def encode_data_version(version: DataVersion) -> bytes:
    """DataVersion JSON: ``{"counter":…,"timestamp":…}``."""
    return dump_json(version.to_json())


# -- incoming bodies -------------------------------------------------------


def _as_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BodyError(f"{what} is not a JSON object")
    return value


def _object_field(obj: dict[str, Any], key: str) -> dict[str, Any]:
    # A missing or null object field reads as empty.
    value = obj.get(key)
    return {} if value is None else _as_object(value, key)


def data_version_from_json(value: Any) -> DataVersion:
    """A DataVersion from its parsed JSON (missing fields are 0)."""
    obj = _as_object(value, "dataVersion")
    return DataVersion(
        as_int(obj.get("counter", 0), "dataVersion.counter"),
        as_int(obj.get("timestamp", 0), "dataVersion.timestamp"),
    )


def decode_data_version(body: bytes) -> DataVersion:
    """Parse a DataVersion body (QUERY_DATA_VERSION)."""
    return data_version_from_json(loads_tolerant(body))


def _topic_config_from_json(name: str, value: Any) -> TopicConfig:
    obj = _as_object(value, f"topic config {name!r}")
    defaults = TopicConfig(name)
    return TopicConfig(
        str(obj.get("topicName", name)),
        as_int(obj.get("readQueueNums", defaults.read_queue_nums), "readQueueNums"),
        as_int(obj.get("writeQueueNums", defaults.write_queue_nums), "writeQueueNums"),
        as_int(obj.get("perm", defaults.perm), "perm"),
        topic_sys_flag=as_int(obj.get("topicSysFlag", defaults.topic_sys_flag), "topicSysFlag"),
    )


def _string_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyError(f"{what} is not a JSON array")
    return [str(item) for item in value]


@dataclass(slots=True)
class RegisterBrokerBody:
    """The body of REGISTER_BROKER: the broker's topic table and filter servers."""

    data_version: DataVersion = field(default_factory=DataVersion)
    topic_configs: dict[str, TopicConfig] = field(default_factory=dict)
    filter_servers: list[str] = field(default_factory=list)


def decode_register_body(body: bytes, compressed: bool = False) -> RegisterBrokerBody:
    """Parse a REGISTER_BROKER body, plain JSON or the compressed form.

    An empty body is a registration without topics (data version 0).

    :raises BodyError: when the body is malformed.
    """
    if not body:
        return RegisterBrokerBody()
    if compressed:
        return _decode_compressed(body)
    obj = _as_object(loads_tolerant(body), "RegisterBrokerBody")
    wrapper = _object_field(obj, "topicConfigSerializeWrapper")
    table = _object_field(wrapper, "topicConfigTable")
    return RegisterBrokerBody(
        data_version_from_json(_object_field(wrapper, "dataVersion")),
        {name: _topic_config_from_json(name, value) for name, value in table.items()},
        _string_list(obj.get("filterServerList"), "filterServerList"),
    )


def _decode_compressed(body: bytes) -> RegisterBrokerBody:
    # zlib stream of: int32-prefixed DataVersion JSON, int32 topic count, per topic an
    # int32-prefixed "name readQ writeQ perm filterType", int32-prefixed filter list JSON.
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(body, MAX_INFLATED_SIZE)
    except zlib.error as e:
        raise BodyError(f"bad compressed register body: {e}") from None
    if inflater.unconsumed_tail:
        raise BodyError(f"compressed register body inflates beyond {MAX_INFLATED_SIZE} bytes")
    parts = _LengthPrefixed(raw)
    version = data_version_from_json(loads_tolerant(parts.chunk()))
    topics: dict[str, TopicConfig] = {}
    for _ in range(parts.int32()):
        fields = parts.chunk().decode("utf-8", "replace").split(" ")
        if len(fields) < 4:
            raise BodyError(f"bad compressed topic config: {' '.join(fields)!r}")
        name = fields[0]
        topics[name] = TopicConfig(
            name,
            as_int(fields[1], "readQueueNums"),
            as_int(fields[2], "writeQueueNums"),
            as_int(fields[3], "perm"),
        )
    filters = _string_list(loads_tolerant(parts.chunk()), "filterServerList")
    return RegisterBrokerBody(version, topics, filters)


class _LengthPrefixed:
    """Reads big-endian int32 values and int32-length-prefixed chunks."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def int32(self) -> int:
        if self._pos + 4 > len(self._data):
            raise BodyError("compressed register body is truncated")
        (value,) = struct.unpack_from(">i", self._data, self._pos)
        self._pos += 4
        if value < 0:
            raise BodyError(f"negative length or count in compressed register body: {value}")
        return int(value)

    def chunk(self) -> bytes:
        size = self.int32()
        if self._pos + size > len(self._data):
            raise BodyError("compressed register body is truncated")
        self._pos += size
        return self._data[self._pos - size : self._pos]


def encode_register_body(body: RegisterBrokerBody, compressed: bool = False) -> bytes:
    """A REGISTER_BROKER body as a broker sends it (plain JSON or compressed)."""
    version = body.data_version.to_json()
    if compressed:
        topic_parts = [
            f"{c.topic_name} {c.read_queue_nums} {c.write_queue_nums} {c.perm} SINGLE_TAG".encode("utf-8")
            for c in body.topic_configs.values()
        ]
        raw = _prefixed(dump_json(version)) + struct.pack(">i", len(topic_parts))
        raw += b"".join(_prefixed(p) for p in topic_parts) + _prefixed(dump_json(body.filter_servers))
        return zlib.compress(raw, 9)
    table = {name: c.to_json() for name, c in body.topic_configs.items()}
    return dump_json(
        {
            "filterServerList": body.filter_servers,
            "topicConfigSerializeWrapper": {"dataVersion": version, "topicConfigTable": table},
        }
    )


def _prefixed(chunk: bytes) -> bytes:
    return struct.pack(">i", len(chunk)) + chunk
