"""The ACL management requests' values (Java's ``PlainAccessConfig`` and ``AclConfig``), as the broker
sends them in GET_BROKER_CLUSTER_ACL_CONFIG and the admin client reads them; no YAML here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketpy.common.topic import DataVersion


class AclConfigError(ValueError):
    """A ``plain_acl.yml``, or a change to one, that cannot be used (the message says why)."""


def split_list(text: str | None) -> list[str] | None:
    """A header's comma-separated list (``topicA=PUB,topicB=SUB``); None stays None, blanks are dropped."""
    if text is None:
        return None
    return [item.strip() for item in text.split(",") if item.strip()]


def split_patterns(text: str) -> list[str]:
    """Address patterns separated by commas, a comma inside ``{…}`` kept (``192.168.0.{1,2},10.*.*.*``
    is two patterns; Java cuts at every comma)."""
    patterns: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "," and depth == 0:
            patterns.append("".join(current))
            current = []
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        current.append(char)
    patterns.append("".join(current))
    return [pattern.strip() for pattern in patterns if pattern.strip()]


def text_or_none(value: Any) -> str | None:
    """A YAML or JSON scalar as text (Java binds numbers to String fields so)."""
    return None if value is None else str(value)


def _texts(value: Any) -> list[str] | None:
    return [str(item) for item in value] if isinstance(value, list) else None


def is_true(value: Any) -> bool:
    """A YAML or JSON ``admin`` flag: ``true`` or the text ``true`` (any case)."""
    return value is True or str(value).lower() == "true"


@dataclass
class AccessConfig:
    """One account (``accounts`` entry of ``plain_acl.yml``)."""

    access_key: str | None = None
    secret_key: str | None = None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: list[str] | None = None
    group_perms: list[str] | None = None

    def java_fields(self) -> dict[str, Any]:
        """Java's field names in its order, absent values None."""
        return {"accessKey": self.access_key, "secretKey": self.secret_key,
                "whiteRemoteAddress": self.white_remote_address, "admin": self.admin,
                "defaultTopicPerm": self.default_topic_perm, "defaultGroupPerm": self.default_group_perm,
                "topicPerms": self.topic_perms, "groupPerms": self.group_perms}

    def to_json(self) -> dict[str, Any]:
        """Absent values left out, as fastjson leaves out nulls."""
        return {key: value for key, value in self.java_fields().items() if value is not None}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AccessConfig:
        """From a JSON body or a ``plain_acl.yml`` entry (values coerced as Java's binding does)."""
        text = text_or_none
        return cls(text(obj.get("accessKey")), text(obj.get("secretKey")), text(obj.get("whiteRemoteAddress")),
                   is_true(obj.get("admin")), text(obj.get("defaultTopicPerm")), text(obj.get("defaultGroupPerm")),
                   _texts(obj.get("topicPerms")), _texts(obj.get("groupPerms")))


@dataclass
class AclConfig:
    """The whole ACL of a broker (GET_BROKER_CLUSTER_ACL_CONFIG's body)."""

    global_white_addrs: list[str] = field(default_factory=list)
    accounts: list[AccessConfig] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"globalWhiteAddrs": self.global_white_addrs,
                "plainAccessConfigs": [account.to_json() for account in self.accounts]}

    @classmethod
    def from_json(cls, obj: Any) -> AclConfig:
        """:raises ValueError: *obj* is not such an object."""
        if not isinstance(obj, dict):
            raise ValueError("an ACL config must be a JSON object")
        white, accounts = obj.get("globalWhiteAddrs") or [], obj.get("plainAccessConfigs") or []
        if not isinstance(white, list) or not isinstance(accounts, list) \
                or not all(isinstance(a, dict) for a in accounts):
            raise ValueError("globalWhiteAddrs and plainAccessConfigs must be lists")
        return cls([str(w) for w in white], [AccessConfig.from_json(a) for a in accounts])


@dataclass
class AclVersionInfo:
    """GET_BROKER_CLUSTER_ACL_INFO's answer: which broker, and the version of its ACL file(s)."""

    cluster_name: str
    broker_name: str
    broker_addr: str
    version: DataVersion
    #: ACL file path → its version (one file on rocketpy)
    file_versions: dict[str, DataVersion]
