"""Firing many Deferreds cheaply: an automatic batch's answer gives every member its result.

:func:`fire` is ``d.callback(result)``. With ``rocketpy._speedups`` built it runs in C for the usual
Deferred (not fired yet, not paused, no debugging), calling the callbacks exactly as Twisted's
``Deferred._runCallbacks`` does (a callback that raises gives the next errback a Failure, one that
returns a Deferred chains to it) and leaving anything unusual to Twisted's own code at the point
reached: about 0.3 µs against 1.4 µs per Deferred with two callbacks (doc/benchmarks.md, "Pass:
the producer per pipelined message"). It reads Twisted's private Deferred state, so it is used only
when the installed Twisted keeps that state as the C code expects (:func:`twisted_fits`);
``ROCKETPY_NO_SPEEDUPS=1`` or an unexpected Twisted leaves ``Deferred.callback``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.python.deprecate import warnAboutFunction
from twisted.python.failure import Failure

from rocketpy.client.results import SendResult
from rocketpy.common import speedups

_SELF_RETURNED = (
    "Callback returned the Deferred it was attached to; this breaks the callback chain and will raise an "
    "exception in the future."
)


def _warn_self(callback: Callable[..., Any]) -> None:
    """Twisted's warning for a callback that returned the Deferred it was added to."""
    warnAboutFunction(callback, _SELF_RETURNED)


def twisted_fits() -> bool:
    """True when Twisted's Deferred keeps the private state the C :func:`fire` reads and writes: a
    ``_callbacks`` list of ``(callback, errback)`` pairs of ``(function, args, kwargs)``, ``called``,
    ``paused``, ``_runningCallbacks``, ``_debugInfo``, ``_chainedTo``, ``_continuation`` and the
    ``_CONTINUE``, ``_NO_RESULT`` sentinels and ``_DEFERRED_SUBCLASSES`` (Twisted 25.5 and later)."""
    d: Deferred[Any] = Deferred()
    d.addCallback(defer.passthru)
    callbacks = vars(d).get("_callbacks")
    names = ("_runCallbacks", "_startRunCallbacks", "_continuation", "pause", "_runningCallbacks", "_chainedTo",
             "_debugInfo", "called", "paused", "debug")
    return (
        isinstance(callbacks, list) and len(callbacks) == 1 and callbacks[0][0] == (defer.passthru, (), {})
        and all(hasattr(Deferred, name) for name in names)
        and isinstance(getattr(defer, "_DEFERRED_SUBCLASSES", None), list)
        and hasattr(defer, "_CONTINUE") and hasattr(defer, "_NO_RESULT") and hasattr(defer, "DebugInfo")
        and hasattr(defer, "_failthru") and hasattr(defer, "_NONE_KWARGS") and issubclass(Failure, BaseException)
    )


def python_fire(d: Deferred[Any], result: Any) -> None:
    """The reference: ``d.callback(result)``."""
    d.callback(result)


def python_deliver(
    members: list[Deferred[Any]], status: Any, ids: list[str], store_ids: list[str], queue: Any, offset: int,
    transaction_id: str | None, region_id: str,
) -> bool:
    """Fire ``members[i]`` with ``SendResult(status, ids[i], store_ids[i], queue, offset + i, transaction_id,
    region_id)`` as far as the shortest list goes; True (the C version's False: it took nothing)."""
    for member, msg_id, store_id in zip(members, ids, store_ids):
        member.callback(SendResult(status, msg_id, store_id, queue, offset, transaction_id, region_id))
        offset += 1
    return True


def _compiled() -> Any:
    module = speedups.compiled
    if module is None or not hasattr(module, "fire_setup") or not twisted_fits():
        return None
    module.fire_setup(
        failure=Failure, continue_=defer._CONTINUE, no_result=defer._NO_RESULT,
        subclasses=defer._DEFERRED_SUBCLASSES, debug_info=defer.DebugInfo, warn_self=_warn_self,
        send_result=SendResult, failthru=defer._failthru, passthru=defer.passthru, none_kwargs=defer._NONE_KWARGS,
    )
    return module


_module = _compiled()
#: "C" or "Python": which :func:`fire` runs.
ACTIVE = "Python" if _module is None else "C"
fire: Callable[[Deferred[Any], Any], None] = python_fire if _module is None else _module.fire


def compiled() -> Any:
    """``rocketpy._speedups`` once :func:`fire` runs in C (its ``fire_setup`` done), else None."""
    return _module


def cheap_callbacks(cls: type[Deferred[Any]]) -> None:
    """Give ``cls`` (a Deferred subclass) ``addCallback``, ``addErrback`` and ``addBoth`` in C: the same
    links on its ``_callbacks`` list as Twisted's, the same run when it has fired (nothing without C)."""
    if _module is not None:
        _module.fire_methods(cls)


def share_keys(cls: type[Deferred[Any]]) -> None:
    """Store on one new instance of ``cls`` every attribute its instances get while they wait and fire, so that
    each name has its place in the class's shared instance keys before many instances exist: CPython 3.11
    admits hardly any new name once ~30 instances were made, and an instance storing a name that has none
    gets a dict of its own (a member fired after 1000 others were made did, at every send)."""
    d = cls()
    d.called, d.result, d._runningCallbacks, d.paused = True, None, False, 0
    d._chainedTo, d._debugInfo = None, None


#: The batch answer's loop: False from the C version when it took nothing (then run :func:`python_deliver`).
deliver: Callable[..., bool] = python_deliver if _module is None else _module.deliver
