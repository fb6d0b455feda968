"""Hand work from other threads to a loop with one wake-up per run of jobs.

``reactor.callFromThread`` and ``loop.call_soon_threadsafe`` write to the loop's waker on
every call: one system call (and a GIL hand-over) per job. :class:`CoalescedJobs` queues jobs
and asks for a wake-up only when the queue was empty, so a burst of N jobs costs one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from twisted.logger import Logger

_log = Logger()


class CoalescedJobs:
    """Jobs for the loop that ``wake(run_jobs)`` schedules on (``reactor.callFromThread``,
    ``loop.call_soon_threadsafe`` …); call :meth:`run_soon` from any thread."""

    def __init__(self, wake: Callable[[Callable[[], None]], object]) -> None:
        self._wake = wake
        self._jobs: list[Callable[[], object]] = []
        self._lock = threading.Lock()

    def run_soon(self, job: Callable[[], object]) -> None:
        """Queue ``job``; only the first job of a run wakes the loop."""
        with self._lock:
            self._jobs.append(job)
            first = len(self._jobs) == 1
        if first:
            self._wake(self._run_jobs)

    def _run_jobs(self) -> None:
        with self._lock:
            jobs, self._jobs = self._jobs, []
        for job in jobs:
            try:
                job()
            except Exception:  # one job's error must not drop the others
                _log.failure("a job handed to the loop failed")
