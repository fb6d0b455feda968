"""PageCacheTrail: which commit-log chunks behind the flushed offset are dropped, and when."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.store.pagecache import READ_HOLD, PageCacheTrail

NOT_A_POWER_OF_TWO = 100 * 1024
C = 1 << 16  # the chunk the tests use


class Trail:
    """A trail over a fake clock, recording its drops."""

    def __init__(self, keep: int) -> None:
        self.now = 1000.0
        self.drops: list[tuple[int, int]] = []
        self.trail = PageCacheTrail(keep, lambda start, end: self.drops.append((start, end)),
                                    clock=lambda: self.now, chunk=C)

    def advance(self, flushed: int, lowest: int = 0) -> list[tuple[int, int]]:
        """The drops one pass asked for."""
        before = len(self.drops)
        self.trail.advance(flushed, lowest)
        return self.drops[before:]


class PageCacheTrailTests(SynchronousTestCase):

    def test_whole_chunks_beyond_keep(self) -> None:
        """Only chunks lying wholly more than ``keep`` behind the flushed offset go, adjacent ones
        in one call, each chunk once."""
        t = Trail(keep=2 * C)
        self.assertEqual(t.advance(2 * C + C - 1), [])
        self.assertEqual(t.advance(3 * C), [(0, C)])
        self.assertEqual(t.advance(3 * C + C // 2), [])
        self.assertEqual(t.advance(7 * C), [(C, 5 * C)])
        self.assertEqual(t.advance(7 * C), [])

    def test_off(self) -> None:
        """keep 0 drops nothing and notes no reads."""
        t = Trail(keep=0)
        t.trail.note_read(0)
        self.assertEqual(t.advance(100 * C), [])
        self.assertEqual(t.trail._read_at, {})

    def test_read_chunks_held_while_read(self) -> None:
        """A chunk read within READ_HOLD stays when the line passes it, and goes in the first pass
        after its reads stop for READ_HOLD; the chunks around it go at once."""
        t = Trail(keep=C)
        t.trail.note_read(2 * C + 10)
        self.assertEqual(t.advance(6 * C), [(0, 2 * C), (3 * C, 5 * C)])
        t.now += READ_HOLD - 1
        t.trail.note_read(2 * C)  # still read: held on
        self.assertEqual(t.advance(6 * C), [])
        t.now += READ_HOLD - 1
        self.assertEqual(t.advance(6 * C), [])
        t.now += 1
        self.assertEqual(t.advance(6 * C), [(2 * C, 3 * C)])

    def test_dropped_chunk_read_again(self) -> None:
        """A dropped chunk read back in is held, then dropped again once its reads stop."""
        t = Trail(keep=C)
        self.assertEqual(t.advance(4 * C), [(0, 3 * C)])
        t.trail.note_read(C)
        self.assertEqual(t.advance(4 * C), [])
        t.now += READ_HOLD
        self.assertEqual(t.advance(4 * C), [(C, 2 * C)])
        self.assertEqual(t.advance(4 * C), [])

    def test_read_ahead_of_the_line(self) -> None:
        """A chunk read before it falls behind is held when it does."""
        t = Trail(keep=C)
        t.trail.note_read(3 * C)
        self.assertEqual(t.advance(5 * C), [(0, 3 * C)])
        t.now += READ_HOLD
        self.assertEqual(t.advance(5 * C), [(3 * C, 4 * C)])

    def test_gone_files_not_dropped(self) -> None:
        """Chunks below the log's first offset (deleted files) are neither dropped nor held."""
        t = Trail(keep=C)
        t.trail.note_read(C)
        self.assertEqual(t.advance(4 * C, lowest=0), [(0, C), (2 * C, 3 * C)])
        t.now += READ_HOLD
        self.assertEqual(t.advance(8 * C, lowest=5 * C), [(5 * C, 7 * C)])
        self.assertEqual(t.trail._held, set())

    def test_new_trail_starts_at_the_first_offset(self) -> None:
        """A trail over a log whose first file starts far in drops from there on."""
        t = Trail(keep=C)
        self.assertEqual(t.advance(1000 * C, lowest=990 * C), [(990 * C, 999 * C)])

    def test_chunk_power_of_two(self) -> None:
        self.assertRaises(ValueError, PageCacheTrail, C, lambda start, end: None, chunk=NOT_A_POWER_OF_TWO)
