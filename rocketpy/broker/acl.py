"""The broker's ACL hook: Java's ``PlainAccessValidator`` (which resource each request needs) in front
of :func:`~rocketpy.acl.plain.check_access` (the broker's side of :mod:`rocketpy.acl`: it reads
broker request bodies)."""

from __future__ import annotations

import json

from zope.interface import implementer

from rocketpy.acl.addresses import host_of
from rocketpy.acl.plain import PUB, SUB, AclRefused, PlainAcl, check_access
from rocketpy.acl.signing import ACCESS_KEY, SIGNATURE, UNIQUE_KEY_QUERY, signed_fields
from rocketpy.broker.heartbeat import parse_heartbeat
from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX, retry_topic
from rocketpy.interfaces import IRPCHook
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand

#: Codes that need ``admin: true`` (Java's ``Permission.ADMIN_CODE``), and the ACL management codes: 5.2 asks
#: admin of 50-52, 4.9 of none (any signed account could rewrite the ACL); 53 and 54 (the whitelist, the
#: secret keys) need it here too.
ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, RequestCode.DELETE_ACL_CONFIG, RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
    RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
})
_LEFT_OUT = (SIGNATURE, UNIQUE_KEY_QUERY)
#: SEND_BATCH_MESSAGE as RocketMQ 5 checks it (4.9 forgot it: any signed batch went through), and the
#: reply sends (4.9 forgot them too: a signed client could store a reply on any topic).
_SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
               RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)


def _is_retry(topic: str | None) -> bool:
    return topic is not None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def _add(resources: dict[str, int], resource: str | None, perm: int) -> None:
    if resource is not None:
        resources[resource] = perm


def _group(resources: dict[str, int], group: str | None) -> None:
    if group is not None:
        resources[retry_topic(group)] = SUB


def needed_resources(request: RemotingCommand) -> dict[str, int]:
    """Topic or ``%RETRY%group`` → the permission *request* needs, by request code.

    :raises AclRefused: a HEART_BEAT body that cannot be read.
    """
    fields, code = request.ext_fields, request.code
    resources: dict[str, int] = {}
    if code in _SEND_CODES:
        # The topic the broker will store to: its header parser reads "b" first, then "topic", for
        # every send code (Java reads "topic" for code 10 and "b" for 310/320; reading another key
        # than the broker would let a request be checked for one topic and stored in another).
        topic = fields.get("b")
        if topic is None:
            topic = fields.get("topic")
        # a retry topic (a consumer re-sending) needs SUB on the group it names, as Java asks of the
        # header's group (which, for code 10, Java reads from a "group" key no client sends)
        _add(resources, topic, SUB if _is_retry(topic) else PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        _group(resources, fields.get("group"))
    elif code == RequestCode.PULL_MESSAGE:
        _add(resources, fields.get("topic"), SUB)
        _group(resources, fields.get("consumerGroup"))
    elif code == RequestCode.QUERY_MESSAGE:
        _add(resources, fields.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        try:
            heartbeat = parse_heartbeat(request.body)
        except Exception as e:  # HeartbeatError, RecursionError of a hostile body …
            raise AclRefused(f"cannot read the heartbeat body: {e}") from None
        for consumer in heartbeat.consumers:
            _group(resources, consumer.group_name)
            for subscription in consumer.subscriptions:
                _add(resources, subscription.topic, SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        _group(resources, fields.get("consumerGroup"))
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        _group(resources, fields.get("consumerGroup"))
        _add(resources, fields.get("topic"), SUB)
    elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):  # not in Java 4.9: issue 13 asks
        _group(resources, _lock_group(request.body))
    return resources


def _lock_group(body: bytes) -> str | None:
    """The ``consumerGroup`` of a lock body; None when unreadable (the processor then refuses it)."""
    try:
        group = json.loads(body).get("consumerGroup")
    except Exception:  # not JSON, not an object, nested too deeply …
        return None
    return group if isinstance(group, str) else None


@implementer(IRPCHook)
class PlainAccessValidator:
    """Checks every request the broker receives against :attr:`acl` (replaced on reload)."""

    def __init__(self, acl: PlainAcl) -> None:
        self.acl = acl

    def use(self, acl: PlainAcl) -> None:
        """Check against *acl* from now on (the file watcher's callback)."""
        self.acl = acl

    def before_request(self, remote_address: str, request: RemotingCommand) -> None:
        fields = request.ext_fields
        check_access(
            self.acl, host_of(remote_address), request.code, fields.get(ACCESS_KEY), fields.get(SIGNATURE),
            (signed_fields(fields, _LEFT_OUT), request.body) if fields else None,
            lambda: needed_resources(request), ADMIN_CODES,
        )

    def after_response(self, remote_address: str, request: RemotingCommand, response: RemotingCommand) -> None:
        pass
