"""Presentation for ``rocketpy-admin``: aligned tables as mqadmin prints them, message details,
times, and the ``--json`` form of any result."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any

from rocketpy.client.subscription import client_msg_id
from rocketpy.common.message import MessageExt, format_address


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, two spaces apart (the last column unpadded)."""
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def properties(pairs: Iterable[tuple[str, Any]], width: int = 32) -> str:
    """``key: value`` lines with the keys padded (``mqadmin brokerStatus``)."""
    return "\n".join(f"{key:<{width}}: {value}" for key, value in pairs)


def human_time(ms: int) -> str:
    """A store time in ms as local ``yyyy-MM-dd HH:mm:ss,SSS`` (Java's ``timeMillisToHumanString2``); 0 is ``-``."""
    if ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f",{ms % 1000:03d}"


def parse_time(text: str, now: float) -> int:
    """mqadmin's timestamp argument: ``now``, milliseconds, or local ``yyyy-MM-dd#HH:mm:ss:SSS``.

    :raises ValueError: for anything else.
    """
    if text == "now":
        return int(now * 1000)
    if text.isdigit():
        return int(text)
    try:
        date, _, millis = text.rpartition(":") if text.count(":") == 3 else (text, "", "0")
        parsed = time.strptime(date, "%Y-%m-%d#%H:%M:%S")
        return int(time.mktime(parsed)) * 1000 + int(millis or 0)
    except ValueError:
        raise ValueError(f"bad timestamp {text!r}: use now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS") from None


def body_text(body: bytes, charset: str = "utf-8") -> str:
    return body.decode(charset, "replace")


def message(msg: MessageExt, charset: str = "utf-8") -> str:
    """A message as ``mqadmin queryMsgById`` shows it."""
    return properties([
        ("OffsetID", msg.msg_id),
        ("MsgId", client_msg_id(msg)),
        ("Topic", msg.topic),
        ("Tags", f"[{msg.tags or ''}]"),
        ("Keys", f"[{msg.keys or ''}]"),
        ("Queue ID", msg.queue_id),
        ("Queue Offset", msg.queue_offset),
        ("CommitLog Offset", msg.commit_log_offset),
        ("Reconsume Times", msg.reconsume_times),
        ("Born Timestamp", human_time(msg.born_timestamp)),
        ("Store Timestamp", human_time(msg.store_timestamp)),
        ("Born Host", format_address(msg.born_host)),
        ("Store Host", format_address(msg.store_host)),
        ("System Flag", msg.sys_flag),
        ("Properties", json.dumps(msg.properties, sort_keys=True)),
        ("Message Body", body_text(msg.body, charset)),
    ], 20)


def message_line(msg: MessageExt, charset: str = "utf-8", with_body: bool = True) -> str:
    """One message on one line (``mqadmin printMsg``)."""
    line = (f"MSGID: {client_msg_id(msg)} OFFSETID: {msg.msg_id} QUEUE: {msg.queue_id} OFFSET: {msg.queue_offset} "
            f"STORED: {human_time(msg.store_timestamp)} TAGS: {msg.tags or ''} KEYS: {msg.keys or ''}")
    return line + (f" BODY: {body_text(msg.body, charset)}" if with_body else "")


def jsonable(value: Any) -> Any:
    """Dataclasses, messages, enums, bytes and tuples as JSON values."""
    if isinstance(value, MessageExt):
        obj = {f.name: jsonable(getattr(value, f.name)) for f in fields(value)}
        obj.update(msg_id=client_msg_id(value), offset_msg_id=value.msg_id, tags=value.tags, keys=value.keys,
                   born_host=format_address(value.born_host), store_host=format_address(value.store_host))
        return obj
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return body_text(value)
    if isinstance(value, Enum):
        return value.name
    return value


def to_json(value: Any) -> str:
    return json.dumps(jsonable(value), indent=2, sort_keys=True)
