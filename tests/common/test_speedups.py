"""The compiled accelerator against the Python reference: equal results or equal exception
types on random input (doc/store.md, "Compiled accelerator"), and which one is active."""

from __future__ import annotations

import importlib.util
import os
import struct
import subprocess
import sys
from typing import Any, Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common import message as m
from rocketpy.common import speedups
from rocketpy.store.index import COMPILED_KEY_HASH, PYTHON_KEY_HASH
from rocketpy.store.messagestore import COMPILED_INLINE_BOUND, PYTHON_INLINE_BOUND
from tests.common.implementations import C_IMPLEMENTATION, C_SKIP

PY, C = m.PYTHON, C_IMPLEMENTATION
EXAMPLES = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text with the property separators, non-ASCII, astral characters and lone surrogates.
TEXT = st.text(st.sampled_from("\x01\x02ab=\u00e9\u4e2d\U0001F600\ud800\udc00") | st.characters(), max_size=40)
INT = st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**31), 2**31 - 1) | st.sampled_from([0, 1, -1, 2**31, 2**64])
HOST = st.tuples(
    st.sampled_from(["127.0.0.1", "10.0.0.9", "::ffff:1.2.3.4", "localhost", "01.2.3.4", "1.2", "bad", "fe80::1"]),
    st.sampled_from([0, 10911, 65535, 2**31 - 1, 2**31, -1]),
)


