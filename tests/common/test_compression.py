"""Body compression: zlib, LZ4 and ZSTD as RocketMQ 5 writes them, and clear errors."""

from __future__ import annotations

import sys
import zlib
from unittest import mock

import lz4.frame  # type: ignore[import-untyped]
import zstandard
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common import compression
from rocketpy.common.compression import (
    CompressionUnavailable, DecompressionError, compressor, decompress, inflate_body,
)
from rocketpy.common.message import MessageExt

BODY = b"RocketMQ body " * 600


class CompressionTests(SynchronousTestCase):
    def test_round_trip_and_flags(self) -> None:
        """Each codec's body comes back intact; zlib keeps 4.x's type 0, LZ4 sets 0x100, ZSTD 0x200."""
        for codec, flags in (("zlib", 0x1), ("lz4", 0x101), ("ZSTD", 0x201)):
            compress, got_flags = compressor(codec)
            packed = compress(BODY)
            self.assertLess(len(packed), len(BODY) // 10, codec)
            self.assertEqual(got_flags, flags)
            self.assertEqual(decompress(packed, flags | 0x4), BODY)

    def test_java_shaped_bodies(self) -> None:
        """What RocketMQ 5's Java compressors write: a zstd stream without a content size, an LZ4 frame
        with 4 MiB blocks and no size, and a zlib body typed 3."""
        streamed = zstandard.ZstdCompressor(level=5, write_content_size=False).compressobj()
        zstd_body = streamed.compress(BODY) + streamed.flush()
        self.assertEqual(decompress(zstd_body, 0x201), BODY)
        lz4_body = lz4.frame.compress(BODY, block_size=lz4.frame.BLOCKSIZE_MAX4MB, store_size=False,
                                      content_checksum=True)
        self.assertEqual(decompress(lz4_body, 0x101), BODY)
        self.assertEqual(decompress(zlib.compress(BODY), 0x301), BODY)

    def test_inflate_body(self) -> None:
        """inflate_body replaces the body and clears the flag and type bits, keeping the others."""
        msg = MessageExt(topic="T", body=compressor("zstd")[0](BODY), sys_flag=0x201 | 0x8)
        inflate_body(msg)
        self.assertEqual((msg.body, msg.sys_flag), (BODY, 0x8))
        plain = MessageExt(topic="T", body=b"x", sys_flag=0x200)  # type bits without COMPRESSED: untouched
        inflate_body(plain)
        self.assertEqual((plain.body, plain.sys_flag), (b"x", 0x200))

    def test_bad_bodies(self) -> None:
        """Junk and unknown types are DecompressionErrors naming the codec; the message is left as it was."""
        for flags, text in ((0x101, "corrupt LZ4"), (0x201, "corrupt ZSTD"), (0x1, "corrupt zlib"),
                            (0x501, "type 5 is unknown")):
            msg = MessageExt(topic="T", body=b"junk", sys_flag=flags)
            e = self.assertRaises(DecompressionError, inflate_body, msg)
            self.assertIn(text, str(e))
            self.assertEqual((msg.body, msg.sys_flag), (b"junk", flags))

    def test_missing_library_names_the_extra(self) -> None:
        """Without lz4 / zstandard: the producer's codec and the consumer's inflate say which extra to install."""
        saved = dict(compression._modules)
        self.addCleanup(compression._modules.update, saved)
        compression._modules.clear()
        with mock.patch.dict(sys.modules, {"lz4": None, "lz4.frame": None, "zstandard": None}):
            for codec in ("lz4", "zstd"):
                e = self.assertRaises(CompressionUnavailable, compressor, codec)
                self.assertIn("pip install 'rocketpy[compression]'", str(e))
            e2 = self.assertRaises(DecompressionError, decompress, b"x", 0x201)
            self.assertIn("rocketpy[compression]", str(e2))
            self.assertEqual(compressor("zlib")[1], 0x1)  # zlib needs nothing

    def test_unknown_codec(self) -> None:
        """A codec name RocketMQ does not have is a ValueError listing the choices."""
        e = self.assertRaises(ValueError, compressor, "snappy")
        self.assertIn("zlib, lz4, zstd", str(e))
