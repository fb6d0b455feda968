"""``twistd rocketpy`` security options: ACL and TLS mistakes are usage errors; good ones reach the services."""

from __future__ import annotations

import os

from twisted.internet.testing import MemoryReactorClock
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.controller import BrokerService
from rocketpy.remoting.tls import ServerTLS
from rocketpy.tap import makeService
from tests.acl.test_broker import ACL
from tests.test_tap import _parse
from tests.remoting.certs import CertificateSet


class SecurityOptionsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = os.path.abspath(self.mktemp())
        self.certs = CertificateSet(self.dir)
        self.acl = os.path.join(self.dir, "plain_acl.yml")
        with open(self.acl, "w") as f:
            f.write(ACL)

    def write(self, name: str, text: str) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_acl_options(self) -> None:
        """--acl-enable (or aclEnable=true in --config) with a good file turns the broker's check on."""
        for argv in (["--acl-enable", "--acl-file", self.acl],
                     ["--config", self.write("broker.conf", f"aclEnable=true\nacl-file={self.acl}\n")]):
            options = _parse(*argv)
            self.assertIs(options["acl-enable"], True)
            service = makeService(options, MemoryReactorClock())
            broker = [s for s in service if isinstance(s, BrokerService)][0]
            self.assertEqual((broker.config.acl_enable, broker.config.acl_file), (True, self.acl))
            self.assertEqual(len(broker.server.rpc_hooks), 1)

    def test_acl_mistakes(self) -> None:
        """No file, a missing file or a broken one: a usage error that says why."""
        cases = [
            (["--acl-enable"], "--acl-enable needs --acl-file"),
            (["--acl-enable", "--acl-file", os.path.join(self.dir, "nope.yml")], "cannot read"),
            (["--acl-enable", "--acl-file", self.write("bad.yml", "accounts: [")], "not valid YAML"),
        ]
        for argv, message in cases:
            with self.assertRaises(usage.UsageError) as caught:
                _parse(*argv)
            self.assertIn(message, str(caught.exception))

    def test_tls_options(self) -> None:
        """--tls-cert alone means enforcing; --tls-mode picks another; the services get it."""
        options = _parse("--tls-cert", self.certs.server, "--tls-key", self.certs.server_key)
        self.assertEqual(options["tls"], ServerTLS(self.certs.server, self.certs.server_key, None, "enforcing"))
        options = _parse("--tls-mode", "permissive", "--tls-cert", self.certs.server, "--tls-key",
                         self.certs.server_key, "--tls-ca", self.certs.ca)
        self.assertEqual(options["tls"], ServerTLS(self.certs.server, self.certs.server_key, self.certs.ca,
                                                   "permissive"))
        self.assertIsNone(_parse()["tls"])
        service = makeService(options, MemoryReactorClock())
        broker = [s for s in service if isinstance(s, BrokerService)][0]
        self.assertEqual(broker._tls, options["tls"])

    def test_tls_mistakes(self) -> None:
        """A wrong mode, a missing key, unreadable or mismatched files: usage errors."""
        cases = [
            (["--tls-mode", "strict"], "--tls-mode must be one of disabled, permissive, enforcing"),
            (["--tls-mode", "enforcing"], "needs --tls-cert and --tls-key"),
            (["--tls-cert", self.certs.server], "needs --tls-cert and --tls-key"),
            (["--tls-cert", os.path.join(self.dir, "no.pem"), "--tls-key", self.certs.server_key], "cannot read"),
            (["--tls-cert", self.certs.server, "--tls-key", self.certs.client_key], "are not a PEM certificate"),
            (["--tls-cert", self.certs.server, "--tls-key", self.certs.server_key, "--tls-ca", self.acl],
             "is not a PEM certificate"),
        ]
        for argv, message in cases:
            with self.assertRaises(usage.UsageError, msg=argv) as caught:
                _parse(*argv)
            self.assertIn(message, str(caught.exception))