def outcome(f: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """``("ok", result)`` or ``("raised", exception type)``."""
    try:
        return "ok", f(*args)
    except Exception as e:  # what the implementations raise is compared, whatever it is
        return "raised", type(e)


def messages() -> st.SearchStrategy[m.MessageExt]:
    return st.builds(
        m.MessageExt, topic=st.text(max_size=130) | st.just("T"), body=st.binary(max_size=300),
        flag=INT, properties=st.dictionaries(TEXT, TEXT, max_size=5), queue_id=INT, sys_flag=INT | st.just(0x30),
        born_timestamp=INT, born_host=HOST, store_timestamp=INT, store_host=HOST, reconsume_times=INT,
        prepared_transaction_offset=INT, queue_offset=INT, commit_log_offset=INT,
    )


def good_messages() -> st.SearchStrategy[m.MessageExt]:
    small = st.integers(-(2**31), 2**31 - 1)
    return st.builds(
        m.MessageExt, topic=st.text(max_size=30), body=st.binary(max_size=200), flag=small,
        properties=st.dictionaries(st.text(min_size=1, max_size=10), st.text(min_size=1, max_size=10), max_size=4),
        queue_id=small, born_timestamp=small, born_host=st.just(("10.0.0.9", 5555)),
        store_host=st.sampled_from([("127.0.0.1", 10911), ("192.168.1.1", 1)]),
    )


class EquivalenceTests(SynchronousTestCase):
    skip = C_SKIP

    def same(self, name: str, *args: Any) -> None:
        if name == "inline_bound":
            c, py = COMPILED_INLINE_BOUND or PYTHON_INLINE_BOUND, PYTHON_INLINE_BOUND
        else:
            c, py = getattr(C, name), getattr(PY, name)
        self.assertEqual(outcome(c, *args), outcome(py, *args), (name, args))

    @EXAMPLES
    @given(TEXT | st.none())
    def test_text_functions(self, text: str | None) -> None:
        """java_hash, tags_code, key_hash and string_to_properties on any text."""
        self.same("string_to_properties", text)
        self.same("tags_code", text)
        if text is not None:
            self.same("java_hash", text)
            self.assertEqual(outcome(COMPILED_KEY_HASH or PYTHON_KEY_HASH, text), outcome(PYTHON_KEY_HASH, text))

    @EXAMPLES
    @given(st.dictionaries(TEXT, TEXT, max_size=6))
    def test_properties_to_string(self, props: dict[str, str]) -> None:
        self.same("properties_to_string", props)

    @EXAMPLES
    @given(messages())
    def test_encode_record(self, msg: m.MessageExt) -> None:
        """Any message: the same bytes, or the same exception (long topics, big numbers, odd hosts)."""
        self.same("encode_record", msg)

    @EXAMPLES
    @given(good_messages(), st.data())
    def test_decode_damaged_records(self, msg: m.MessageExt, data: st.DataObject) -> None:
        """Records truncated, with bytes overwritten, at offsets: the same message or exception."""
        record = bytearray(PY.encode_record(msg))
        for _ in range(data.draw(st.integers(0, 3))):
            at = data.draw(st.integers(0, len(record) - 1))
            record[at] = data.draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, 0xFE, 2, 0x30]))
        cut = data.draw(st.integers(0, len(record)))
        prefix = data.draw(st.binary(max_size=8))
        raw = prefix + bytes(record[:cut] if data.draw(st.booleans()) else record)
        check_crc = data.draw(st.booleans())
        self.same("decode_record", raw, len(prefix), check_crc)
        self.same("decode_record", memoryview(raw), len(prefix), check_crc)
        self.same("decode_records", raw[len(prefix):] + raw[len(prefix):])
        self.same("decode_records", raw[len(prefix):], {"MIN_OFFSET": "0", "MAX_OFFSET": "7"})
        self.same("decode_record", raw, data.draw(st.integers(-100, len(raw) + 5)))

    @EXAMPLES
    @given(st.binary(max_size=200))
    def test_random_bytes(self, raw: bytes) -> None:
        """Random bytes as a record, records and a batch body."""
        self.same("decode_record", raw)
        self.same("decode_records", raw)
        self.same("batch_entries", raw)

    @EXAMPLES
    @given(st.lists(st.tuples(st.binary(max_size=50), INT, st.dictionaries(TEXT, TEXT, max_size=3)), max_size=4),
           st.data())
    def test_damaged_batches(self, entries: list[tuple[bytes, int, dict[str, str]]], data: st.DataObject) -> None:
        """Batch bodies with fields overwritten or cut short."""
        body = b"".join(
            struct.pack(">iiiii", 22 + len(b) + len(p), 0, 0, f & 0x7FFFFFFF, len(b)) + b + struct.pack(">h", len(p)) + p
            for b, f, p in ((b, f, PY.properties_to_string(props).encode("utf-8", "surrogatepass")[:1000])
                            for b, f, props in entries))
        damaged = bytearray(body)
        if damaged and data.draw(st.booleans()):
            at = data.draw(st.integers(0, len(damaged) - 1))
            damaged[at] = data.draw(st.sampled_from([0, 0x80, 0xFF, 0xED, 1]))
        raw = bytes(damaged[: data.draw(st.integers(0, len(damaged)))] if data.draw(st.booleans()) else damaged)
        self.same("batch_entries", raw)
        self.same("batch_entries", bytearray(raw))  # not bytes: the reference slices a bytearray

    @EXAMPLES
    @given(st.lists(st.builds(m.Message, topic=st.just("T"), body=st.binary(max_size=50) | st.just(bytearray(b"ab")),
                              flag=INT, properties=st.dictionaries(TEXT, TEXT, max_size=3)), max_size=4))
    def test_encode_batch(self, msgs: list[m.Message]) -> None:
        """Any messages: the same batch body, or the same exception (big flags, lone surrogates)."""
        self.same("encode_batch", msgs)
        self.same("encode_batch", tuple(msgs))

    @EXAMPLES
    @given(st.binary(max_size=80), INT, INT, INT)
    def test_patch_record(self, raw: bytes, queue_offset: int, phys: int, store_ts: int) -> None:
        a, b = bytearray(raw), bytearray(raw)
        self.assertEqual(outcome(C.patch_record, a, queue_offset, phys, store_ts),
                         outcome(PY.patch_record, b, queue_offset, phys, store_ts))
        self.assertEqual(a, b)

    @EXAMPLES
    @given(st.lists(st.lists(st.builds(
        m.MessageExt, topic=st.sampled_from(["T", "U", "\u00e9"]), body=st.binary(max_size=40),
        properties=st.dictionaries(st.sampled_from(["KEYS", "DELAY", "TAGS", "k", "TIMER_DELIVER_MS",
                                                    "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "KEY"]) | TEXT,
                                   st.sampled_from(["a b  c", "", " ", "3"]) | TEXT, max_size=3),
        queue_id=st.integers(0, 3)), max_size=5) | st.tuples(), max_size=4),
        st.sampled_from([10, 40, 8192]))
    def test_inline_bound(self, puts: list[list[m.MessageExt]], max_body: int) -> None:
        """The store's inline-append bound: same sizes, keys and per-queue counts (order too), or both None."""
        c = COMPILED_INLINE_BOUND or PYTHON_INLINE_BOUND
        expected = outcome(PYTHON_INLINE_BOUND, puts, max_body, 256)
        self.assertEqual(outcome(c, puts, max_body, 256), expected)
        if expected[0] == "ok" and expected[1] is not None:
            self.assertEqual(list(c(puts, max_body, 256)[2]), list(expected[1][2]))  # type: ignore[index]
        # a lone put comes as a tuple of tuples (StoreService.put_message), handled in C too
        self.assertEqual(outcome(c, tuple(map(tuple, puts)), max_body, 256), expected)

    def test_unusual_types(self) -> None:
        """Values the C code does not handle itself go to the reference: same result or exception."""
        for name, args in [("string_to_properties", (0,)), ("string_to_properties", (b"A\x01b",)),
                           ("properties_to_string", ({"a": 1},)), ("properties_to_string", ([("a", "b")],)),
                           ("java_hash", (5,)), ("tags_code", (b"x",)), ("tags_code", (0,)),
                           ("batch_entries", ("text",)), ("decode_record", (None,)), ("decode_records", (5,)),
                           ("encode_record", (object(),)), ("encode_batch", ([object()],)),
                           ("inline_bound", ([[m.Message("T")]], 10, 1)), ("inline_bound", (([],), 10, 1)),
                           ("encode_batch", ([m.Message("T", b"", 0, {"k": "v" * 40000})],)), ("patch_record", (bytearray(64), 1.5, 0, 0))]:
            self.same(name, *args)


class ActiveImplementationTests(SynchronousTestCase):
    def test_environment_forces_python(self) -> None:
        """ROCKETPY_NO_SPEEDUPS=1 gives the Python functions; without it, C when built."""
        script = "from rocketpy.common import message, speedups; print(speedups.ACTIVE, type(message.java_hash).__name__)"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        env[speedups.DISABLE_VARIABLE] = "1"
        forced = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        self.assertEqual(forced.stdout.split(), ["Python", "function"])
        env.pop(speedups.DISABLE_VARIABLE)
        default = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        built = importlib.util.find_spec("rocketpy._speedups") is not None
        self.assertEqual(default.stdout.split(), ["C", "builtin_function_or_method"] if built else ["Python", "function"])
