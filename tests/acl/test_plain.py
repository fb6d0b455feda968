"""plain_acl.yml parsing, remote-address patterns, signatures and the permission rules (no network)."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.acl.addresses import AddressPatternError, address_matcher, host_of
from rocketpy.acl.plain import DENY, PUB, SUB, AclConfigError, AclRefused, check_access, parse_acl
from rocketpy.acl.signing import AclClientHook, credentials_hooks, sign, signed_content
from rocketpy.broker.acl import ADMIN_CODES, PlainAccessValidator, needed_resources
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand


class AddressPatternTests(SynchronousTestCase):
    def test_patterns(self) -> None:
        """Each of Java's strategies: blank, any, one, list, braces, ranges."""
        cases = {
            "": ([], ["127.0.0.1"]),
            "*": (["127.0.0.1", "::1"], []),
            "192.168.1.1": (["192.168.1.1"], ["192.168.1.2"]),
            "192.168.0.{1,2}": (["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.1.1"]),
            "10.0.0.1,10.0.0.2": (["10.0.0.2"], ["10.0.0.3"]),
            "192.168.1.1-5": (["192.168.1.1", "192.168.1.5"], ["192.168.1.6", "192.168.2.3"]),
            "192.168.*.*": (["192.168.7.9"], ["192.169.0.1"]),
            "10.*.*.*": (["10.1.2.3"], ["11.1.2.3"]),
            "::1": (["0:0:0:0:0:0:0:1"], ["::2"]),
            "127.0.1-200.*": (["127.0.1.9", "127.0.200.0"], ["127.0.0.15", "127.0.201.1", "127.1.5.9"]),
            "127.1-150.*.*": (["127.5.7.9"], ["127.0.0.1", "127.151.0.1"]),
            "1050::0005:0600:300c:{1,2,3}": (["1050:0:0:0:5:600:300c:2"], ["1050::5:600:300c:4"]),
            # IPv6 ranges, in hex (Java's RemoteAddressStrategyTest)
            "1050::0005:0600:300c:1-200": (["1050::5:600:300c:1", "1050::5:600:300c:200"],
                                           ["1050::5:600:300c:0", "1050::5:600:300c:201", "1050::5:600:300d:5"]),
            "1050::0005:0600:300c:*": (["1050::5:600:300c:0", "1050::5:600:300c:ffff"], ["1050::5:600:3001:1"]),
            "1050::0005:0600:300c:1-200:*": (["1050::5:600:300c:1:5", "1050::5:600:300c:200:ffff"],
                                             ["1050::5:600:300c:201:5"]),
        }
        for pattern, (matching, other) in cases.items():
            match = address_matcher(pattern)
            for host in matching:
                self.assertTrue(match(host), (pattern, host))
            for host in other:
                self.assertFalse(match(host), (pattern, host))

    def test_bad_patterns(self) -> None:
        """Patterns Java refuses are refused with a message naming them."""
        for pattern in ("not-an-ip", "192.168.{1,2}", "1.2.3.5-1", "1.2.3.x", "192.168.0.{1,999}", "127.0.0.-1-200",
                        "127.0.0.0-256", "::1ggg", "::1,2,3}", "1050::*:1", "1050::1-2:3"):
            with self.assertRaises(AddressPatternError, msg=pattern):
                address_matcher(pattern)

    def test_host_of(self) -> None:
        self.assertEqual(host_of("127.0.0.1:10911"), "127.0.0.1")
        self.assertEqual(host_of("::1:10911"), "::1")


class ConfigTests(SynchronousTestCase):
    def test_accounts(self) -> None:
        """Keys, admin flag, default and per-resource permissions; groups become retry topics."""
        acl = parse_acl("""
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    defaultTopicPerm: PUB
    defaultGroupPerm: SUB
    topicPerms: [TopicA=DENY, "TopicB=PUB|SUB"]
    groupPerms: [GroupA=SUB]
  - accessKey: rocketmq2
    secretKey: 12345678
    admin: true
""")
        user, admin = acl.accounts["RocketMQ"], acl.accounts["rocketmq2"]
        self.assertEqual((user.secret_key, user.admin, user.default_topic_perm, user.default_group_perm),
                         ("12345678", False, PUB, SUB))
        self.assertEqual(dict(user.perms or {}), {"TopicA": DENY, "TopicB": PUB | SUB, "%RETRY%GroupA": SUB})
        self.assertEqual((admin.admin, admin.perms, admin.default_topic_perm), (True, None, DENY))

    def test_errors(self) -> None:
        """Broken files give one clear message each."""
        cases = {
            "accounts: [": "not valid YAML",
            "- a list": "must be a mapping",
            "accounts:\n  - accessKey: short\n    secretKey: 12345678\n": "The accessKey=short and secretKey=(8 characters)",
            "accounts:\n  - accessKey: longenough\n    secretKey: 12345678\n    topicPerms: [TopicA]\n":
                "Parse resource permission failed for topic:TopicA",
            "globalWhiteRemoteAddresses: [nonsense]": "globalWhiteRemoteAddresses",
        }
        for text, message in cases.items():
            with self.assertRaises(AclConfigError) as caught:
                parse_acl(text)
            self.assertIn(message, str(caught.exception))


