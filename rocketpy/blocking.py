"""The client for code without a reactor: blocking calls that return values and raise errors.

A private reactor runs in one daemon thread (started on first use); every
call hops onto it and waits. The errors are those of :mod:`rocketpy.client`::

    from rocketpy.blocking import Message, Producer, PushConsumer
    producer = Producer("PG", "127.0.0.1:9876").start()
    producer.send(Message("TopicTest", b"hello"))
    consumer = PushConsumer("CG", "127.0.0.1:9876").subscribe("TopicTest").start()
    print(consumer.receive(timeout=10).body)
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from rocketpy.client import consumer as _consumer, producer as _producer, push as _push
from rocketpy.client.message import new_message
from rocketpy.client.process import ConsumeContext
from rocketpy.client.results import ConsumeResult, PullResult, SendResult
from rocketpy.client.subscription import MessageSelector, Selector
from rocketpy.common.message import Message, MessageExt
from rocketpy.common.route import MessageQueue
from rocketpy.util.wakeups import CoalescedJobs

__all__ = ["Message", "MessageExt", "MessageQueue", "MessageSelector", "new_message", "ConsumeResult", "Producer", "PullConsumer",
           "PushConsumer", "ReactorThread", "reactor_thread"]

T = TypeVar("T")


class ReactorThread:
    """A reactor of our own, running in a daemon thread."""

    def __init__(self) -> None:
        try:
            from rocketpy.remoting.reactor import LeanEPollReactor as ReactorClass  # epoll, less Python per turn
        except ImportError:  # not Linux
            from twisted.internet.selectreactor import SelectReactor as ReactorClass
        self.reactor: Any = ReactorClass()
        # callFromThread writes to the reactor's waker every time: one wake-up per run of calls
        self._jobs = CoalescedJobs(self.reactor.callFromThread)
        self._thread = threading.Thread(
            target=self.reactor.run, kwargs={"installSignalHandlers": False}, name="rocketpy-reactor", daemon=True
        )
        self._thread.start()

    def call(self, f: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Run ``f`` on the reactor thread and wait for its (Deferred) result.

        :raises TimeoutError: if ``timeout`` seconds pass first (the call goes on).
        :raises RuntimeError: when called from the reactor thread (it would deadlock).
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("a blocking rocketpy call on the reactor thread would deadlock")
        future = self.submit(f, *args, **kwargs)
        try:
            return future.result(timeout)
        except TimeoutError:
            raise TimeoutError(f"{getattr(f, '__name__', f)} did not finish in {timeout} s") from None

    def submit(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        """Run ``f`` on the reactor thread; a Future of its (Deferred) result."""
        future: Future[Any] = Future()

        def settle(result: Any) -> None:
            if isinstance(result, Failure):
                future.set_exception(result.value)
            else:
                future.set_result(result)

        self._jobs.run_soon(lambda: maybeDeferred(f, *args, **kwargs).addBoth(settle))
        return future

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread.is_alive():
            self.reactor.callFromThread(self.reactor.stop)
            self._thread.join(timeout)


_lock = threading.Lock()
_runner: ReactorThread | None = None
_live: weakref.WeakSet[_Blocking] = weakref.WeakSet()


def reactor_thread() -> ReactorThread:
    """The process's reactor thread, started on first use."""
    global _runner
    with _lock:
        if _runner is None:
            _runner = ReactorThread()
            atexit.register(_at_exit)
        return _runner


def _at_exit() -> None:
    for obj in list(_live):
        try:
            obj.shutdown(timeout=5.0)
        except Exception:  # best effort: the process is ending
            pass
    if _runner is not None:
        _runner.stop()


