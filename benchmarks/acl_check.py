"""What the plain ACL costs per request: the broker's check and the client's signing of one
SEND_MESSAGE_V2 (100 B and 1 KiB bodies), in microseconds (best of 3 runs of 200,000).

Usage::

    PYTHONPATH=. python benchmarks/acl_check.py
"""

from __future__ import annotations

import timeit

from rocketpy.acl.plain import parse_acl
from rocketpy.acl.signing import AclClientHook
from rocketpy.broker.acl import PlainAccessValidator
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand

ACL = """
globalWhiteRemoteAddresses: ['10.10.103.*', '192.168.0.{1,2}']
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    topicPerms: [TopicA=PUB|SUB]
"""
FIELDS = {"a": "PG", "b": "TopicA", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000000", "h": "0",
          "i": "UNIQ_KEY\x01C0A80202A1B2C3D4E5F60718\x02TAGS\x01TagA\x02KEYS\x01k1", "j": "0", "k": "false",
          "m": "false"}


def main() -> None:
    validator = PlainAccessValidator(parse_acl(ACL))
    signer = AclClientHook("RocketMQ", "12345678")
    runs = 200_000
    for size in (100, 1024):
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, dict(FIELDS), b"x" * size)
        signer.before_request("", request)
        check = min(timeit.repeat(lambda: validator.before_request("127.0.0.1:5555", request), number=runs, repeat=3))
        sign = min(timeit.repeat(lambda: signer.before_request("", request), number=runs, repeat=3))
        print(f"body {size:5} B: broker check {check / runs * 1e6:.2f} us, client signing {sign / runs * 1e6:.2f} us")


if __name__ == "__main__":
    main()
