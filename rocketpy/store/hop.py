"""What the store service queues (:class:`QueuedPut`) and the writer thread's side of an append
hop: every queued put appended in order, then (SYNC_FLUSH) a flush (doc/store.md, "The put path")."""

from __future__ import annotations

from typing import Any, Sequence

from twisted.internet.defer import Deferred

from rocketpy.common.message import MessageExt
from rocketpy.interfaces import IMessageStore
from rocketpy.store.flush import flush_commit_log
from rocketpy.store.groupcommit import wants_wait
from rocketpy.store.status import PutMessageResult, PutMessageStatus


class QueuedPut:
    """What one caller queued: independent puts (each one message or a batch) and the Deferred
    it holds, which fires with one result (``single``) or a list of them, in order."""

    __slots__ = ("puts", "single", "messages", "deferred")

    def __init__(self, puts: Sequence[Sequence[MessageExt]], single: bool, messages: int) -> None:
        self.puts = puts
        self.single = single
        self.messages = messages
        self.deferred: Deferred[Any] = Deferred()

    def refuse(self, status: PutMessageStatus) -> None:
        result = PutMessageResult(status)
        self.deferred.callback(result if self.single else [result] * len(self.puts))


# What an append hop returns: per put (each of every QueuedPut's) a result or the exception it
# raised; the flushed offset when the hop flushed (else None); the flush's exception, if any.
Results = list["PutMessageResult | Exception"]
HopOutcome = tuple[Results, "int | None", "Exception | None"]


def each_put(puts: list[QueuedPut]) -> Sequence[Sequence[MessageExt]]:
    """The puts of every ``QueuedPut``, flattened in order."""
    return puts[0].puts if len(puts) == 1 else [msgs for put in puts for msgs in put.puts]


def put_all(store: IMessageStore, puts: list[QueuedPut]) -> Results:
    """One result per put of every ``QueuedPut``, in order. A store with ``put_many`` takes the
    whole hop under one lock and one write per file (it turns a put's own errors into its
    status), a lone put too (three wrapper calls fewer than ``put_message``, the same records);
    otherwise one call per put.
    """
    return put_each(store, each_put(puts))


def put_each(store: IMessageStore, each: Sequence[Sequence[MessageExt]]) -> Results:
    """:func:`put_all` of the puts themselves (each one message or a batch)."""
    put_many = getattr(store, "put_many", None)
    if put_many is not None:
        try:
            results: Results = put_many(each)
            return results
        except Exception as e:  # a store bug: no put of the hop can be trusted
            return [e] * len(each)
    results = []
    for msgs in each:
        try:
            results.append(store.put_message(msgs[0]) if len(msgs) == 1 else store.put_messages(msgs))
        except Exception as e:
            results.append(e)
    return results


def append_and_flush(store: IMessageStore, puts: list[QueuedPut], flush_target: int | None) -> HopOutcome:
    """Writer thread: append every queued put, in order; an exception stays with its put.

    With a ``flush_target`` the hop then flushes up to it and to the end of every
    waiting put it appended (group commit without a second hop).
    """
    results = put_all(store, puts)
    if flush_target is None:
        return results, None, None
    for msgs, result in zip(each_put(puts), results):
        if not isinstance(result, Exception) and result.append is not None and result.ok \
                and wants_wait(msgs[0]):
            flush_target = max(flush_target, result.append.next_offset)
    try:
        if flush_target > store.flushed_offset:
            flush_commit_log(store, 0, flush_target)
        return results, store.flushed_offset, None
    except Exception as e:
        return results, None, e
