"""``plain_acl.yml`` and the access check of Java's ``PlainPermissionManager``.

A refused request raises :class:`AclRefused` with Java's message; the remoting layer
answers it SYSTEM_ERROR (1) with Java's remark, ``org.apache.rocketmq.acl.common.AclException: …``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from hmac import compare_digest
from typing import Any

import yaml

from rocketpy.acl.addresses import AddressPatternError, Matcher, address_matcher
from rocketpy.acl.config import AccessConfig, AclConfig, AclConfigError, is_true, text_or_none
from rocketpy.acl.signing import Signer
from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX, DataVersion, retry_topic
from rocketpy.remoting.errors import RequestRefused

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"

# Java's Permission bits
DENY, ANY, PUB, SUB = 1, 2, 4, 8
_PERMS = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}
_MIN_KEY_LENGTH = 6  # keys must be longer than this


class AclRefused(RequestRefused):
    """A request the ACL refuses; ``message`` is Java's ``AclException`` message."""

    def __init__(self, message: str) -> None:
        super().__init__(f"org.apache.rocketmq.acl.common.AclException: {message}")
        self.message = message


class AclForbidden(AclRefused):
    """A known, correctly signed sender without the permission (the rest of :class:`AclRefused`
    is about who sends: no key, unknown key, bad signature)."""


def parse_perm(text: Any) -> int:
    """``PUB``, ``SUB``, ``PUB|SUB`` … as bits; anything else (or nothing) is DENY, as in Java."""
    return _PERMS.get(str(text).strip(), DENY) if text is not None else DENY


def check_permission(needed: int, owned: int) -> bool:
    """Java's ``Permission.checkPermission``."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def describe(resource: str) -> str:
    """Java's ``PlainAccessResource.printStr``: ``group:G`` for a retry topic, else ``topic:T``."""
    if resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return f"group:{resource[len(RETRY_GROUP_TOPIC_PREFIX):]}"
    return f"topic:{resource}"


@dataclass(frozen=True)
class Account:
    """One entry of ``accounts``; ``perms`` maps topics and ``%RETRY%group`` to permission bits."""

    access_key: str
    secret_key: str
    white_address: Matcher
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    perms: Mapping[str, int] | None = None
    signer: Signer = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "signer", Signer(self.secret_key))


@dataclass(frozen=True)
class PlainAcl:
    """A parsed ``plain_acl.yml``: the matchers and accounts the check uses, the file's values as
    written (``config``, for GET_BROKER_CLUSTER_ACL_CONFIG) and its ``dataVersion``."""

    global_white: tuple[Matcher, ...] = ()
    accounts: Mapping[str, Account] = field(default_factory=dict)
    config: AclConfig = field(default_factory=AclConfig)
    version: DataVersion = field(default_factory=DataVersion)


def _resource_perms(account: Mapping[str, Any], key: str, is_topic: bool, perms: dict[str, int]) -> None:
    items = account.get(key) or []
    if not isinstance(items, list):
        raise AclConfigError(f"{key} of accessKey {account.get('accessKey')} must be a list like ['Name=PUB']")
    for item in items:
        parts = [p for p in str(item).split("=") if p]
        if len(parts) != 2:
            kind = "topic" if is_topic else "group"
            raise AclConfigError(f"Parse resource permission failed for {kind}:{item}")
        name = parts[0].strip()
        perms[name if is_topic else retry_topic(name)] = parse_perm(parts[1])


def check_keys(access_key: str | None, secret_key: str | None) -> None:
    """Java's ``checkPlainAccessConfig``: both keys longer than 6 characters.

    :raises AclConfigError: with Java's message (but the secret key's length in place of the key).
    """
    if access_key is None or secret_key is None or len(access_key) <= _MIN_KEY_LENGTH \
            or len(secret_key) <= _MIN_KEY_LENGTH:
        secret = None if secret_key is None else f"({len(secret_key)} characters)"  # Java prints it; we do not
        raise AclConfigError(f"The accessKey={access_key} and secretKey={secret} cannot be null and "
                             f"length should longer than 6")


