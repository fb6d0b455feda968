"""TLS for the remoting layer, with Twisted's TLS (pyOpenSSL; ``pip install rocketpy[tls]``).

Servers take RocketMQ's modes (``tls.server.mode``): ``disabled`` (plain TCP only),
``permissive`` (TLS and plain TCP on one port, told apart by the first byte a client
sends: 0x16 starts a TLS handshake) and ``enforcing`` (TLS only; a plain client is
disconnected). With a client CA, servers ask for and verify client certificates.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from twisted.internet.interfaces import IDelayedCall, IProtocolFactory, IReactorTime
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from rocketpy.remoting.protocol import format_address

TLS_MODES = ("disabled", "permissive", "enforcing")
_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a handshake
#: Seconds a new connection of a TLS port may stay silent before it is closed (the remoting idle timeout).
FIRST_BYTE_TIMEOUT = 120.0


class TLSConfigError(ValueError):
    """Certificate or key files that cannot be used (the message says why)."""


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TLSConfigError(f"cannot read the {what} {path}: {e.strerror}") from None


def _ssl() -> Any:
    try:
        from twisted.internet import ssl
    except ImportError as e:  # pragma: no cover - the [tls] extra is missing
        raise TLSConfigError(f"TLS needs pyOpenSSL: pip install 'rocketpy[tls]' ({e})") from None
    if not getattr(ssl, "supported", True):
        raise TLSConfigError("TLS needs pyOpenSSL and service_identity: pip install 'rocketpy[tls]'")
    return ssl


def load_certificate(path: str) -> Any:
    """A ``twisted.internet.ssl.Certificate`` from a PEM file."""
    ssl = _ssl()
    try:
        return ssl.Certificate.loadPEM(_read(path, "certificate"))
    except TLSConfigError:
        raise
    except Exception as e:
        raise TLSConfigError(f"{path} is not a PEM certificate: {e}") from None


def load_private_certificate(cert: str, key: str) -> Any:
    """A ``PrivateCertificate`` from a PEM certificate file and its PEM key file."""
    ssl = _ssl()
    pem = _read(cert, "certificate") + b"\n" + _read(key, "private key")
    try:
        return ssl.PrivateCertificate.loadPEM(pem)
    except Exception as e:
        raise TLSConfigError(f"{cert} and {key} are not a PEM certificate and its key: {e}") from None


@dataclass(frozen=True)
class ServerTLS:
    """A server's certificate, key, optional client CA and mode."""

    cert: str
    key: str
    ca: str | None = None
    mode: str = "enforcing"

    def context_factory(self) -> Any:
        """``CertificateOptions`` for the server side (reads the files).

        :raises TLSConfigError: a file is missing or not PEM.
        """
        private = load_private_certificate(self.cert, self.key)
        if self.ca is None:
            return private.options()
        return private.options(load_certificate(self.ca))  # requires and verifies client certificates

    def pem(self) -> tuple[bytes, bytes, bytes | None]:
        """The certificate, key and client CA files' bytes (for servers other than Twisted's: gRPC).

        :raises TLSConfigError: a file cannot be read.
        """
        ca = _read(self.ca, "client CA certificate") if self.ca else None
        return _read(self.cert, "certificate"), _read(self.key, "private key"), ca

    def client(self) -> ClientTLS:
        """How this server's process connects to its peers (a broker to its name servers): presenting
        its own certificate, trusting the client CA if given, else its own certificate."""
        return ClientTLS(ca=self.ca or self.cert, cert=self.cert, key=self.key)


