"""Client-side message helpers: building, validating, queues and UNIQ_KEY ids."""

from __future__ import annotations

import calendar
import os
import random
import socket
import struct
import time

from rocketpy.client.errors import MessageInvalidError
from rocketpy.common.message import Message, MessageConst, encode_batch
from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX, SEND_FORBIDDEN_TOPICS, TBW102, TOPIC_MAX_LENGTH, VALID_TOPIC

#: Largest body (or batch body) a producer sends, as Java's ``maxMessageSize``.
MAX_MESSAGE_SIZE = 4 * 1024 * 1024


def new_message(
    topic: str,
    body: bytes,
    tags: str | None = None,
    keys: str | list[str] | None = None,
    flag: int = 0,
    properties: dict[str, str] | None = None,
    delay_level: int = 0,
    wait_store_ok: bool = True,
) -> Message:
    """A message to send, with RocketMQ's properties filled in.

    :param keys: business keys, a space-separated string or a list.
    :param delay_level: 1..18 to deliver later (1 s ... 2 h); 0 for now.
    :param wait_store_ok: ask the broker to answer only once the message is stored.
    """
    props = dict(properties or {})
    if tags:
        props[MessageConst.TAGS] = tags
    if keys:
        props[MessageConst.KEYS] = keys if isinstance(keys, str) else " ".join(keys)
    if delay_level > 0:
        props[MessageConst.DELAY_TIME_LEVEL] = str(delay_level)
    if not wait_store_ok:
        props[MessageConst.WAIT_STORE_MSG_OK] = "false"
    return Message(topic=topic, body=body, flag=flag, properties=props)


#: Topic names :func:`check_topic` accepted (a bounded cache).
valid_topics: set[str] = set()


def check_topic(topic: str) -> None:
    """Raise :class:`MessageInvalidError` unless producers may send to ``topic``."""
    if topic in valid_topics:
        return
    if not topic or not topic.strip():
        raise MessageInvalidError("the topic is blank")
    if not VALID_TOPIC.match(topic):
        raise MessageInvalidError(f"topic {topic!r} has characters outside ^[%|a-zA-Z0-9_-]+$")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise MessageInvalidError(f"topic is longer than {TOPIC_MAX_LENGTH} characters")
    if topic == TBW102:
        raise MessageInvalidError(f"topic {TBW102} is reserved as the auto-create template")
    if topic in SEND_FORBIDDEN_TOPICS:
        raise MessageInvalidError(f"topic {topic} is a system topic producers may not send to")
    if len(valid_topics) < 10_000:  # remember good names; a bounded cache
        valid_topics.add(topic)


def validate_message(msg: Message, max_size: int = MAX_MESSAGE_SIZE) -> None:
    """Java's ``Validators.checkMessage``: topic rules, non-empty body, size limit.

    :raises MessageInvalidError: naming the rule that failed.
    """
    check_topic(msg.topic)
    if not isinstance(msg.body, (bytes, bytearray, memoryview)):
        raise MessageInvalidError(f"the body must be bytes, not {type(msg.body).__name__}")
    if len(msg.body) == 0:
        raise MessageInvalidError("the message body is empty")
    if len(msg.body) > max_size:
        raise MessageInvalidError(f"the message body is {len(msg.body)} bytes, over the limit of {max_size}")


_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX


def batch_body(msgs: list[Message], max_size: int, uniq: UniqKeyGenerator, now: float) -> tuple[bytes, str]:
    """The SEND_BATCH_MESSAGE body of ``msgs`` and their comma-joined UNIQ_KEYs: each message checked in
    turn (:func:`validate_message`, the first one's topic, no retry topic, no delay) and given a UNIQ_KEY
    made at ``now`` when it has none. ``rocketpy._speedups`` has it for the usual batch (``batch_body``,
    rocketpy/_speedups_producer.h: None, having changed nothing, for anything else); this is the reference.

    :raises MessageInvalidError: naming the rule the first failing message broke (those before it have
        their UNIQ_KEY).
    """
    if not msgs:
        raise MessageInvalidError("the batch is empty")
    topic = msgs[0].topic
    for m in msgs:
        validate_message(m, max_size)
        if m.topic != topic:
            raise MessageInvalidError("every message of a batch must have the same topic")
        if m.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise MessageInvalidError("retry topics cannot be sent in a batch")
        if MessageConst.DELAY_TIME_LEVEL in m.properties:
            raise MessageInvalidError("delayed messages cannot be sent in a batch")
        if _UNIQ_KEY not in m.properties:
            m.properties[_UNIQ_KEY] = uniq.next_id(now)
    return encode_batch(msgs), ",".join([m.properties[_UNIQ_KEY] for m in msgs])


def local_ip() -> str:
    """This host's outward IPv4 address, or 127.0.0.1 (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _month_start_ms(now_ms: int) -> tuple[int, int]:
    """UTC start of this month and of the next one, in ms."""
    t = time.gmtime(now_ms / 1000)
    start = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return start * 1000, calendar.timegm((year, month, 1, 0, 0, 0)) * 1000


_HEX2 = [f"{i:02X}" for i in range(256)]


class UniqKeyGenerator:
    """Makes ``UNIQ_KEY`` message ids like Java's ``MessageClientIDSetter``.

    32 uppercase hex chars: IPv4 (4 bytes) ‖ pid (2) ‖ a random "class loader
    hash" (4) ‖ ms since the start of the month (4) ‖ a counter (2).

    ``rocketpy/_speedups_producer.h`` (``next_uniq``) makes the next id of the same millisecond
    from ``_last_ms``, ``_counter`` and ``_time_prefix`` as :meth:`next_id` does (and calls it for
    a new millisecond): keep the three attributes' meaning (read and written at their slots' offsets).
    """

    __slots__ = ("_prefix", "_counter", "_start_ms", "_next_start_ms", "_last_ms", "_time_prefix")

    def __init__(
        self, ip: str | None = None, pid: int | None = None, rng: random.Random | None = None
    ) -> None:
        rng = rng or random.Random()
        try:
            packed_ip = socket.inet_aton(ip or local_ip())
        except OSError:
            packed_ip = socket.inet_aton("127.0.0.1")
        pid = os.getpid() if pid is None else pid
        self._prefix = (packed_ip + struct.pack(">HI", pid & 0xFFFF, rng.getrandbits(32))).hex().upper()
        self._counter = rng.getrandbits(16)
        self._start_ms, self._next_start_ms = 0, 0
        self._last_ms, self._time_prefix = -1, ""  # the prefix and time part of the last id's ms

    def next_id(self, now: float) -> str:
        """A new id.

        :param now: the current time in seconds (from the client's clock).
        """
        now_ms = int(now * 1000)
        if now_ms != self._last_ms:
            if not self._start_ms <= now_ms < self._next_start_ms:
                self._start_ms, self._next_start_ms = _month_start_ms(now_ms)
            self._last_ms = now_ms
            self._time_prefix = f"{self._prefix}{(now_ms - self._start_ms) & 0xFFFFFFFF:08X}"
        self._counter = counter = (self._counter + 1) & 0xFFFF
        return self._time_prefix + _HEX2[counter >> 8] + _HEX2[counter & 0xFF]
