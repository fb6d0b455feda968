"""Tests for rocketpy.client.allocate."""

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client.allocate import allocate_averagely


class AllocateTests(SynchronousTestCase):
    def shares(self, n: int, clients: list[str]) -> list[list[int]]:
        return [allocate_averagely(list(range(n)), clients, c) for c in clients]

    def test_uneven(self) -> None:
        """8 queues over 3 clients: 3, 3, 2 contiguous queues."""
        self.assertEqual(self.shares(8, ["a", "b", "c"]), [[0, 1, 2], [3, 4, 5], [6, 7]])

    def test_even(self) -> None:
        """4 queues over 2 clients: 2 each."""
        self.assertEqual(self.shares(4, ["a", "b"]), [[0, 1], [2, 3]])

    def test_more_clients_than_queues(self) -> None:
        """Extra clients get nothing; every queue is taken exactly once."""
        self.assertEqual(self.shares(2, ["a", "b", "c"]), [[0], [1], []])

    def test_unknown_client(self) -> None:
        """A client missing from the list gets no queue."""
        self.assertEqual(allocate_averagely([0, 1], ["a"], "z"), [])
