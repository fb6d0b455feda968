"""The whole path a user takes: ``twist rocketpy --acl-enable … --tls-mode permissive …`` in its own
process, and the blocking facade with ``credentials=`` and ``tls=True``."""

from __future__ import annotations

import os
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.blocking import Producer, PushConsumer
from rocketpy.client import new_message
from rocketpy.client.errors import SendFailedError
from rocketpy.client.subscription import client_msg_id
from tests.acl.test_broker import ACL, REFUSED, USER
from tests.interop.test_cpp import Rocketpy
from tests.remoting.certs import CertificateSet


class SecureProcessTests(SynchronousTestCase):
    def test_blocking_clients_with_credentials_over_tls(self) -> None:
        """Signed and encrypted: sent and received; the same producer without credentials is refused."""
        workdir = os.path.abspath(self.mktemp())
        certs = CertificateSet(os.path.join(workdir, "certs"))
        acl_path = os.path.join(workdir, "plain_acl.yml")
        with open(acl_path, "w") as f:
            f.write(ACL)
        # permissive: the harness's own readiness probe speaks plain TCP; the clients below use TLS
        rocketpy = Rocketpy(workdir, extra=("--acl-enable", "--acl-file", acl_path, "--tls-mode", "permissive",
                                            "--tls-cert", certs.self_signed, "--tls-key", certs.self_signed_key))
        rocketpy.start()
        self.addCleanup(rocketpy.stop)
        secure: dict[str, Any] = {"credentials": USER, "tls": True, "tls_ca": certs.self_signed}
        with Producer("PG", rocketpy.namesrv, **secure) as producer:
            sent = producer.send(new_message("TopicA", b"signed and sealed"))
        consumer = PushConsumer("GroupA", rocketpy.namesrv, **secure).subscribe("TopicA").start()
        try:
            got = consumer.receive(timeout=30)
        finally:
            consumer.shutdown()
        self.assertIsNotNone(got)
        assert got is not None
        self.assertEqual((got.body, client_msg_id(got)), (b"signed and sealed", sent.msg_id))
        with Producer("PG", rocketpy.namesrv, tls=True, tls_ca=certs.self_signed, retry_times=0) as anonymous:
            with self.assertRaises(SendFailedError) as caught:
                anonymous.send(new_message("TopicA", b"x"))
        self.assertIn(REFUSED + "No accessKey is configured", str(caught.exception))
