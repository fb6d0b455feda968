"""The JSON config files the broker's managers persist under ``<store>/config`` (Java ``ConfigManager``)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.logger import Logger, LogLevel

from rocketpy.common.fastjson import dump_json
from rocketpy.common.topic import DataVersion
from rocketpy.util.fileio import read_if_exists, write_atomically


class ConfigFileError(Exception):
    """A broker config file (``topics.json`` …) exists but cannot be read."""


class JsonConfigFile(ABC):
    """A table kept in one JSON file under ``<store>/config`` (Java ``ConfigManager``).

    Subclasses give :meth:`to_json` and :meth:`apply_json`. :meth:`persist` snapshots
    the table (on the caller's thread) and hands the bytes to :attr:`writer`: a blocking
    atomic write by default, the broker's config thread pool once the controller sets it.

    :ivar path: the file; None keeps the table in memory only.
    :ivar writer: ``(path, data)`` → None or a Deferred; the broker keeps file I/O off the reactor.
    """

    log = Logger()
    path: str | None = None
    #: the table's version, for tables that keep one (topics, subscription groups)
    data_version: DataVersion | None = None
    writer: Callable[[str, bytes], Any] = staticmethod(write_atomically)

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The whole table as a JSON object."""

    @abstractmethod
    def apply_json(self, obj: dict[str, Any]) -> None:
        """Merge a loaded JSON object into the table.

        :raises ValueError: or ``TypeError`` / ``AttributeError`` when it is malformed.
        """

    def replace_json(self, obj: dict[str, Any]) -> None:
        """Take a master's copy of the table (a slave's sync): as :meth:`apply_json` unless the
        table drops what the copy lacks."""
        self.apply_json(obj)

    def encode(self) -> bytes:
        """:meth:`to_json` as bytes."""
        return dump_json(self.to_json())

    def persist(self) -> Deferred[None]:
        """Write a snapshot of the table; fires once written. A failure is logged, not raised."""
        if self.path is None:
            return succeed(None)
        path = self.path
        d: Deferred[None] = maybeDeferred(self.writer, path, self.encode())
        d.addErrback(lambda f: self.log.failure("cannot write {path}", f, level=LogLevel.error, path=path))
        return d

    def load(self) -> None:
        """Merge the file's content into the table; a missing or empty file is no change.

        :raises ConfigFileError: when the file exists but is malformed.
        """
        if self.path is None:
            return
        data = read_if_exists(self.path)
        if data is None or not data.strip():
            return
        try:
            obj = json.loads(data)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            self.apply_json(obj)
        except (TypeError, ValueError, AttributeError) as e:
            raise ConfigFileError(f"{self.path}: {e}") from None
