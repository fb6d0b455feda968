"""Message body compression: zlib, and LZ4 and ZSTD as RocketMQ 5 clients write them.

sysFlag bit 0 (``COMPRESSED``) says a body is compressed; bits 8-10 name the codec
(RocketMQ 5 ``MessageSysFlag`` / ``CompressionType``): 0 (4.x clients) and 3 are zlib, 1 is
LZ4 (the LZ4 frame format of lz4-java's ``LZ4FrameOutputStream``), 2 is ZSTD (a zstd frame,
streamed by Java without a content size). LZ4 and ZSTD need the ``compression`` extra
(``pip install 'rocketpy[compression]'``: the ``lz4`` and ``zstandard`` packages), imported
only when first used.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from types import ModuleType

from rocketpy.common.message import MessageExt, MessageSysFlag

#: Bits 8-10 of sysFlag: the compression type.
COMPRESSION_TYPE_MASK = 0x700
LZ4_TYPE = 0x100
ZSTD_TYPE = 0x200
ZLIB_TYPE = 0x300
#: Codec names a producer accepts → the sysFlag bits it sets (zlib keeps 4.x's 0 so 4.x clients read it).
COMPRESSION_FLAGS = {"zlib": MessageSysFlag.COMPRESSED, "lz4": MessageSysFlag.COMPRESSED | LZ4_TYPE,
                     "zstd": MessageSysFlag.COMPRESSED | ZSTD_TYPE}
_EXTRA = "pip install 'rocketpy[compression]'"
_modules: dict[str, ModuleType] = {}

#: ``body -> compressed body``.
Compress = Callable[[bytes], bytes]


class DecompressionError(ValueError):
    """A compressed body that cannot be inflated (unknown codec, missing library or corrupt)."""


class CompressionUnavailable(ImportError):
    """LZ4 or ZSTD was asked for but its library is not installed; the message names the extra."""


def _library(name: str, package: str) -> ModuleType:
    module = _modules.get(name)
    if module is None:
        try:
            module = _modules[name] = importlib.import_module(name)
        except ImportError:
            raise CompressionUnavailable(f"{package} is not installed: {_EXTRA}") from None
    return module


def compressor(codec: str, level: int = 5) -> tuple[Compress, int]:
    """The compress function of ``codec`` and the sysFlag bits a body it compressed carries.

    :param codec: ``"zlib"`` (RocketMQ 4's only codec), ``"lz4"`` or ``"zstd"``.
    :param level: zlib and zstd level (RocketMQ's ``compressLevel``, 5); LZ4 has none.
    :raises ValueError: for another name.
    :raises CompressionUnavailable: when the codec's library is missing.
    """
    name = codec.lower()
    if name not in COMPRESSION_FLAGS:
        raise ValueError(f"compression must be one of {', '.join(COMPRESSION_FLAGS)}, not {codec!r}")
    flags = COMPRESSION_FLAGS[name]
    if name == "zlib":
        return (lambda body: zlib.compress(body, level)), flags
    if name == "lz4":
        frame = _library("lz4.frame", "lz4")
        return (lambda body: frame.compress(body, store_size=False)), flags
    zstd = _library("zstandard", "zstandard").ZstdCompressor(level=level)
    return zstd.compress, flags


def decompress(body: bytes, sys_flag: int) -> bytes:
    """Inflate ``body`` with the codec named by ``sys_flag`` (which must have ``COMPRESSED``).

    :raises DecompressionError: unknown type, missing library (naming the extra) or corrupt data.
    """
    kind = sys_flag & COMPRESSION_TYPE_MASK
    try:
        if kind in (0, ZLIB_TYPE):
            return zlib.decompress(body)
        if kind == LZ4_TYPE:
            return _library("lz4.frame", "lz4").decompress(body)
        if kind == ZSTD_TYPE:  # Java streams its frames: no content size, so no one-shot decompress
            return _library("zstandard", "zstandard").ZstdDecompressor().decompressobj().decompress(body)
    except CompressionUnavailable as e:
        raise DecompressionError(f"cannot inflate a {_NAMES[kind]} body: {e}") from None
    except Exception as e:  # zlib.error, lz4's RuntimeError, zstandard.ZstdError
        raise DecompressionError(f"corrupt {_NAMES[kind]} body: {e}") from None
    raise DecompressionError(f"compression type {kind >> 8} is unknown (1 LZ4, 2 ZSTD, 3 ZLIB)")


_NAMES = {0: "zlib", ZLIB_TYPE: "zlib", LZ4_TYPE: "LZ4", ZSTD_TYPE: "ZSTD"}


def inflate_body(msg: MessageExt) -> None:
    """Inflate a compressed body in place and clear the compressed flag and type bits.

    :raises DecompressionError: see :func:`decompress`; ``msg`` is then left as it was.
    """
    if not msg.sys_flag & MessageSysFlag.COMPRESSED:
        return
    msg.body = decompress(msg.body, msg.sys_flag)
    msg.sys_flag &= ~(MessageSysFlag.COMPRESSED | COMPRESSION_TYPE_MASK)
