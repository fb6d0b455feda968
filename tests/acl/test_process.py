"""The whole path a user takes: ``twist rocketpy --acl-enable … --tls-mode permissive …`` in its own
process, the blocking facade with ``credentials=`` and ``tls=True``, and ``rocketpy-admin updateAclConfig``."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.blocking import Producer, PushConsumer
from rocketpy.client import new_message
from rocketpy.client.errors import SendFailedError
from rocketpy.client.subscription import client_msg_id
from tests.acl.test_broker import ACL, ADMIN, REFUSED, USER
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
        # an admin gives a new account PUB on TopicC with rocketpy-admin; its producer sends at once
        admin = [sys.executable, "-m", "rocketpy.admin", "updateAclConfig", "-n", rocketpy.namesrv,
                 "-b", f"127.0.0.1:{rocketpy.broker_port}", "-a", "NewUser1", "-s", "secret-1", "-t", "TopicC=PUB",
                 "--accessKey", ADMIN[0], "--secretKey", ADMIN[1]]
        done = subprocess.run(admin, capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        newcomer: dict[str, Any] = {"credentials": ("NewUser1", "secret-1"), "tls": True, "tls_ca": certs.self_signed}
        with Producer("PG", rocketpy.namesrv, **newcomer) as producer:
            self.assertTrue(producer.send(new_message("TopicC", b"granted remotely")).msg_id)
        with open(acl_path) as f:
            self.assertIn("NewUser1", f.read())
