"""Tests for retention: delete hours, disk thresholds, expired commit-log files and following queues."""

from __future__ import annotations

import os

from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.retention import Retention, check_disk, is_time_to_delete, used_ratio
from rocketpy.store.status import GetMessageStatus
from tests.logs import assert_logs
from tests.store.test_commitlog import SIZE, T0, FakeClock, message, put_ok, small_config

HOUR_MS = 3_600_000


class DecisionTests(SynchronousTestCase):
    def test_delete_hours(self) -> None:
        """Deletion runs during any hour of the ``;``-separated list, and only then."""
        self.assertTrue(is_time_to_delete("04", 4))
        self.assertFalse(is_time_to_delete("04", 5))
        self.assertTrue(is_time_to_delete("04;16", 16))
        self.assertFalse(is_time_to_delete("", 0))

    def test_thresholds(self) -> None:
        """75 % allows deleting off-hours, 85 % ignores file age (RocketMQ's rule) or guards unconsumed
        files (rocketpy's default), 90 % refuses puts."""
        for forcibly in (True, False):
            config = MessageStoreConfig(clean_file_forcibly_enable=forcibly)
            flags = [(d.over_max, d.clean_immediately, d.guarded, d.disk_full)
                     for d in (check_disk(r, config) for r in (0.5, 0.8, 0.86, 0.91, -1.0))]
            self.assertEqual(flags, [(False, False, False, False), (True, False, False, False),
                                     (True, forcibly, not forcibly, False), (True, forcibly, not forcibly, True),
                                     (True, False, False, False)])

    def test_max_ratio_clamped(self) -> None:
        """disk_max_used_space_ratio is clamped to 10–95 %, and forcible cleaning can be switched off."""
        self.assertTrue(check_disk(0.2, MessageStoreConfig(disk_max_used_space_ratio=1)).over_max)
        self.assertFalse(check_disk(0.96, MessageStoreConfig(disk_max_used_space_ratio=99,
                                                             disk_space_warning_level_ratio=97)).disk_full)
        self.assertFalse(check_disk(0.88, MessageStoreConfig(clean_file_forcibly_enable=False)).clean_immediately)

    def test_used_ratio(self) -> None:
        """The used ratio of a real partition is a whole percentage in (0, 1]; a missing path is -1."""
        ratio = used_ratio(os.getcwd())
        self.assertTrue(0 < ratio <= 1)
        self.assertAlmostEqual(ratio * 100, round(ratio * 100))
        self.assertEqual(used_ratio(os.path.join(self.mktemp(), "missing")), -1.0)


class StoreFixture(SynchronousTestCase):
    """A real store with four 64 KiB commit-log files aged 100, 90, 80 and 1 h; disk use and hour injected."""

    def setUp(self) -> None:
        self.clock = FakeClock(T0)
        self.config = small_config(self.mktemp())
        self.store = MessageStore(self.config, self.clock, total_memory=1 << 30)
        self.addCleanup(self.store.shutdown)
        self.assertTrue(self.store.load())
        self.store.start()
        self.usage = 0.5
        self.hour = 12
        self.store.retention.measure = lambda path: self.usage
        self.store.retention.hour_of = lambda now_ms: self.hour
        while len(self.store.commit_log.queue.mapped_files) < 4:
            put_ok(self, self.store, message("T", os.urandom(900)))
        files = self.store.commit_log.queue.mapped_files
        self.paths = [mf.path for mf in files]
        for mf, age_h in zip(files, [100, 90, 80, 1]):
            stamp = (T0 - age_h * HOUR_MS) / 1000
            os.utime(mf.path, (stamp, stamp))


class StoreRetentionTests(StoreFixture):
    """Retention on a real store with 64 KiB commit-log files."""

    def test_only_at_delete_hour(self) -> None:
        """Old files stay outside the delete hour and go at it, oldest first, never the newest."""
        self.assertEqual(self.store.clean_expired_files(), 0)
        self.hour = 4
        self.assertEqual(self.store.clean_expired_files(), 3)
        self.assertEqual([os.path.exists(p) for p in self.paths], [False, False, False, True])
        self.assertEqual(self.store.min_physical_offset, 3 * SIZE)

    def test_young_file_stops_the_walk(self) -> None:
        """A file younger than file_reserved_time stops deletion, even if older ones follow."""
        os.utime(self.paths[1], (T0 / 1000, T0 / 1000))
        self.hour = 4
        self.assertEqual(self.store.clean_expired_files(), 1)
        self.assertTrue(os.path.exists(self.paths[2]))

    def test_disk_pressure(self) -> None:
        """Over the max ratio old files go off-hours; over 85 % with clean_file_forcibly_enable even young
        files go (but never the newest), consumed or not."""
        self.config.clean_file_forcibly_enable = True
        self.config.file_reserved_time = 85
        self.usage = 0.80
        self.assertEqual(self.store.clean_expired_files(), 2)
        self.usage = 0.86
        self.assertEqual(self.store.clean_expired_files(), 1)
        self.assertEqual([os.path.exists(p) for p in self.paths], [False, False, False, True])

    def test_manual_delete(self) -> None:
        """A manual delete request cleans expired files whatever the hour, for the requested runs."""
        self.store.retention.delete_manually(runs=1)
        self.config.max_delete_files_per_run = 1
        self.assertEqual(self.store.clean_expired_files(), 1)
        self.assertEqual(self.store.clean_expired_files(), 0)

    def test_queues_follow(self) -> None:
        """Reads below the new minimum are refused; consume-queue files wholly below it are deleted."""
        cq = self.store.consume_queues.get("T", 0)
        assert cq is not None
        cq_files_before = len(cq.files.mapped_files)
        self.hour = 4
        self.store.clean_expired_files()
        self.assertLess(len(cq.files.mapped_files), cq_files_before)
        low = self.store.get_min_offset_in_queue("T", 0)
        self.assertGreater(low, 0)
        self.assertEqual(self.store.get_message("g", "T", 0, 0, 1).status, GetMessageStatus.OFFSET_TOO_SMALL)
        found = self.store.get_message("g", "T", 0, low, 1)
        self.assertEqual(found.status, GetMessageStatus.FOUND)
        self.assertIsNone(self.store.look_message_by_offset(0))