class SigningTests(SynchronousTestCase):
    def test_content_and_signature(self) -> None:
        """Values sorted by key, Signature left out, body appended; HmacSHA1 in Base64."""
        fields = {"b": "2", "a": "1", "Signature": "old", "AccessKey": "ak"}
        self.assertEqual(signed_content(fields, b"BODY"), b"ak12BODY")
        # HMAC-SHA1("key", "The quick brown fox jumps over the lazy dog") = de7c9b85b8b78aa6bc8a7a36f70a90701c9db4d9
        self.assertEqual(sign(b"The quick brown fox jumps over the lazy dog", "key"), "3nybhbi3iqa8ino29wqQcBydtNk=")

    def test_client_hook(self) -> None:
        """The hook adds AccessKey, SecurityToken and a signature over the stringified fields."""
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T", "queueId": 3})  # type: ignore[dict-item]
        AclClientHook("ak12345", "secret12", "tok").before_request("127.0.0.1:1", request)
        fields = request.ext_fields
        self.assertEqual((fields["AccessKey"], fields["SecurityToken"], fields["queueId"]), ("ak12345", "tok", "3"))
        self.assertEqual(fields["Signature"], sign(b"ak12345" + b"tok" + b"3" + b"T", "secret12"))


class CheckTests(SynchronousTestCase):
    acl = parse_acl("""
globalWhiteRemoteAddresses: [10.0.0.9]
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.0.*
    defaultGroupPerm: SUB
    topicPerms: [TopicA=PUB, TopicB=SUB, TopicD=DENY]
""")

    def check(self, request: RemotingCommand, host: str = "127.0.0.1") -> None:
        PlainAccessValidator(self.acl).before_request(f"{host}:5555", request)

    def signed(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        request = RemotingCommand.request(code, fields, body)
        AclClientHook("RocketMQ", "12345678").before_request("", request)
        return request

    def refusal(self, request: RemotingCommand, host: str = "127.0.0.1") -> str:
        with self.assertRaises(AclRefused) as caught:
            self.check(request, host)
        return caught.exception.message

    def test_resources_per_code(self) -> None:
        """Which topic or group each request code needs, retry topics mapped to their group."""
        cases = [
            (RequestCode.SEND_MESSAGE, {"topic": "T", "group": "G"}, b"", {"T": PUB}),
            (RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%G", "a": "G"}, b"", {"%RETRY%G": SUB}),
            (RequestCode.SEND_BATCH_MESSAGE, {"b": "T", "a": "G"}, b"", {"T": PUB}),
            # the broker stores to "b" whichever send code: so that is what is checked
            (RequestCode.SEND_MESSAGE, {"topic": "Allowed", "b": "T"}, b"", {"T": PUB}),
            (RequestCode.SEND_MESSAGE_V2, {"topic": "T"}, b"", {"T": PUB}),
            (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "G"}, b"", {"%RETRY%G": SUB}),
            (RequestCode.PULL_MESSAGE, {"topic": "T", "consumerGroup": "G"}, b"", {"T": SUB, "%RETRY%G": SUB}),
            (RequestCode.QUERY_MESSAGE, {"topic": "T"}, b"", {"T": SUB}),
            (RequestCode.UPDATE_CONSUMER_OFFSET, {"topic": "T", "consumerGroup": "G"}, b"",
             {"T": SUB, "%RETRY%G": SUB}),
            (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}, b"", {"%RETRY%G": SUB}),
            (RequestCode.UNREGISTER_CLIENT, {"clientID": "c", "consumerGroup": "G"}, b"", {"%RETRY%G": SUB}),
            (RequestCode.HEART_BEAT, {}, b'{"clientID":"c","consumerDataSet":[{"groupName":"G",'
             b'"subscriptionDataSet":[{"topic":"T"}]}]}', {"%RETRY%G": SUB, "T": SUB}),
            (RequestCode.LOCK_BATCH_MQ, {}, b'{"consumerGroup":"G","clientId":"c","mqSet":[]}', {"%RETRY%G": SUB}),
            (RequestCode.UNLOCK_BATCH_MQ, {}, b"[[[", {}),
            (RequestCode.GET_MAX_OFFSET, {"topic": "T"}, b"", {}),
        ]
        for code, fields, body, expected in cases:
            self.assertEqual(needed_resources(RemotingCommand.request(code, fields, body)), expected, code)
        self.assertIn(RequestCode.DELETE_TOPIC_IN_BROKER, ADMIN_CODES)

    def test_order_of_checks(self) -> None:
        """White lists first, then key, signature, admin and resource permissions."""
        unsigned = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "TopicZ"})
        self.check(unsigned, "10.0.0.9")  # globally white-listed: nothing checked
        self.assertEqual(self.refusal(unsigned), "No accessKey is configured")
        bad = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "TopicZ", "AccessKey": "RocketMQ",
                                                                 "Signature": "x"})
        self.check(bad, "192.168.0.7")  # the account's white address skips the signature and perms
        self.assertEqual(self.refusal(bad), "Check signature failed for accessKey=RocketMQ")
        self.check(self.signed(RequestCode.SEND_MESSAGE, {"topic": "TopicA"}))
        self.check(self.signed(RequestCode.SEND_MESSAGE, {"topic": "RMQ_SYS_TRACE_TOPIC"}))  # traces always pass
        for topic in ("TopicB", "TopicD", "TopicZ"):
            self.assertEqual(self.refusal(self.signed(RequestCode.SEND_MESSAGE, {"topic": topic})),
                             f"No default permission for topic:{topic}")
        self.check(self.signed(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "AnyGroup"}))  # defaultGroupPerm SUB
        self.assertEqual(self.refusal(self.signed(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G"})),
                         "Need admin permission for request code=207, but accessKey=RocketMQ is not")
        with_unique_key = self.signed(RequestCode.QUERY_MESSAGE, {"topic": "TopicB"})
        with_unique_key.ext_fields["_UNIQUE_KEY_QUERY"] = "true"  # added after signing: not covered
        self.check(with_unique_key)

    def test_unreadable_heartbeat(self) -> None:
        """A heartbeat body that cannot be read is refused (also a deeply nested one)."""
        for body in (b"not json", b"[" * 5000 + b"]" * 5000):
            request = self.signed(RequestCode.HEART_BEAT, {}, body)
            self.assertIn("cannot read the heartbeat body", self.refusal(request))

    def test_check_access_direct(self) -> None:
        """Unknown keys are refused by name."""
        with self.assertRaises(AclRefused) as caught:
            check_access(self.acl, "127.0.0.1", 10, "Unknown", "sig", (b"",), dict, ADMIN_CODES)
        self.assertEqual(caught.exception.remark, "org.apache.rocketmq.acl.common.AclException: No acl config for Unknown")


class DocumentedFileTests(SynchronousTestCase):
    def test_security_md_example_parses(self) -> None:
        """The plain_acl.yml of doc/security.md, as a user would copy it, is valid and means what it says."""
        doc = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "doc",
                           "security.md")
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
        acl = parse_acl(example)
        self.assertEqual(sorted(acl.accounts), ["orders-app", "rocketmq-admin"])
        app = acl.accounts["orders-app"]
        self.assertEqual(dict(app.perms or {}), {"orders": PUB | SUB, "audit": PUB, "%RETRY%billing": SUB})
        self.assertTrue(acl.accounts["rocketmq-admin"].admin)
        self.assertTrue(acl.global_white[0]("10.10.103.20"))


class ClientArgumentTests(SynchronousTestCase):
    def test_credentials_shapes(self) -> None:
        """credentials must be (key, secret) or (key, secret, token) of non-empty strings."""
        self.assertEqual(credentials_hooks(None), ())
        self.assertEqual(len(credentials_hooks(("ak", "sk", "token"))), 1)
        for bad in (("only-key",), ("ak", ""), "aksk", ("ak", 5)):
            self.assertRaises(ValueError, credentials_hooks, bad)

    def test_not_with_a_given_remoting_client(self) -> None:
        """credentials= or tls= beside a remoting client of the caller's is an error, not silently ignored."""
        from twisted.internet.task import Clock

        from rocketpy.client.instance import ClientInstance

        for kwargs in ({"credentials": ("ak12345", "sk12345")}, {"tls": True}):
            with self.assertRaises(TypeError):
                ClientInstance(Clock(), "127.0.0.1:9876", object(), **kwargs)  # type: ignore[arg-type]

    def test_tls_arguments(self) -> None:
        """tls=True with or without a CA, a ClientTLS as it is; a CA alone is an error."""
        from rocketpy.remoting.tls import ClientTLS, client_tls

        self.assertIsNone(client_tls(False))
        self.assertEqual(client_tls(True, "ca.pem"), ClientTLS(ca="ca.pem"))
        given = ClientTLS(ca="x.pem", cert="c.pem", key="k.pem")
        self.assertIs(client_tls(given), given)
        for tls in (False, given):
            self.assertRaises(ValueError, client_tls, tls, "ca.pem")
