"""Retention: when commit-log files may be deleted, and how full the disk is (doc/wire.md §11).

Pure decisions (:func:`is_time_to_delete`, :func:`check_disk`, :func:`used_ratio`) plus
:class:`Retention`, which a store runs every ``clean_resource_interval`` (10 s): it measures the
disk, then deletes expired commit-log files oldest first, never the newest one.

Above the forcible ratio (85 %) RocketMQ (``clean_file_forcibly_enable``) deletes the oldest files
whatever their age. By default rocketpy deletes there only files every consumer group has read
past, and refuses puts while the oldest file still holds messages some group has not consumed.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from twisted.logger import Logger

from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.mappedfilequeue import MappedFileQueue

_log = Logger()


def local_hour(now_ms: int) -> int:
    """The local hour (0-23) at ``now_ms``."""
    return time.localtime(now_ms / 1000).tm_hour


def is_time_to_delete(delete_when: str, hour: int) -> bool:
    """True when ``hour`` is one of the ``;``-separated hours of ``delete_when`` (e.g. ``"04;16"``)."""
    for item in delete_when.split(";"):
        item = item.strip()
        if item.isdigit() and int(item) == hour:
            return True
    return False


def used_ratio(path: str) -> float:
    """Used share of the partition holding ``path``: used / (used + usable), rounded up to 1 %.

    :returns: a ratio in [0, 1], or -1.0 when the partition cannot be measured.
    """
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1.0
    entire = usage.used + usage.free
    if entire <= 0:
        return -1.0
    return math.ceil(usage.used * 100 / entire) / 100


@dataclass(frozen=True, slots=True)
class DiskCheck:
    """What a measured disk use means.

    :ivar ratio: the highest used ratio of the store's partitions (-1 when unreadable).
    :ivar over_max: above ``disk_max_used_space_ratio`` (or unreadable): delete now, even off-hours.
    :ivar clean_immediately: above the forcible ratio (85 %) with ``clean_file_forcibly_enable``: ignore file age.
    :ivar disk_full: above the warning ratio (90 %): refuse puts.
    :ivar guarded: above the forcible ratio without ``clean_file_forcibly_enable``: delete only
        consumed files, refuse puts while the oldest file holds unconsumed messages.
    """

    ratio: float
    over_max: bool
    clean_immediately: bool
    disk_full: bool
    guarded: bool = False


def check_disk(ratio: float, config: MessageStoreConfig) -> DiskCheck:
    """Classify a used ratio against the store's thresholds."""
    max_used = min(95, max(10, config.disk_max_used_space_ratio)) / 100
    full = ratio > config.disk_space_warning_level_ratio / 100
    forcibly = ratio > config.disk_space_clean_forcibly_ratio / 100
    return DiskCheck(
        ratio=ratio,
        over_max=ratio < 0 or ratio > max_used,
        clean_immediately=config.clean_file_forcibly_enable and (full or forcibly),
        disk_full=full,
        guarded=not config.clean_file_forcibly_enable and (full or forcibly),
    )


#: ``(group, topic, queue_id, committed offset)``.
ConsumerPosition = tuple[str, str, int, int]
#: Per consumer group, the commit-log offset of the oldest message it has not consumed.
Pending = Callable[[], "dict[str, int]"]