class GuardedRetentionTests(StoreFixture):
    """rocketpy's default above 85 %: only files every group has consumed go; otherwise puts are refused."""

    def setUp(self) -> None:
        super().setUp()
        self.config.file_reserved_time = 200  # nothing is expired by age
        self.usage = 0.87
        cq = self.store.consume_queues.get("T", 0)
        assert cq is not None
        self.end = cq.max_offset

    def first_in_file(self, index: int) -> int:
        """The queue offset of the first message stored in commit-log file ``index``."""
        cq = self.store.consume_queues.get("T", 0)
        assert cq is not None
        return next(i for i in range(self.end) if cq.get_entry(i)[0] >= index * SIZE)  # type: ignore[index]

    def test_unconsumed_oldest_file_refuses_puts(self) -> None:
        """A group behind in the oldest file: nothing is deleted, puts are refused, the group is named."""
        with assert_logs(self, "rocketpy.store.retention", LogLevel.error) as logs:
            self.assertEqual(self.store.clean_expired_files([("G1", "T", 0, 0), ("G2", "T", 0, self.end)]), 0)
        self.assertEqual(self.store.retention.held_by, ["G1"])
        self.assertIn("not yet consumed by G1;", logs[0])
        self.assertTrue(all(os.path.exists(p) for p in self.paths))
        self.assertEqual(self.store.put_message(message("T", b"x")).status.name, "SERVICE_NOT_AVAILABLE")

    def test_consumed_files_go_then_puts_resume(self) -> None:
        """Files every group has read past go whatever their age; once the group reaches the end the rest
        goes too (never the newest) and puts are accepted again."""
        behind = [("G1", "T", 0, self.first_in_file(2))]
        with assert_logs(self, "rocketpy.store.retention", LogLevel.error):
            self.assertEqual(self.store.clean_expired_files(behind), 2)
        self.assertEqual([os.path.exists(p) for p in self.paths], [False, False, True, True])
        self.assertEqual(self.store.retention.held_by, ["G1"])
        self.assertFalse(self.store.is_writable())
        self.assertEqual(self.store.clean_expired_files([("G1", "T", 0, self.end)]), 1)
        self.assertEqual((self.store.retention.held_by, self.store.is_writable()), ([], True))
        put_ok(self, self.store, message("T", b"again"))

    def test_no_groups_is_rocketmq_rule(self) -> None:
        """With no committed offsets nothing is held back: young files go as with RocketMQ's rule."""
        self.assertEqual(self.store.clean_expired_files(), 3)
        self.assertTrue(self.store.is_writable())

    def test_below_85_percent_no_guard(self) -> None:
        """Under the forcible ratio a group behind changes nothing: no deletion of young files, puts accepted."""
        self.usage = 0.80
        self.assertEqual(self.store.clean_expired_files([("G1", "T", 0, 0)]), 0)
        self.assertEqual(self.store.retention.held_by, [])
        put_ok(self, self.store, message("T", b"fine"))

    def test_forcibly_enabled(self) -> None:
        """--clean-file-forcibly-enable true restores RocketMQ's rule: unconsumed young files go."""
        self.config.clean_file_forcibly_enable = True
        self.assertEqual(self.store.clean_expired_files([("G1", "T", 0, 0)]), 3)
        self.assertTrue(self.store.is_writable())


class RetentionUnitTests(SynchronousTestCase):
    def test_disk_full_flag_follows_measure(self) -> None:
        """The disk-full flag is set above 90 % and cleared when use falls again."""
        usage = [0.95]
        retention = Retention(MessageStoreConfig(), lambda: T0, lambda path: usage[0])
        with assert_logs(self, "rocketpy.store.retention", LogLevel.error):
            retention.check(["/"])
        self.assertTrue(retention.disk_full)
        usage[0] = 0.6
        retention.check(["/"])
        self.assertFalse(retention.disk_full)

    def test_disk_warnings_name_the_fullest_path(self) -> None:
        """Crossing 75 % logs one warning, crossing 90 % one error, both naming the fullest partition's
        path; staying there logs nothing more."""
        usage = {"/data": 0.5, "/logs": 0.8}
        retention = Retention(MessageStoreConfig(), lambda: T0, usage.__getitem__)
        with assert_logs(self, "rocketpy.store.retention", LogLevel.warn) as warned:
            retention.check(usage)
        self.assertEqual(warned, ["disk of /logs 80% used, over the 75% limit: expired commit-log files are deleted "
                                  "whatever the hour"])
        with capturedLogs() as again:
            retention.check(usage)
        self.assertEqual(list(again), [])
        usage["/data"] = 0.93
        with assert_logs(self, "rocketpy.store.retention", LogLevel.error) as full:
            retention.check(usage)
        self.assertEqual(full, ["disk of /data full: 93% used (limit 90%), puts are refused"])

