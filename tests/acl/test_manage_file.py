"""Edits of ``plain_acl.yml`` (rocketpy.acl.manage): Java's merge and checks, the dataVersion, and a
refused edit leaving the file as it was."""

from __future__ import annotations

import os
import stat

import yaml
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.acl.config import AccessConfig, AclConfigError, split_list, split_patterns
from rocketpy.acl.manage import delete_account, edit_acl_file, set_global_white, update_account
from rocketpy.acl.plain import PUB, SUB, parse_acl
from rocketpy.common.topic import DataVersion
from tests.acl.test_broker import ACL

NOW = 1_796_000_000_000


class SplitTests(SynchronousTestCase):
    def test_split_list(self) -> None:
        """Header lists: commas, blanks dropped; no header is None (leave the list alone)."""
        self.assertEqual(split_list("TopicA=PUB, TopicB=SUB,"), ["TopicA=PUB", "TopicB=SUB"])
        self.assertEqual(split_list(""), [])
        self.assertIsNone(split_list(None))

    def test_split_patterns_keeps_braces(self) -> None:
        """A comma inside {…} belongs to its pattern."""
        self.assertEqual(split_patterns("10.10.103.*, 192.168.0.{1,2},,1050::5:*"),
                         ["10.10.103.*", "192.168.0.{1,2}", "1050::5:*"])


class EditTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.path = self.mktemp()
        with open(self.path, "w") as f:
            f.write(ACL)
        os.chmod(self.path, 0o640)

    def content(self) -> bytes:
        with open(self.path, "rb") as f:
            return f.read()

    def test_update_merges_as_java(self) -> None:
        """An existing account keeps what the request leaves out (None, empty default perm); the secret
        and admin are always set; the dataVersion counts up and takes the time."""
        config = AccessConfig("RocketMQ", "new-secret", None, False, "", "SUB", ["TopicC=PUB"], None)
        acl, stamp = edit_acl_file(self.path, update_account(config), NOW)
        account = acl.accounts["RocketMQ"]
        self.assertEqual((account.secret_key, account.default_topic_perm, account.default_group_perm),
                         ("new-secret", 1, SUB))  # DENY stays: the empty default was left out
        self.assertEqual(dict(account.perms or {}), {"TopicC": PUB, "%RETRY%GroupA": SUB})
        self.assertEqual(acl.version, DataVersion(1, NOW))
        self.assertEqual(stamp, (os.stat(self.path).st_mtime_ns, os.stat(self.path).st_size))
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o640)
        self.assertEqual(parse_acl(self.content().decode()).version, DataVersion(1, NOW))
        acl, _ = edit_acl_file(self.path, update_account(AccessConfig("NewUser1", "secret-1", admin=True)), NOW + 5)
        self.assertEqual(list(acl.accounts), ["RocketMQ", "rocketmq2", "NewUser1"])
        self.assertTrue(acl.accounts["NewUser1"].admin)
        self.assertEqual(acl.version, DataVersion(2, NOW + 5))

    def test_delete_and_global_white(self) -> None:
        """Delete removes the account; the whitelist is replaced whole."""
        acl, _ = edit_acl_file(self.path, delete_account("RocketMQ"), NOW)
        self.assertEqual(list(acl.accounts), ["rocketmq2"])
        acl, _ = edit_acl_file(self.path, set_global_white(["127.0.0.1", "10.0.0.{1,2}"]), NOW)
        self.assertEqual(acl.config.global_white_addrs, ["127.0.0.1", "10.0.0.{1,2}"])
        self.assertTrue(acl.global_white[1]("10.0.0.2"))
        self.assertEqual(yaml.safe_load(self.content())["globalWhiteRemoteAddresses"], ["127.0.0.1", "10.0.0.{1,2}"])

    def test_refused_edits_leave_the_file(self) -> None:
        """Short keys, bad perms, a bad address pattern, an unknown account: Java's message, file unchanged."""
        before = self.content()
        cases = [
            (lambda: update_account(AccessConfig("RocketMQ", "short")),
             "The accessKey=RocketMQ and secretKey=(5 characters) cannot be null and length should longer than 6"),
            (lambda: update_account(AccessConfig("abc", "12345678")),
             "The accessKey=abc and secretKey=(8 characters) cannot be null and length should longer than 6"),
            (lambda: update_account(AccessConfig("RocketMQ", "12345678", topic_perms=["TopicA=PUBX"])),
             "Parse resource permission error for TopicA=PUBX.\n"
             "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'."),
            (lambda: update_account(AccessConfig("RocketMQ", "12345678", group_perms=["GroupA"])),
             "Parse Resource format error for GroupA.\n"
             "The expected resource format is 'Res=Perm'. For example: topicA=SUB"),
            (lambda: update_account(AccessConfig("RocketMQ", "12345678", default_topic_perm="ALL")),
             "Parse default permission error for defaultTopicPerm=ALL.\n"
             "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB' or 'DENY'."),
            (lambda: update_account(AccessConfig("RocketMQ", "12345678", white_remote_address="1.2.3")),
             "whiteRemoteAddress of accessKey RocketMQ: '1.2.3' is not an IP address"),
            (lambda: delete_account("Nobody12"),
             "The accesskey[Nobody12] corresponding to accessConfig has been deleted failed."),
            (lambda: set_global_white(["10.0.0.1-300"]),
             "globalWhiteRemoteAddresses: '10.0.0.1-300': bad range '1-300'"),
        ]
        for edit, message in cases:
            with self.assertRaises(AclConfigError) as raised:
                edit_acl_file(self.path, edit(), NOW)
            self.assertEqual(str(raised.exception), message)
            self.assertEqual(self.content(), before)
        self.assertEqual(os.listdir(os.path.dirname(os.path.abspath(self.path))), [os.path.basename(self.path)])

    def test_link_and_missing_file(self) -> None:
        """A symbolic link keeps pointing at the (replaced) file; a missing file starts empty."""
        link = self.mktemp()
        os.symlink(os.path.abspath(self.path), link)
        edit_acl_file(link, delete_account("RocketMQ"), NOW)
        self.assertTrue(os.path.islink(link))
        self.assertNotIn(b"accessKey: RocketMQ\n", self.content())
        self.assertIn(b"accessKey: rocketmq2\n", self.content())
        missing = self.mktemp()
        acl, _ = edit_acl_file(missing, set_global_white(["127.0.0.1"]), NOW)
        self.assertEqual((acl.config.global_white_addrs, acl.version), (["127.0.0.1"], DataVersion(1, NOW)))
