"""JSON as Java's fastjson writes it: compact, keys sorted, maps with object keys.

RocketMQ bodies keyed by a ``MessageQueue`` (GET_TOPIC_STATS_INFO, GET_CONSUME_STATS,
ConsumerRunningInfo's ``mqTable``) are written by fastjson with the key *object* in
key position, ``{{"brokerName":"b","queueId":0,"topic":"T"}:{…}}``: not standard JSON,
but what the Java admin tools parse (doc/wire.md §9). :func:`loads` reads
it back (RESET_CONSUMER_CLIENT_OFFSET's body). fastjson also writes ``Map<Long,…>`` keys bare
(``{0:"127.0.0.1:10911"}``): :func:`loads_tolerant` reads those (route and registration bodies).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from rocketpy.common.errors import RequestError


def dump_json(obj: Any) -> bytes:
    """Compact JSON with sorted keys (fastjson's order) and ``\\u`` escapes for non-ASCII text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")


def object_key_map(entries: Iterable[tuple[dict[str, Any], Any]]) -> str:
    """A fastjson map with object keys (``{{"brokerName":…}:{…}}``), in the order given."""
    return "{" + ",".join(dump_json(k).decode() + ":" + dump_json(v).decode() for k, v in entries) + "}"


def raw_object(fields: Mapping[str, str]) -> str:
    """A JSON object whose values are already encoded (e.g. by :func:`object_key_map`), keys sorted."""
    return "{" + ",".join(json.dumps(k) + ":" + fields[k] for k in sorted(fields)) + "}"


def loads_body(data: str | bytes) -> Any:
    """A request body's standard JSON.

    :raises ValueError: not JSON, not UTF-8, or nested too deeply for the parser (never RecursionError).
    """
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("body nested too deeply") from None


class BodyError(RequestError):
    """A request body that cannot be decoded."""


# A string literal (left as is) or a bare numeric key after "{" or ",".
_STRING_OR_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)', re.DOTALL)


def _quote_bare_key(match: re.Match[str]) -> str:
    if match.group(2) is None:
        return match.group(0)
    return f'{match.group(1)}"{match.group(2)}"{match.group(3)}'


def loads_tolerant(data: bytes | str) -> Any:
    """Parse JSON that may have bare numeric object keys (fastjson's ``{0:"a"}``).

    :raises BodyError: when the text is not JSON even after quoting such keys.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return loads_body(_STRING_OR_BARE_KEY.sub(_quote_bare_key, text))
    except (UnicodeDecodeError, ValueError) as e:
        raise BodyError(f"malformed JSON body: {e}") from None


def as_int(value: Any, what: str) -> int:
    """A JSON integer or decimal string; :class:`BodyError` naming ``what`` otherwise."""
    # bool is an int subclass; JSON true is never a valid count.
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BodyError(f"{what} is not an integer: {value!r}")
    try:
        return int(value)
    except ValueError:
        raise BodyError(f"{what} is not an integer: {value!r}") from None


_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"


def loads(text: str | bytes) -> Any:
    """Parse fastjson output; an object used as a map key becomes a tuple of its sorted
    ``(key, value)`` items (a MessageQueue key: ``(("brokerName", b), ("queueId", q), ("topic", t))``).

    :raises ValueError: for text that is neither JSON nor fastjson's object-keyed form.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    try:
        value, end = _value(text, 0)
    except RecursionError:
        raise ValueError("body nested too deeply") from None
    if text[_skip(text, end):]:
        raise ValueError(f"extra data at {end}")
    return value


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def _expect(text: str, i: int, chars: str) -> int:
    i = _skip(text, i)
    if i >= len(text) or text[i] not in chars:
        raise ValueError(f"expected one of {chars!r} at {i}")
    return i


def _value(text: str, i: int) -> tuple[Any, int]:
    i = _skip(text, i)
    if text.startswith("{", i):
        return _object(text, i + 1)
    if text.startswith("[", i):
        return _array(text, i + 1)
    return _DECODER.raw_decode(text, i)


def _object(text: str, i: int) -> tuple[dict[Any, Any], int]:
    result: dict[Any, Any] = {}
    if text.startswith("}", _skip(text, i)):
        return result, _skip(text, i) + 1
    while True:
        key, i = _value(text, i)
        if isinstance(key, dict):
            key = tuple(sorted(key.items()))
        i = _expect(text, i, ":")
        result[key], i = _value(text, i + 1)
        i = _expect(text, i, ",}")
        if text[i] == "}":
            return result, i + 1
        i += 1


def _array(text: str, i: int) -> tuple[list[Any], int]:
    result: list[Any] = []
    if text.startswith("]", _skip(text, i)):
        return result, _skip(text, i) + 1
    while True:
        item, i = _value(text, i)
        result.append(item)
        i = _expect(text, i, ",]")
        if text[i] == "]":
            return result, i + 1
        i += 1