def _account(entry: Any) -> Account:
    if not isinstance(entry, dict):
        raise AclConfigError(f"an account must be a mapping, not {entry!r}")
    access_key, secret_key = text_or_none(entry.get("accessKey")), text_or_none(entry.get("secretKey"))
    check_keys(access_key, secret_key)
    assert access_key is not None and secret_key is not None
    perms: dict[str, int] = {}
    _resource_perms(entry, "groupPerms", False, perms)
    _resource_perms(entry, "topicPerms", True, perms)
    try:
        white = address_matcher(text_or_none(entry.get("whiteRemoteAddress")))
    except AddressPatternError as e:
        raise AclConfigError(f"whiteRemoteAddress of accessKey {access_key}: {e}") from None
    return Account(
        access_key, secret_key, white, is_true(entry.get("admin")),
        parse_perm(entry.get("defaultTopicPerm")), parse_perm(entry.get("defaultGroupPerm")),
        perms or None,  # as Java: no map at all when no resource is listed
    )


def data_version(data: Mapping[str, Any], default_timestamp: int) -> DataVersion:
    """The file's ``dataVersion: [{counter: N, timestamp: MS}]``; counter 0 when absent or unreadable."""
    versions = data.get("dataVersion")
    if isinstance(versions, list) and versions and isinstance(versions[0], dict):
        try:
            return DataVersion(int(versions[0].get("counter", 0)), int(versions[0].get("timestamp", 0)))
        except (TypeError, ValueError):
            pass
    return DataVersion(0, default_timestamp)


def parse_acl(text: str, default_timestamp: int = 0) -> PlainAcl:
    """Parse the text of a ``plain_acl.yml``.

    :param default_timestamp: the version's timestamp (ms) when the file has no ``dataVersion``.
    :raises AclConfigError: for YAML errors, bad keys, perms or address patterns.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AclConfigError(f"not valid YAML: {e}") from None
    if data is None:
        return PlainAcl(version=DataVersion(0, default_timestamp))
    if not isinstance(data, dict):
        raise AclConfigError("the file must be a mapping with globalWhiteRemoteAddresses and accounts")
    white = data.get("globalWhiteRemoteAddresses") or []
    accounts = data.get("accounts") or []
    if not isinstance(white, list) or not isinstance(accounts, list):
        raise AclConfigError("globalWhiteRemoteAddresses and accounts must be lists")
    try:
        matchers = tuple(address_matcher(text_or_none(pattern)) for pattern in white)
    except AddressPatternError as e:
        raise AclConfigError(f"globalWhiteRemoteAddresses: {e}") from None
    by_key: dict[str, Account] = {}
    configs: list[AccessConfig] = []
    for entry in accounts:
        account = _account(entry)
        if account.access_key not in by_key:  # Java keeps the first of a repeated key
            by_key[account.access_key] = account
            configs.append(AccessConfig.from_json(entry))
    config = AclConfig([str(pattern) for pattern in white if pattern is not None], configs)
    return PlainAcl(matchers, by_key, config, data_version(data, default_timestamp))


def check_access(
    acl: PlainAcl, host: str, code: int, access_key: str | None, signature: str | None,
    content: Sequence[bytes] | None, needs: Callable[[], Mapping[str, int]], admin_codes: frozenset[int],
) -> None:
    """Java's ``PlainPermissionManager.validate``.

    :param host: the remote IP address.
    :param content: the parts of the signed content rebuilt from the received request (fields, body).
    :param needs: topic or ``%RETRY%group`` → the permission the request needs; called only once
        the signature is good (Java parses first: a body is read only for known senders here).
    :raises AclRefused: with Java's message.
    """
    for white in acl.global_white:
        if white(host):
            return
    if access_key is None:
        raise AclRefused("No accessKey is configured")
    owned = acl.accounts.get(access_key)
    if owned is None:
        raise AclRefused(f"No acl config for {access_key}")
    if owned.white_address(host):
        return
    if content is None or signature is None or not compare_digest(  # constant time: no timing oracle
            signature.encode("utf-8", "surrogatepass"), owned.signer.sign(*content).encode("ascii")):
        raise AclRefused(f"Check signature failed for accessKey={access_key}")
    resources = needs()
    if resources.get(TRACE_TOPIC) == PUB:
        return
    if code in admin_codes and not owned.admin:
        raise AclForbidden(f"Need admin permission for request code={code}, but accessKey={access_key} is not")
    if not resources or (owned.perms is None and owned.admin):
        return
    for resource, needed in resources.items():
        if owned.perms is None or resource not in owned.perms:
            default = owned.default_group_perm if resource.startswith(RETRY_GROUP_TOPIC_PREFIX) else owned.default_topic_perm
            allowed = check_permission(needed, default)
        else:
            allowed = check_permission(needed, owned.perms[resource])
        if not allowed:
            raise AclForbidden(f"No default permission for {describe(resource)}")
