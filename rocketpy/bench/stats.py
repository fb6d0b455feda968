"""Throughput and latency figures of a benchmark run, latencies in an HDR histogram."""

from __future__ import annotations

from typing import Any

#: latencies are recorded in microseconds, from 1 µs to a day, to 3 significant digits
_LOWEST, _HIGHEST, _DIGITS = 1, 86_400_000_000, 3


def _histogram() -> Any:
    from hdrh.histogram import HdrHistogram  # the bench extra; main() checks it is there

    return HdrHistogram(_LOWEST, _HIGHEST, _DIGITS)


class RunStats:
    """Counts and latencies of the whole run, and of the interval since the last progress line.

    :param started: when the run started (the clock's ``seconds()``).
    """

    def __init__(self, started: float) -> None:
        self.started = self._interval_start = started
        self.ok = self.failed = 0
        self._interval_ok = self._interval_failed = 0
        self._total = _histogram()
        self._interval = _histogram()

    def record(self, latency: float, messages: int = 1) -> None:
        """``messages`` done in one request that took ``latency`` seconds."""
        micros = min(max(int(latency * 1_000_000), _LOWEST), _HIGHEST)
        self._total.record_value(micros)
        self._interval.record_value(micros)
        self.ok += messages
        self._interval_ok += messages

    def fail(self, messages: int = 1) -> None:
        self.failed += messages
        self._interval_failed += messages

    def progress(self, now: float) -> dict[str, Any]:
        """The figures since the previous call (or the start); starts a new interval."""
        figures = _figures(self._interval, self._interval_ok, self._interval_failed, now - self._interval_start)
        self._interval.reset()
        self._interval_ok = self._interval_failed = 0
        self._interval_start = now
        return figures

    def summary(self, now: float) -> dict[str, Any]:
        """The whole run's figures."""
        return _figures(self._total, self.ok, self.failed, now - self.started)


def _figures(histogram: Any, ok: int, failed: int, seconds: float) -> dict[str, Any]:
    empty = histogram.get_total_count() == 0

    def ms(micros: float) -> float:
        return 0.0 if empty else round(micros / 1000, 3)

    return {
        "seconds": round(seconds, 3),
        "messages": ok,
        "failed": failed,
        "tps": round(ok / seconds, 1) if seconds > 0 else 0.0,
        "rt_avg_ms": ms(histogram.get_mean_value()),
        "rt_p50_ms": ms(histogram.get_value_at_percentile(50)),
        "rt_p99_ms": ms(histogram.get_value_at_percentile(99)),
        "rt_max_ms": ms(histogram.get_max_value()),
    }


def progress_line(what: str, figures: dict[str, Any], total: int) -> str:
    """One line of RocketMQ benchmark style: ``send TPS 1234 | RT(ms) avg … p99 … max … | failed 0``."""
    return (f"{what} TPS {figures['tps']:.0f} | RT(ms) avg {figures['rt_avg_ms']:.3f} "
            f"p99 {figures['rt_p99_ms']:.3f} max {figures['rt_max_ms']:.3f} | failed {figures['failed']} "
            f"| total {total}")


def summary_lines(what: str, figures: dict[str, Any]) -> list[str]:
    return [
        f"{what}: {figures['messages']} messages in {figures['seconds']:.1f} s, {figures['tps']:.0f} TPS, "
        f"{figures['failed']} failed",
        f"RT(ms): avg {figures['rt_avg_ms']:.3f}  p50 {figures['rt_p50_ms']:.3f}  "
        f"p99 {figures['rt_p99_ms']:.3f}  max {figures['rt_max_ms']:.3f}",
    ]
