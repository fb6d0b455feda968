"""The name server's KV config: namespace -> key -> value, persisted as JSON.

The file has Java's ``kvConfig.json`` shape, ``{"configTable":{ns:{key:value}}}``,
and is rewritten atomically on every change, by :attr:`KVConfigManager.writer` (the name
server points it at a thread pool: no file I/O on the reactor thread). Putting a value already
stored writes nothing once the file holds it (brokers republish their gRPC endpoints every 30 s).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred, succeed

from rocketpy.common.fastjson import BodyError, dump_json, loads_tolerant
from rocketpy.util.fileio import read_if_exists, write_atomically

class KVConfigManager:
    """In-memory KV tables backed by one JSON file.

    :param path: the JSON file; it need not exist yet.
    :ivar writer: ``(path, data)`` → None or a Deferred: writes the file (a blocking atomic write
        by default; the name server sets a thread-pool writer).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = path
        self._table: dict[str, dict[str, str]] = {}
        #: the newest write started, and whether the file holds the table (the last write succeeded)
        self._writes = 0
        self._saved = True
        self.writer: Callable[[str | os.PathLike[str], bytes], Any] = write_atomically

    def load(self) -> None:
        """Read the file, replacing the in-memory tables; a missing file means empty.

        :raises BodyError: when the file is not a valid KV config.
        """
        data = read_if_exists(self._path)
        table: dict[str, dict[str, str]] = {}
        if data:
            parsed = loads_tolerant(data)
            config = parsed.get("configTable") if isinstance(parsed, dict) else None
            if not isinstance(config, dict) or not all(isinstance(v, dict) for v in config.values()):
                raise BodyError(f"{os.fspath(self._path)}: no configTable object")
            table = {ns: {str(k): str(v) for k, v in kv.items()} for ns, kv in config.items()}
        self._table = table

    def put(self, namespace: str, key: str, value: str) -> Deferred[None]:
        """Set one value and persist; fires once written, fails (``OSError``) when the write
        failed (the value stays set in memory). An unchanged value already in the file writes nothing."""
        kv = self._table.setdefault(namespace, {})
        if self._saved and kv.get(key) == value:
            return succeed(None)
        kv[key] = value
        return self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        """One value, or None."""
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> Deferred[None]:
        """Remove one value (and an emptied namespace) and persist if anything changed; fires
        once written, fails (``OSError``) when the write failed."""
        kv = self._table.get(namespace)
        if kv is None or kv.pop(key, None) is None:
            return succeed(None)
        if not kv:
            del self._table[namespace]
        return self._persist()

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of every key/value of ``namespace``, or None when it is empty."""
        kv = self._table.get(namespace)
        return dict(kv) if kv else None

    def _persist(self) -> Deferred[None]:
        # The snapshot is taken now, on the caller's thread; only the write goes to the writer.
        self._writes += 1
        self._saved = False
        write = self._writes
        written = maybeDeferred(self.writer, self._path, dump_json({"configTable": self._table}))

        def saved(_: object) -> None:
            if write == self._writes:  # no newer write started meanwhile
                self._saved = True

        return written.addCallback(saved)
