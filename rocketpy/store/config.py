"""Store configuration: RocketMQ's ``MessageStoreConfig`` names in snake_case, with its defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
CQ_UNIT_SIZE = 20
#: MessageStoreConfig.sync_flush_completion's values
SYNC_FLUSH_COMPLETIONS = ("native", "uring", "thread")


@dataclass
class MessageStoreConfig:
    """Settings of one message store (RocketMQ's ``MessageStoreConfig``; doc/store.md).

    Times are in seconds (RocketMQ uses milliseconds) except ``file_reserved_time`` (hours, as RocketMQ).
    """

    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_UNIT_SIZE
    max_message_size: int = 4 * 1024 * 1024
    flush_disk_type: str = "ASYNC_FLUSH"  # or "SYNC_FLUSH"
    flush_interval_commit_log: float = 0.5
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: float = 10.0
    flush_interval_consume_queue: float = 1.0
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: float = 60.0
    sync_flush_timeout: float = 5.0
    #: SYNC_FLUSH: how the group commit's fdatasync ends on the reactor, with small puts appended
    #: there (no Python thread hand-off): "native" (a C thread), "uring" (io_uring; "native" where the
    #: kernel refuses it), or "thread"
    #: (the Python flush thread, appends in the writer pool; also where the others do not serve)
    sync_flush_completion: str = "native"
    os_page_cache_busy_timeout: float = 1.0
    commit_log_write_path: str = "auto"  # "mmap", "pwrite", or "auto": pwrite for SYNC_FLUSH, else mmap
    #: bytes of the commit log kept in the page cache behind its flushed offset: older pages that
    #: no reader read lately are dropped, so the kernel reuses them for new ones (reads of them go
    #: to the disk); 0 keeps them all (the kernel evicts as it likes). doc/store.md, "Page cache
    #: behind the flushed position"
    commit_log_page_cache_keep: int = 1 << 30
    page_cache_trail_interval: float = 1.0  # seconds between the drops of those pages
    file_reserved_time: float = 72  # hours
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    #: RocketMQ's rule above 85 %: delete the oldest files whatever their age, consumed or not.
    #: rocketpy's default (False) deletes only files every group has consumed, and refuses puts
    #: while the oldest one still holds unconsumed messages (doc/features.md).
    clean_file_forcibly_enable: bool = False
    clean_resource_interval: float = 10.0
    delete_commit_log_files_interval: float = 0.1
    max_delete_files_per_run: int = 10
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_index_enable: bool = True
    message_index_safe: bool = False  # abnormal recovery also waits for the index checkpoint
    check_crc_on_recover: bool = True
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    #: timer messages (any delivery time, RocketMQ 5): on, their longest delay, their precision
    timer_wheel_enable: bool = True
    timer_max_delay_sec: int = 3 * 24 * 3600
    timer_precision_ms: int = 1000
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    access_message_in_memory_max_ratio: int = 40
    broker_role: str = "ASYNC_MASTER"  # or "SYNC_MASTER", "SLAVE"
    store_host: tuple[str, int] = ("127.0.0.1", 10911)

    def _under_root(self, name: str) -> str:
        return os.path.join(self.store_path_root_dir, name)

    @property
    def commit_log_dir(self) -> str:
        return self._under_root("commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return self._under_root("consumequeue")

    @property
    def index_dir(self) -> str:
        return self._under_root("index")

    @property
    def config_dir(self) -> str:
        return self._under_root("config")

    @property
    def checkpoint_path(self) -> str:
        return self._under_root("checkpoint")

    @property
    def abort_path(self) -> str:
        return self._under_root("abort")

    @property
    def lock_path(self) -> str:
        return self._under_root("lock")

    @property
    def write_path(self) -> str:
        """The commit-log write path in effect: ``"auto"`` means pwrite (cheap fdatasync) for
        SYNC_FLUSH and mmap (cheapest copy) for ASYNC_FLUSH."""
        if self.commit_log_write_path == "auto":
            return "pwrite" if self.flush_disk_type == "SYNC_FLUSH" else "mmap"
        return self.commit_log_write_path

    @property
    def consume_queue_file_size(self) -> int:
        """``mapped_file_size_consume_queue`` rounded up to a whole number of 20-byte entries."""
        return -(-self.mapped_file_size_consume_queue // CQ_UNIT_SIZE) * CQ_UNIT_SIZE

    def delay_level_table(self) -> list[int]:
        """Delay of each level in ms (level L at index L-1), parsed from ``message_delay_level``."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        return [int(item[:-1]) * units[item[-1]] for item in self.message_delay_level.split()]