@dataclass(frozen=True)
class ClientTLS:
    """How a client connects: trusting ``ca`` (a PEM file; None: the platform's trust store) and
    presenting ``cert``/``key`` to servers that ask for a client certificate."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def creator(self, host: str) -> Any:
        """The connection creator for *host* (an IP address or name the certificate must name).

        :raises TLSConfigError: a file is missing or not PEM.
        """
        return _ssl().optionsForClientTLS(host, trustRoot=self._trust, clientCertificate=self._mine)

    @cached_property
    def _trust(self) -> Any:  # read once (on the first connection), not per connection
        return load_certificate(self.ca) if self.ca else None

    @cached_property
    def _mine(self) -> Any:
        return load_private_certificate(self.cert, self.key) if self.cert and self.key else None


def client_tls(tls: bool | ClientTLS, ca: str | None = None) -> ClientTLS | None:
    """A client's ``tls`` argument: False, True (with ``ca``) or a :class:`ClientTLS`.

    :raises ValueError: ``ca`` without ``tls=True`` (it would be ignored).
    """
    if ca is not None and tls is not True:
        raise ValueError("tls_ca is for tls=True (a ClientTLS carries its own ca)")
    if isinstance(tls, ClientTLS):
        return tls
    return ClientTLS(ca=ca) if tls else None


def server_factory(factory: IProtocolFactory, tls: ServerTLS | None, clock: IReactorTime) -> IProtocolFactory:
    """*factory* behind *tls*: as it is (no TLS or ``disabled``), or behind a first-byte switch.

    :param clock: the reactor TLS schedules its writes on.

    :raises TLSConfigError: the certificate files cannot be used.
    """
    if tls is None or tls.mode == "disabled":
        return factory
    if tls.mode not in TLS_MODES:
        raise TLSConfigError(f"TLS mode must be one of {', '.join(TLS_MODES)}, not {tls.mode!r}")
    from twisted.protocols.tls import TLSMemoryBIOFactory

    tls_factory = TLSMemoryBIOFactory(tls.context_factory(), False, factory, clock=clock)
    return _SwitchFactory(factory, tls_factory, tls.mode == "permissive", clock)


class _SwitchFactory(Factory):
    def __init__(self, plain: IProtocolFactory, tls: IProtocolFactory, plain_allowed: bool, clock: IReactorTime,
                 first_byte_timeout: float = FIRST_BYTE_TIMEOUT) -> None:
        self.plain, self.tls, self.plain_allowed = plain, tls, plain_allowed
        self.clock, self.first_byte_timeout = clock, first_byte_timeout

    def doStart(self) -> None:
        self.tls.doStart()  # a WrappingFactory: starts the plain factory it wraps too

    def doStop(self) -> None:
        self.tls.doStop()

    def buildProtocol(self, addr: Any) -> _FirstByteSwitch:
        return _FirstByteSwitch(self, addr)


class _FirstByteSwitch(Protocol):
    """Waits for the first byte, then hands the connection to the TLS or the plain protocol
    (as RocketMQ's ``HandshakeHandler``); a plain client of an enforcing server is dropped, and so
    is a client that sends nothing for ``first_byte_timeout`` seconds."""

    log = Logger()

    def __init__(self, factory: _SwitchFactory, addr: Any) -> None:
        self._switch = factory
        self._addr = addr
        self._inner: Any = None
        self._done = False  # handed over or refused
        self._timer: IDelayedCall | None = None
        self.transport: Any = None

    def connectionMade(self) -> None:
        self._timer = self._switch.clock.callLater(self._switch.first_byte_timeout, self._silent)

    def _silent(self) -> None:
        self._timer = None
        self.log.info("closing {peer}: nothing sent in {seconds} s", peer=format_address(self._addr),
                      seconds=self._switch.first_byte_timeout)
        self._refuse()

    def _refuse(self) -> None:
        self._done = True
        self.transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.dataReceived(data)
            return
        if self._done or not data:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if data[0] == _HANDSHAKE:
            inner = self._switch.tls.buildProtocol(self._addr)
        elif self._switch.plain_allowed:
            inner = self._switch.plain.buildProtocol(self._addr)
        else:
            self.log.warn("plain connection from {peer} refused: TLS is enforced", peer=format_address(self._addr))
            self._refuse()
            return
        if inner is None:
            self._refuse()
            return
        self._done = True
        self._inner = inner
        inner.makeConnection(self.transport)
        inner.dataReceived(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._inner is not None:
            self._inner.connectionLost(reason)
