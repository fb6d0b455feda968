"""A ``send_batch``'s body in C (``rocketpy._speedups.batch_body``, rocketpy/_speedups_producer.h) against its
Python reference (:func:`rocketpy.client.message.batch_body`): random batches of usual and unusual messages give
the same body, ids, error, messages' properties and id generator state either way; the C function answers None,
having changed nothing, for anything it leaves to Python."""

from __future__ import annotations

import copy
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import producer as producer_module
from rocketpy.client.message import UniqKeyGenerator, batch_body, valid_topics
from rocketpy.common.message import Message, MessageExt

C_BODY = producer_module._batch_body
NO_C = None if getattr(C_BODY, "__name__", "") == "batch_body" else "no compiled accelerator (batch_body)"

#: the kinds of message a batch may hold; "same" repeats the previous message object
KINDS = st.sampled_from(["plain", "plain", "plain", "plain", "uniq", "uniq", "tags", "wait", "same", "delayed",
                         "empty", "big", "bytearray", "other-topic", "retry-topic", "new-topic", "ext", "int-uniq",
                         "int-value", "shared-props"])


def batch_of(kinds: list[str]) -> list[Message]:
    msgs: list[Message] = []
    for n, kind in enumerate(kinds):
        if kind == "same" and msgs:
            msgs.append(msgs[-1])
            continue
        props: dict[str, Any] = {"KEYS": f"k{n}"}
        body: Any = f"body{n}".encode()
        topic = "BatchT"
        if kind == "uniq":
            props["UNIQ_KEY"] = f"U{n}"
        elif kind == "tags":
            props["TAGS"] = "TagA"
        elif kind == "wait":
            props["WAIT"] = "false"
        elif kind == "delayed":
            props["DELAY"] = "2"
        elif kind == "empty":
            body = b""
        elif kind == "big":
            body = b"x" * 300
        elif kind == "bytearray":
            body = bytearray(body)
        elif kind == "other-topic":
            topic = "BatchU"
        elif kind == "retry-topic":
            topic = "%RETRY%G"
        elif kind == "new-topic":
            topic = f"BatchNew{random.getrandbits(40)}"  # not in valid_topics yet
        elif kind == "int-uniq":
            props["UNIQ_KEY"] = 7
        elif kind == "int-value":
            props["KEYS"] = 7
        elif kind == "shared-props" and msgs:
            props = msgs[-1].properties
        if kind == "ext":
            msgs.append(MessageExt(topic=topic, body=body, properties=props))
        else:
            msgs.append(Message(topic, body, 0, props))
    return msgs


def outcome(function: Any, msgs: list[Message], max_size: int, generator: UniqKeyGenerator, now: float) -> Any:
    try:
        return function(msgs, max_size, generator, now)
    except Exception as e:
        return type(e), str(e)


def state(msgs: list[Message], generator: UniqKeyGenerator) -> Any:
    return [m.properties for m in msgs], generator._counter, generator._last_ms, generator._time_prefix


def generator_at(seed: int, now: float, used: bool) -> UniqKeyGenerator:
    generator = UniqKeyGenerator("10.1.2.3", 4242, random.Random(seed))
    if used:  # its last id made in the millisecond of ``now``: the C ids follow on from its counter
        generator.next_id(now)
    return generator


class BatchBodyTests(SynchronousTestCase):
    skip = NO_C

    def setUp(self) -> None:
        valid_topics.update({"BatchT", "BatchU", "%RETRY%G"})

    @settings(max_examples=400, deadline=None)
    @given(st.lists(KINDS, max_size=12), st.integers(0, 2**16), st.sampled_from([100, 4 << 20]),
           st.sampled_from([1700000000.0004, 1700000000.9999, 1765000000.5]), st.booleans())
    def test_c_as_python(self, kinds: list[str], seed: int, max_size: int, now: float, used: bool) -> None:
        """Body, ids or error, the messages' properties after it, and the generator's state are the
        reference's; when C answers None nothing has changed."""
        random.seed(seed)
        msgs = batch_of(kinds)
        twin = copy.deepcopy(msgs)  # the same sharing of objects in the copy
        generator, reference = generator_at(seed, now, used), generator_at(seed, now, used)
        before = copy.deepcopy(state(msgs, generator))
        answer = outcome(C_BODY, msgs, max_size, generator, now)
        if answer is None:
            self.assertEqual(state(msgs, generator), before)
            answer = outcome(batch_body, msgs, max_size, generator, now)
        expected = outcome(batch_body, twin, max_size, reference, now)
        self.assertEqual(answer, expected)
        self.assertEqual(state(msgs, generator), state(twin, reference))

    def test_usual_batch_in_c(self) -> None:
        """A usual batch (ids set or not, the same message twice) is C's: ids made at one time, in order."""
        generator = generator_at(1, 1700000000.5, False)
        shared = Message("BatchT", b"s", 0, {"KEYS": "s"})
        msgs = [Message("BatchT", b"a", 0, {}), Message("BatchT", b"b", 0, {"UNIQ_KEY": "X"}), shared, shared,
                Message("BatchT", b"c", 0, {"TAGS": "t", "WAIT": "true"})]
        answer = C_BODY(msgs, 1 << 20, generator, 1700000000.5)
        assert answer is not None
        body, ids = answer
        made = [m.properties["UNIQ_KEY"] for m in msgs]
        self.assertEqual(ids, ",".join(made))
        self.assertEqual(made[1], "X")
        self.assertEqual(made[2], made[3])
        self.assertEqual(len({made[0], made[2], made[4]}), 3)
        self.assertEqual([int(made[i][-4:], 16) for i in (0, 2, 4)],
                         [(int(made[0][-4:], 16) + k) & 0xFFFF for k in range(3)])
        self.assertEqual(generator._counter, int(made[4][-4:], 16))
        self.assertEqual(made[4], made[0][:-4] + made[4][-4:])  # one millisecond, one prefix

    def test_unusual_left_to_python(self) -> None:
        """An empty batch, a tuple, a new topic, an int timestamp: None, nothing changed."""
        generator = generator_at(1, 1700000000.5, False)
        msg = Message("BatchT", b"a", 0, {})
        for args in (([], 100, generator, 1.5), ((msg,), 100, generator, 1.5), ([msg], 100, generator, 1),
                     ([Message("BatchNever", b"a", 0, {})], 100, generator, 1.5), ([msg], -1, generator, 1.5)):
            self.assertIsNone(C_BODY(*args))
        self.assertEqual(msg.properties, {})
