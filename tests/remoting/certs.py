"""Throwaway certificates for TLS tests, made with ``cryptography`` (which twisted[tls] brings)."""

from __future__ import annotations

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(directory: str, name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> tuple[str, str]:
    cert_path, key_path = os.path.join(directory, f"{name}.pem"), os.path.join(directory, f"{name}.key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey,
                 ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


class CertificateSet:
    """In *directory*: a CA (``ca.pem``), a server certificate for 127.0.0.1 signed by it
    (``server.pem``/``.key``), a client certificate signed by it (``client.pem``/``.key``),
    and a self-signed server certificate (``self.pem``/``.key``)."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca, _ = _write(directory, "ca", ca_key, _certificate("rocketpy test CA", ca_key, "rocketpy test CA",
                                                                   ca_key, True))
        keys = {name: ec.generate_private_key(ec.SECP256R1()) for name in ("server", "client", "self")}
        self.server, self.server_key = _write(directory, "server", keys["server"], _certificate(
            "127.0.0.1", keys["server"], "rocketpy test CA", ca_key, False))
        self.client, self.client_key = _write(directory, "client", keys["client"], _certificate(
            "rocketpy client", keys["client"], "rocketpy test CA", ca_key, False))
        self.self_signed, self.self_signed_key = _write(directory, "self", keys["self"], _certificate(
            "127.0.0.1", keys["self"], "127.0.0.1", keys["self"], False))
