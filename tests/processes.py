"""A child process whose output a test waits on (``twistd rocketpy``, ``rocketpy-bench``)."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessTerminated
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure


class LogWatcher(ProcessProtocol):
    """Keeps a process's output and fires :meth:`wait_for` Deferreds when a text shows up in it."""

    def __init__(self) -> None:
        self.output = ""
        self._waiting: list[tuple[str, Deferred[None]]] = []
        self._ended: list[Deferred[int | None]] = []
        self.exit_signal: int | None = None
        self.exit_code: int | None = None
        self.running = True

    def outReceived(self, data: bytes) -> None:
        self.output += data.decode(errors="replace")
        still = []
        for text, d in self._waiting:
            if text in self.output:
                d.callback(None)
            else:
                still.append((text, d))
        self._waiting = still

    errReceived = outReceived

    def wait_for(self, text: str, timeout: float = 30.0) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        if text in self.output:
            d.callback(None)
        else:
            self._waiting.append((text, d))
            d.addTimeout(timeout, reactor)
        return d

    def when_ended(self) -> Deferred[int | None]:
        """Fires with the signal that ended the process (None: it exited)."""
        d: Deferred[int | None] = Deferred()
        if self.running:
            self._ended.append(d)
        else:
            d.callback(self.exit_signal)
        return d

    def kill(self, signal: str = "KILL") -> Deferred[int | None]:
        """Send ``signal``; fires once the process ended."""
        if self.running and self.transport is not None:
            self.transport.signalProcess(signal)
        return self.when_ended()

    def processEnded(self, reason: Failure) -> None:
        value = reason.value
        self.running = False
        self.exit_signal = value.signal if isinstance(value, ProcessTerminated) else None
        self.exit_code = getattr(value, "exitCode", None)
        for d in self._ended:
            d.callback(self.exit_signal)
