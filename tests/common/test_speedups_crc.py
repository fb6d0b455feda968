"""The compiled body CRC (rocketpy/_speedups_crc.h, carry-less multiplication) against zlib.crc32,
which the Python record encoder uses: every length around the folding steps, random data, and
the CRC field of the records encode_record writes."""

from __future__ import annotations

import random
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common import message as m
from rocketpy.common import speedups
from rocketpy.common.message import MessageExt
from tests.common.implementations import C_SKIP

NO_CLMUL = C_SKIP or (
    "the CPU has no carry-less multiplication" if speedups.compiled.crc32_fast(b"") is None else None)  # type: ignore[union-attr]


class CompiledCrcTests(SynchronousTestCase):
    skip = NO_CLMUL

    def crc(self, data: bytes | bytearray | memoryview) -> int:
        result: int = speedups.compiled.crc32_fast(data)  # type: ignore[union-attr]
        return result

    def test_every_length_around_the_folding_steps(self) -> None:
        """Lengths 0–300 (the byte loop, one 64-byte fold, 16-byte steps, tails) and larger ones."""
        rng = random.Random(12)
        for n in [*range(301), 1023, 1024, 1025, 4096, 65536 + 7]:
            data = rng.randbytes(n)
            self.assertEqual(self.crc(data), zlib.crc32(data), n)
            self.assertEqual(self.crc(b"\xff" * n), zlib.crc32(b"\xff" * n), n)

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.binary(max_size=3000), st.integers(0, 15))
    def test_random_data_at_any_alignment(self, data: bytes, skew: int) -> None:
        view = memoryview(bytes(skew) + data)[skew:]  # unaligned loads
        self.assertEqual(self.crc(view), zlib.crc32(data))

    @settings(max_examples=100, deadline=None)
    @given(st.binary(max_size=2000))
    def test_records_carry_the_python_crc(self, body: bytes) -> None:
        """encode_record (which uses it) writes the same record as the Python encoder."""
        msg = MessageExt(topic="T", body=body, queue_id=1, properties={"KEYS": "k"}, born_host=("127.0.0.1", 1),
                         store_host=("127.0.0.1", 10911))
        self.assertEqual(bytes(m.COMPILED.encode_record(msg)), bytes(m.PYTHON.encode_record(msg)))  # type: ignore[union-attr]
        self.assertEqual(m.COMPILED.decode_record(m.PYTHON.encode_record(msg), 0, True).body_crc,  # type: ignore[union-attr]
                         zlib.crc32(body) & 0x7FFFFFFF)