class _Blocking:
    """Builds the Deferred client object on the reactor thread and forwards calls to it."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        self._rt = reactor_thread()
        self._async = self._rt.call(make, self._rt.reactor)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._rt.call(getattr(self._async, name), *args, **kwargs)

    def start(self: T) -> T:
        """Start; returns self so construction and start chain."""
        self._call("start")  # type: ignore[attr-defined]
        _live.add(self)  # type: ignore[arg-type]
        return self

    def shutdown(self, timeout: float | None = None) -> None:
        _live.discard(self)
        self._rt.call(self._async.shutdown, timeout=timeout)

    def __enter__(self: T) -> T:
        return self.start()  # type: ignore[attr-defined]

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class Producer(_Blocking):
    """:class:`rocketpy.client.Producer`, blocking. Keywords are passed on."""

    def __init__(self, group: str, namesrv_addrs: str | list[str], **kwargs: Any) -> None:
        super().__init__(lambda reactor: _producer.Producer(group, namesrv_addrs, reactor, **kwargs))

    def send(self, msg: Message, timeout: float | None = None) -> SendResult:
        return self._call("send", msg, timeout)

    def request(self, msg: Message, timeout: float = 3.0) -> MessageExt:
        """Send a request and return its reply (see :meth:`rocketpy.client.Producer.request`)."""
        return self._call("request", msg, timeout)

    def send_async(self, msg: Message, timeout: float | None = None) -> Future[SendResult]:
        """Returns at once; the Future completes with the result or the error."""
        return self._rt.submit(self._async.send_async, msg, timeout)

    def send_oneway(self, msg: Message) -> None:
        self._call("send_oneway", msg)

    def send_batch(self, msgs: list[Message], timeout: float | None = None) -> SendResult:
        return self._call("send_batch", msgs, timeout)

    def send_orderly(self, msg: Message, selector: Any, arg: Any, timeout: float | None = None) -> SendResult:
        return self._call("send_orderly", msg, selector, arg, timeout)

    def send_to_queue(self, msg: Message, queue: MessageQueue, timeout: float | None = None) -> SendResult:
        return self._call("send_to_queue", msg, queue, timeout)


class PullConsumer(_Blocking):
    """:class:`rocketpy.client.PullConsumer`, blocking."""

    def __init__(self, group: str, namesrv_addrs: str | list[str], **kwargs: Any) -> None:
        super().__init__(lambda reactor: _consumer.PullConsumer(group, namesrv_addrs, reactor, **kwargs))

    def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        return self._call("fetch_subscribe_queues", topic)

    def pull(self, queue: MessageQueue, expression: Selector, offset: int, max_nums: int = 32,
             timeout: float = 10.0, block: bool = False) -> PullResult:
        return self._call("pull", queue, expression, offset, max_nums, timeout, block)

    def query_consumer_offset(self, queue: MessageQueue) -> int:
        return self._call("query_consumer_offset", queue)

    def update_consumer_offset(self, queue: MessageQueue, offset: int) -> None:
        self._call("update_consumer_offset", queue, offset)

    def fetch_max_offset(self, queue: MessageQueue) -> int:
        return self._call("fetch_max_offset", queue)


Listener = Callable[[list[MessageExt], ConsumeContext], ConsumeResult]


class PushConsumer(_Blocking):
    """:class:`rocketpy.client.PushConsumer`, blocking, in one of two styles.

    - With ``listener``: it runs on a thread pool of ``threads`` threads and returns
      a :class:`ConsumeResult` (an exception means RECONSUME_LATER).
    - Without: :meth:`receive` hands out messages one at a time; a message counts
      as consumed once :meth:`receive` returned it.
    """

    def __init__(self, group: str, namesrv_addrs: str | list[str], listener: Listener | None = None,
                 threads: int = 4, **kwargs: Any) -> None:
        self._inbox: queue.Queue[tuple[MessageExt, Deferred[ConsumeResult]]] = queue.Queue()
        self._listener = listener
        self._pool = ThreadPool(1, threads, "rocketpy-consume") if listener is not None else None
        if listener is None:
            kwargs["consume_batch_max_size"] = 1
        super().__init__(lambda reactor: self._make(reactor, group, namesrv_addrs, kwargs))

    def _make(self, reactor: Any, group: str, namesrv_addrs: Any, kwargs: dict[str, Any]) -> _push.PushConsumer:
        c = _push.PushConsumer(group, namesrv_addrs, reactor, **kwargs)
        c.register_listener(self._dispatch)
        return c

    def _dispatch(self, msgs: list[MessageExt], context: ConsumeContext) -> Deferred[ConsumeResult]:
        if self._pool is not None and self._listener is not None:
            return deferToThreadPool(self._rt.reactor, self._pool, self._listener, msgs, context)
        d: Deferred[ConsumeResult] = Deferred()
        self._inbox.put((msgs[0], d))
        return d

    def subscribe(self, topic: str, expression: Selector = "*") -> PushConsumer:
        """Subscribe; returns self so calls chain."""
        self._call("subscribe", topic, expression)
        return self

    def start(self) -> PushConsumer:
        if self._pool is not None:
            self._pool.start()
        try:
            return super().start()
        except BaseException:
            if self._pool is not None:
                self._pool.stop()
            raise

    def shutdown(self, timeout: float | None = None) -> None:
        super().shutdown(timeout)
        if self._pool is not None:
            self._pool.stop()

    def receive(self, timeout: float | None = None) -> MessageExt | None:
        """The next message, or None after ``timeout`` seconds (receive mode only)."""
        if self._pool is not None:
            raise RuntimeError("this consumer has a listener; receive() is for consumers without one")
        try:
            msg, done = self._inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        self._rt.reactor.callFromThread(done.callback, ConsumeResult.CONSUME_SUCCESS)
        return msg
