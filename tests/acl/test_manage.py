"""The ACL management requests (50-54) on a real broker on loopback with ACL on: an admin account's
AdminClient (rocketpy's credentials support) changes the ACL, and rocketpy's producer feels it at once."""

from __future__ import annotations

import io
import json
import os
from typing import Any

import yaml
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from rocketpy.acl.config import AccessConfig
from rocketpy.admin.cli import execute
from rocketpy.broker.aclmanage import ACL_OFF
from rocketpy.client import Producer, new_message
from rocketpy.client.admin import AdminClient
from rocketpy.client.errors import MQBrokerError, SendFailedError
from rocketpy.common.topic import DataVersion
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.acl.test_broker import ADMIN, REFUSED, USER, AclBrokerTestCase
from tests.client.test_integration import LoopbackCluster

USER_ACCOUNT = AccessConfig(USER[0], USER[1], None, False, "DENY", "DENY", ["TopicA=PUB|SUB", "TopicC=PUB"],
                            ["GroupA=SUB"])
MANAGE_CODES = (RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, RequestCode.DELETE_ACL_CONFIG,
                RequestCode.GET_BROKER_CLUSTER_ACL_INFO, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)


class AclManagementTests(AclBrokerTestCase):
    @property
    def controller(self) -> Any:
        return self.cluster.brokers["broker-a"]

    def admin(self, credentials: tuple[str, str] | None = ADMIN) -> AdminClient:
        admin = AdminClient(reactor, self.cluster.namesrv_addr, credentials=credentials)
        self.addCleanup(admin.close)
        return admin

    async def send_refused(self, producer: Producer, topic: str, message: str) -> None:
        error: Any = await self.assertFailure(producer.send(new_message(topic, b"x")), SendFailedError)
        self.assertEqual(error.last_error.remark, REFUSED + message)

    def file(self) -> bytes:
        with open(self.acl_path, "rb") as f:
            return f.read()

    async def test_admin_changes_apply_at_once(self) -> None:
        """Update an account (its producer may send at once), create one, read version and config,
        change the whitelist, delete the account (refused at once); the watcher loads none again."""
        await self.start()
        admin, user = self.admin(), await self.producer(USER)
        await self.send_refused(user, "TopicC", "No default permission for topic:TopicC")
        await admin.update_acl_account(self.broker, USER_ACCOUNT)
        self.assertTrue((await user.send(new_message("TopicC", b"allowed now"))).msg_id)
        in_force = self.controller.acl_validator.acl
        await self.controller.acl_watcher._check()  # the next check of the file: nothing new to load
        self.assertIs(self.controller.acl_validator.acl, in_force)

        await admin.update_acl_account(self.broker, AccessConfig("NewUser1", "secret-1", topic_perms=["TopicC=PUB"]))
        newcomer = await self.producer(("NewUser1", "secret-1"))
        self.assertTrue((await newcomer.send(new_message("TopicC", b"hello"))).msg_id)

        version = await admin.acl_version(self.broker)
        self.assertEqual((version.cluster_name, version.broker_name, version.broker_addr, version.version.counter),
                         ("DefaultCluster", "broker-a", self.broker, 2))
        self.assertEqual(version.file_versions, {self.acl_path: version.version})
        self.assertEqual(yaml.safe_load(self.file())["dataVersion"], [version.version.to_json()])
        config = await admin.acl_config(self.broker)
        self.assertEqual(config.global_white_addrs, ["10.10.103.*", "192.168.0.{1,2}"])
        self.assertEqual([a.access_key for a in config.accounts], ["RocketMQ", "rocketmq2", "NewUser1"])
        self.assertEqual(config.accounts[0], USER_ACCOUNT)

        anonymous = await self.producer(None)
        await self.send_refused(anonymous, "TopicC", "No accessKey is configured")
        await admin.update_global_white_addrs(self.broker, "10.10.103.*,127.0.0.{1,2}", self.acl_path)
        self.assertTrue((await anonymous.send(new_message("TopicC", b"whitelisted"))).msg_id)
        await admin.update_global_white_addrs(self.broker, "10.10.103.*")
        await self.send_refused(anonymous, "TopicC", "No accessKey is configured")

        await admin.delete_acl_account(self.broker, "NewUser1")
        await self.send_refused(newcomer, "TopicC", "No acl config for NewUser1")
        self.assertEqual((await admin.acl_version(self.broker)).version.counter, 5)
        self.assertNotIn("NewUser1", [a.access_key for a in (await admin.acl_config(self.broker)).accounts])

    async def test_non_admin_and_bad_requests_are_refused(self) -> None:
        """A signed non-admin account is refused every management code; bad requests get Java's code and
        a remark saying why; the file stays as it was and the ACL in force too."""
        await self.start()
        before, in_force = self.file(), self.controller.acl_validator.acl
        user = self.admin(USER)
        calls: list[Deferred[Any]] = [
            user.update_acl_account(self.broker, USER_ACCOUNT), user.delete_acl_account(self.broker, "x"),
            user.acl_version(self.broker), user.update_global_white_addrs(self.broker, "*"),
            user.acl_config(self.broker)]
        for code, call in zip(MANAGE_CODES, calls):
            error = await self.assertFailure(call, MQBrokerError)
            self.assertEqual((error.code, error.remark), (ResponseCode.SYSTEM_ERROR, REFUSED + (
                f"Need admin permission for request code={code}, but accessKey=RocketMQ is not")))
        admin = self.admin()
        cases = [
            (admin.update_acl_account(self.broker, AccessConfig("RocketMQ", "short", topic_perms=["TopicC=PUB"])),
             209, "The accessKey=RocketMQ and secretKey=(5 characters) cannot be null and length should longer than 6"),
            (admin.update_acl_account(self.broker, AccessConfig("RocketMQ", "12345678", topic_perms=["TopicC=ALL"])),
             209, "Parse resource permission error for TopicC=ALL.\n"
                  "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'."),
            (admin.update_acl_account(self.broker, AccessConfig("RocketMQ", "12345678", "10.0.0.1-300")),
             209, "whiteRemoteAddress of accessKey RocketMQ: '10.0.0.1-300': bad range '1-300'"),
            (admin.delete_acl_account(self.broker, "Nobody12"),
             210, "The accesskey[Nobody12] corresponding to accessConfig has been deleted failed."),
            (admin.update_global_white_addrs(self.broker, "127.0.0.1,300.1.1.1"),
             211, "globalWhiteRemoteAddresses: '300.1.1.1' is not an IP address"),
            (admin.update_global_white_addrs(self.broker, "*", "/etc/other_acl.yml"),
             211, f"The globalWhiteAddresses[*] has been updated failed. (aclFileFullPath /etc/other_acl.yml is "
                  f"not this broker's ACL file, {self.acl_path})"),
        ]
        for call, failed, remark in cases:
            error = await self.assertFailure(call, MQBrokerError)
            self.assertEqual((error.code, error.remark), (failed, remark))
        missing = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"secretKey": "12345678"})
        response = await admin.remoting.invoke_sync(self.broker, missing, 5)
        self.assertEqual((response.code, response.remark),
                         (ResponseCode.SYSTEM_ERROR, "header field 'accessKey' is missing"))
        self.assertEqual(self.file(), before)
        self.assertIs(self.controller.acl_validator.acl, in_force)

    async def test_acl_off(self) -> None:
        """Without ACL every management code answers at once: Java's failure code (50, 51, 53), or
        SYSTEM_ERROR (52, 54, which Java 4.9 leaves unanswered), with a remark saying ACL is off."""
        await self.start(acl_enable=False)
        answers = []
        for code in MANAGE_CODES:
            fields = {"accessKey": "RocketMQ", "secretKey": "12345678", "globalWhiteAddrs": "*"}
            response = await self.call(RemotingCommand.request(code, fields))
            answers.append((response.code, response.remark))
        self.assertEqual(answers, [(209, ACL_OFF), (210, ACL_OFF), (1, ACL_OFF), (211, ACL_OFF), (1, ACL_OFF)])

    async def cli(self, *argv: str, ok: bool = True) -> str:
        out, err = io.StringIO(), io.StringIO()
        status = await execute(reactor, [*argv, "-n", self.cluster.namesrv_addr, "--accessKey", ADMIN[0],
                                         "--secretKey", ADMIN[1]], out, err)
        self.assertEqual(status, 0 if ok else 1, err.getvalue())
        return out.getvalue() if ok else err.getvalue()

    async def test_admin_cli(self) -> None:
        """rocketpy-admin's ACL sub-commands end to end, signed with --accessKey/--secretKey."""
        await self.start()
        b = ("-b", self.broker)
        self.assertEqual(await self.cli("updateAclConfig", "-c", "DefaultCluster", "-a", "NewUser1", "-s", "secret-1",
                                        "-t", "TopicC=PUB,TopicA=SUB", "-i", "DENY", "-m", "false"),
                         f"create or update plain access config to {self.broker} success.\n")
        newcomer = await self.producer(("NewUser1", "secret-1"))
        self.assertTrue((await newcomer.send(new_message("TopicC", b"hello"))).msg_id)
        text = await self.cli("getAclConfig", *b)
        self.assertIn("globalWhiteRemoteAddresses: [10.10.103.*, 192.168.0.{1,2}]\n\naccounts:\n", text)
        self.assertIn("  accessKey         : NewUser1\n  secretKey         : secret-1\n  whiteRemoteAddress: \n"
                      "  admin             : false\n  defaultTopicPerm  : DENY\n  defaultGroupPerm  : \n"
                      "  topicPerms        : [TopicC=PUB, TopicA=SUB]\n  groupPerms        : \n", text)
        row = (await self.cli("clusterAclConfigVersion", "-c", "DefaultCluster")).splitlines()[1].split()
        self.assertEqual(row[:5], ["DefaultCluster", "broker-a", self.broker, self.acl_path, "1"])
        versions = json.loads(await self.cli("clusterAclConfigVersion", *b, "--json"))
        self.assertEqual((versions[0]["version"]["counter"], versions[0]["broker_addr"]), (1, self.broker))
        self.assertEqual(await self.cli("updateGlobalWhiteAddr", *b, "-g", "10.10.103.*"),
                         f"update global white remote addresses to {self.broker} success.\n")
        self.assertEqual(await self.cli("deleteAclConfig", *b, "-a", "NewUser1"),
                         f"delete plain access config account from {self.broker} success.\n"
                         f"account's accesskey is:NewUser1\n")
        await self.send_refused(newcomer, "TopicC", "No acl config for NewUser1")
        self.assertEqual(await self.cli("updateAclConfig", *b, "-a", "NewUser1", "-s", "secret-1", "-t", "TopicC=WRITE",
                                        ok=False),
                         f"rocketpy-admin updateAclConfig: broker {self.broker} answered "
                         "UPDATE_AND_CREATE_ACL_CONFIG_FAILED (209): Parse resource permission error for "
                         "TopicC=WRITE. The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'.\n")
        self.assertEqual(DataVersion.from_json(yaml.safe_load(self.file())["dataVersion"][0]).counter, 3)
