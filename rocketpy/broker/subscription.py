"""Consumer group settings (``SubscriptionGroupManager``), kept in ``subscriptionGroup.json``."""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IReactorTime

from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.common.topic import DataVersion, topic_problem
from rocketpy.util.configfile import JsonConfigFile

#: Groups every Java broker knows (``SubscriptionGroupManager.init``).
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_SYS_RMQ_TRANS",
)
#: System groups that do not consume in broadcasting mode.
_NO_BROADCAST = frozenset(SYSTEM_GROUPS[3:])


class SubscriptionGroupManager(JsonConfigFile):
    """All consumer groups of one broker, created on first use when allowed.

    :param clock: gives the data-version timestamps.
    :param path: ``subscriptionGroup.json``; None keeps the table in memory only.
    :param auto_create: create unknown (validly named) groups on lookup.
    """

    data_version: DataVersion

    def __init__(self, clock: IReactorTime, path: str | None = None, auto_create: bool = True) -> None:
        self._clock = clock
        self.path = path
        self._auto_create = auto_create
        self.data_version = DataVersion(0, self._now_ms())
        self._table: dict[str, SubscriptionGroupConfig] = {
            name: SubscriptionGroupConfig(name, consume_broadcast_enable=name not in _NO_BROADCAST)
            for name in SYSTEM_GROUPS
        }

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    def find_subscription_group_config(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created (and persisted) when absent and auto-create is on.

        :return: None for an unknown group when auto-create is off or the name is invalid.
        """
        config = self._table.get(group)
        if config is None and self._auto_create and topic_problem(group) is None:
            config = SubscriptionGroupConfig(group)
            self.log.info("created subscription group {group}", group=group)
            self._put(config)
        return config

    def update_subscription_group_config(self, config: SubscriptionGroupConfig) -> None:
        """Create or replace a group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""
        self._put(config)

    def delete_subscription_group_config(self, group: str) -> bool:
        """Remove ``group``; True when it existed."""
        if self._table.pop(group, None) is None:
            return False
        self.data_version.bump(self._now_ms())
        self.persist()
        return True

    def groups(self) -> dict[str, SubscriptionGroupConfig]:
        """A snapshot of the table (name → config)."""
        return dict(self._table)

    def _put(self, config: SubscriptionGroupConfig) -> None:
        self._table[config.group_name] = config
        self.data_version.bump(self._now_ms())
        self.persist()

    def to_json(self) -> dict[str, Any]:
        """``{"dataVersion":…,"subscriptionGroupTable":…}`` (file and admin body)."""
        return {
            "dataVersion": self.data_version.to_json(),
            "subscriptionGroupTable": {name: c.to_json() for name, c in self._table.items()},
        }

    def replace_json(self, obj: dict[str, Any]) -> None:
        """The master's table (Java 5's slave sync): groups it lacks are deleted."""
        kept = (obj.get("subscriptionGroupTable") or {}).keys()
        for name in [name for name in self._table if name not in kept]:
            del self._table[name]
        self.apply_json(obj)

    def apply_json(self, obj: dict[str, Any]) -> None:
        table = obj.get("subscriptionGroupTable") or {}
        loaded = {name: SubscriptionGroupConfig.from_json(name, value) for name, value in table.items()}
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self._table.update(loaded)
