"""Which of the commit log's pages behind its flushed offset to drop from the page cache.

doc/store.md, "Page cache behind the flushed position": pages more than ``keep`` bytes behind
the flushed offset are dropped, by aligned chunks, unless a reader read their chunk within
:data:`READ_HOLD` seconds (a consumer replaying old messages keeps them cached); a held chunk
goes when its reads stop, and a dropped one read again is held, then dropped again.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

#: bytes per chunk: pages are dropped, and reads noted, by aligned chunks of this size
CHUNK = 4 << 20
#: seconds a chunk behind the line stays cached after its last read
READ_HOLD = 60.0


class PageCacheTrail:
    """The drop decisions for one log: readers note where they read (any thread, one dict store),
    :meth:`advance` decides and drops (one thread at a time: the store's flush thread).

    :param keep: bytes kept behind the flushed offset; 0 or less: nothing is dropped.
    :param drop: ``(start, end)`` drops the log's pages of that absolute byte range.
    :param clock: monotonic seconds (tests inject one).
    :param chunk: bytes per chunk, a power of two (default :data:`CHUNK`).
    """

    def __init__(self, keep: int, drop: Callable[[int, int], None],
                 clock: Callable[[], float] = time.monotonic, chunk: int | None = None) -> None:
        chunk = CHUNK if chunk is None else chunk
        if chunk <= 0 or chunk & (chunk - 1):
            raise ValueError(f"chunk must be a power of two, not {chunk}")
        self.keep = keep
        self._drop = drop
        self._clock = clock
        self._shift = chunk.bit_length() - 1
        self._line = 0  # every chunk below it was dropped or is held
        self._held: set[int] = set()  # chunks below the line kept for their reads
        #: chunk -> when a reader last read it (written by readers on any thread)
        self._read_at: dict[int, float] = {}
        self._advancing = threading.Lock()

    def note_read(self, offset: int) -> None:
        """A reader read the log at ``offset``."""
        if self.keep > 0:
            self._read_at[offset >> self._shift] = self._clock()

    def advance(self, flushed: int, lowest: int) -> int:
        """Drop the chunks wholly more than ``keep`` behind ``flushed`` that nobody read lately,
        and the held ones whose reads stopped; ``lowest`` is the log's first offset (files below
        it are gone). Returns the bytes it asked to drop. Blocking: the flush thread's."""
        if self.keep <= 0 or not self._advancing.acquire(False):
            return 0
        try:
            return self._advance(flushed, lowest)
        finally:
            self._advancing.release()

    def _advance(self, flushed: int, lowest: int) -> int:
        now = self._clock()
        read_at = dict(self._read_at)  # a copy: readers add to it meanwhile
        for chunk, when in read_at.items():
            if now - when >= READ_HOLD:
                self._read_at.pop(chunk, None)  # a read racing this pop only gets dropped sooner
        first = lowest >> self._shift
        line = (flushed - self.keep) >> self._shift

        def cold(chunk: int) -> bool:
            return now - read_at.get(chunk, -math.inf) >= READ_HOLD

        held = self._held
        held.update(c for c in read_at if first <= c < self._line)  # dropped, read back in
        drops = [c for c in held if c < first or cold(c)]
        held.difference_update(drops)
        for chunk in range(max(self._line, first), line):
            if cold(chunk):
                drops.append(chunk)
            else:
                held.add(chunk)
        self._line = max(self._line, line)
        return self._drop_chunks(sorted(c for c in drops if c >= first))

    def _drop_chunks(self, chunks: list[int]) -> int:
        """Drop sorted ``chunks``, one call per run of adjacent ones."""
        dropped = 0
        i = 0
        while i < len(chunks):
            j = i + 1
            while j < len(chunks) and chunks[j] == chunks[j - 1] + 1:
                j += 1
            start, end = chunks[i] << self._shift, (chunks[j - 1] + 1) << self._shift
            self._drop(start, end)
            dropped += end - start
            i = j
        return dropped
