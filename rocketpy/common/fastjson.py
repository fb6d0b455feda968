"""JSON as Java's fastjson writes it: compact, keys sorted, maps with object keys.

RocketMQ bodies keyed by a ``MessageQueue`` (GET_TOPIC_STATS_INFO, GET_CONSUME_STATS,
ConsumerRunningInfo's ``mqTable``) are written by fastjson with the key *object* in
key position, ``{{"brokerName":"b","queueId":0,"topic":"T"}:{…}}``: not standard JSON,
but what the Java admin tools parse (spec ``remoting-protocol.md`` §3.7).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any


def dump_json(obj: Any) -> bytes:
    """Compact JSON with sorted keys (fastjson's order)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")


def object_key_map(entries: Iterable[tuple[dict[str, Any], Any]]) -> str:
    """A fastjson map with object keys (``{{"brokerName":…}:{…}}``), in the order given."""
    return "{" + ",".join(dump_json(k).decode() + ":" + dump_json(v).decode() for k, v in entries) + "}"


def raw_object(fields: Mapping[str, str]) -> str:
    """A JSON object whose values are already encoded (e.g. by :func:`object_key_map`), keys sorted."""
    return "{" + ",".join(json.dumps(k) + ":" + fields[k] for k in sorted(fields)) + "}"
