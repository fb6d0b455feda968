"""A raw remoting connection for hostile-input tests: writes any bytes, collects the frames that come back."""

from __future__ import annotations

import json
import struct
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure

from rocketpy.remoting.codec import decode
from rocketpy.remoting.command import RemotingCommand


def json_frame(code: int, opaque: int, fields: dict[str, Any] | str, body: bytes = b"", flag: int = 0) -> bytes:
    """A JSON-header frame; ``fields`` as a dict, or as raw JSON text (to carry what json.dumps would not)."""
    ext = fields if isinstance(fields, str) else json.dumps(fields)
    header = ('{"code":%d,"extFields":%s,"flag":%d,"language":"JAVA","opaque":%d,"version":399}'
              % (code, ext, flag, opaque)).encode("utf-8", "surrogatepass")
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


class RawConnection(Protocol):
    """Collects every frame received; ``closed`` fires when the connection ends."""

    def __init__(self) -> None:
        self.responses: dict[int, RemotingCommand] = {}
        self.closed: Deferred[None] = Deferred()
        self._buffer = b""
        self._waiting: dict[int, Deferred[RemotingCommand]] = {}

    def dataReceived(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= 4:
            (length,) = struct.unpack_from(">I", self._buffer)
            if len(self._buffer) < 4 + length:
                break
            frame, self._buffer = self._buffer[4 : 4 + length], self._buffer[4 + length :]
            command = decode(frame)
            self.responses[command.opaque] = command
            waiting = self._waiting.pop(command.opaque, None)
            if waiting is not None:
                waiting.callback(command)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        for d in self._waiting.values():
            d.errback(reason)
        self._waiting.clear()
        self.closed.callback(None)

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def abort(self) -> None:
        transport: Any = self.transport  # an ITCPTransport
        if transport is not None:
            transport.abortConnection()

    async def answer(self, opaque: int, timeout: float = 5.0) -> RemotingCommand:
        if opaque in self.responses:
            return self.responses[opaque]
        d: Deferred[RemotingCommand] = Deferred()
        self._waiting[opaque] = d
        return await d.addTimeout(timeout, reactor)


async def connect(address: str) -> RawConnection:
    host, port = address.rsplit(":", 1)
    connection = RawConnection()
    await connectProtocol(TCP4ClientEndpoint(reactor, host, int(port)), connection)
    return connection