class Retention:
    """Deletes expired commit-log files and tracks whether the disk is full.

    :param config: thresholds and ``file_reserved_time``.
    :param now_ms: the clock.
    :param measure: used ratio of a path (default :func:`used_ratio`); tests inject one.
    :param hour_of: local hour of a time in ms (default :func:`local_hour`).
    """

    def __init__(self, config: MessageStoreConfig, now_ms: Callable[[], int],
                 measure: Callable[[str], float] = used_ratio, hour_of: Callable[[int], int] = local_hour) -> None:
        self.config = config
        self.now_ms = now_ms
        self.measure = measure
        self.hour_of = hour_of
        self.disk_full = False
        self.manual_delete_runs = 0
        self.last = DiskCheck(0.0, False, False, False)
        #: groups whose unconsumed messages in the oldest file make the store refuse puts
        self.held_by: list[str] = []

    def check(self, paths: Iterable[str]) -> DiskCheck:
        """Measure the partitions of ``paths`` and update :attr:`disk_full`."""
        ratio, worst = max((self.measure(path), path) for path in paths)
        result = check_disk(ratio, self.config)
        if result.over_max and not self.last.over_max and not result.disk_full:
            _log.warn("disk of {path} {percent:.0f}% used, over the {limit}% limit: expired commit-log files "
                      "are deleted whatever the hour", path=worst, percent=ratio * 100,
                      limit=self.config.disk_max_used_space_ratio)
        if result.disk_full != self.last.disk_full:
            if result.disk_full:
                _log.error("disk of {path} full: {percent:.0f}% used (limit {limit}%), puts are refused",
                           path=worst, percent=ratio * 100, limit=self.config.disk_space_warning_level_ratio)
            else:
                _log.info("disk of {path} no longer full: {percent:.0f}% used", path=worst, percent=ratio * 100)
        self.disk_full = result.disk_full or bool(self.held_by and result.guarded)
        self.last = result
        return result

    def delete_manually(self, runs: int = 20) -> None:
        """Delete expired files on the next ``runs`` runs whatever the hour (RocketMQ's admin command)."""
        self.manual_delete_runs = runs

    def run(self, queue: MappedFileQueue, paths: Iterable[str], pending: Pending = dict) -> int:
        """One clean pass over the commit log ``queue``.

        Deletes when the hour is in ``delete_when``, or the disk is over the max ratio, or a
        manual delete is pending; files older than ``file_reserved_time`` (any age when cleaning
        immediately), at most ``max_delete_files_per_run``, never the newest. When guarded (over
        85 % without ``clean_file_forcibly_enable``), files every group has consumed go whatever
        their age, and puts are refused while the oldest file holds unconsumed messages.

        :param pending: per group, the oldest commit-log offset it has not consumed (asked only
            when guarded).
        :returns: how many files were deleted.
        """
        now = self.now_ms()
        disk = self.check(paths)
        if disk.guarded:
            return self._guarded_run(queue, now, pending())
        self._hold([])
        manual = self.manual_delete_runs > 0
        if manual:
            self.manual_delete_runs -= 1
        if not (is_time_to_delete(self.config.delete_when, self.hour_of(now)) or disk.over_max or manual):
            return 0
        deleted = queue.delete_expired_files_by_time(
            now / 1000, self.config.file_reserved_time * 3600, disk.clean_immediately,
            self.config.max_delete_files_per_run,
        )
        if deleted:
            _log.info("deleted {count} expired commit-log files (disk {percent:.0f}% used)", count=deleted,
                      percent=disk.ratio * 100)
        return deleted

    def _guarded_run(self, queue: MappedFileQueue, now: int, pending: dict[str, int]) -> int:
        """Delete expired files and any file wholly consumed by every group; then refuse puts if
        the oldest file left still holds a group's unconsumed messages."""
        keep_from = min(pending.values(), default=sys.maxsize)  # no group waits: any file may go
        deleted = queue.delete_expired_files_by_time(
            now / 1000, self.config.file_reserved_time * 3600, False, self.config.max_delete_files_per_run,
            consumed_below=keep_from,
        )
        if deleted:
            _log.info("deleted {count} consumed or expired commit-log files (disk {percent:.0f}% used)",
                      count=deleted, percent=self.last.ratio * 100)
        oldest = queue.mapped_files[0] if queue.mapped_files else None
        end = oldest.file_from_offset + oldest.file_size if oldest is not None else 0
        self._hold(sorted(g for g, offset in pending.items() if offset < end))
        return deleted

    def _hold(self, groups: list[str]) -> None:
        """Refuse puts while ``groups`` hold the oldest file back; log when that changes."""
        if groups != self.held_by:
            if groups:
                _log.error(
                    "disk {percent:.0f}% used: the oldest commit-log file holds messages not yet consumed by "
                    "{groups}; puts are refused until they are consumed or the disk frees up "
                    "(--clean-file-forcibly-enable true deletes them, as RocketMQ does)",
                    percent=self.last.ratio * 100, groups=", ".join(groups))
            else:
                _log.info("no consumer group holds the oldest commit-log file back any more")
        self.held_by = groups
        self.disk_full = self.last.disk_full or bool(groups)
