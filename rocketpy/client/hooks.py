"""Hooks around a producer's sends (Java's ``SendMessageHook`` and ``CheckForbiddenHook``).

RPC hooks (ACL signing) work one level lower: see :class:`rocketpy.interfaces.IRPCHook`,
passed to the producer as ``rpc_hooks``.
"""

from __future__ import annotations

from dataclasses import dataclass

from zope.interface import Attribute, Interface

from rocketpy.client.api import Mode
from rocketpy.client.results import SendResult
from rocketpy.common.message import Message
from rocketpy.common.route import MessageQueue


@dataclass(slots=True)
class SendMessageContext:
    """One send attempt, as hooks see it.

    :ivar message: the message as sent (compressed body, UNIQ_KEY set).
    :ivar send_result: set before ``send_message_after`` when the attempt succeeded.
    :ivar exception: set before ``send_message_after`` when it failed.
    """

    producer_group: str
    message: Message
    queue: MessageQueue
    broker_addr: str
    mode: Mode
    send_result: SendResult | None = None
    exception: Exception | None = None


class ISendMessageHook(Interface):
    """Called before and after every send attempt (tracing, metrics)."""

    name = Attribute("A name for logs.")

    def send_message_before(context: SendMessageContext) -> None:
        """Before the request is written; an exception is logged and ignored."""

    def send_message_after(context: SendMessageContext) -> None:
        """After the attempt ended (``send_result`` or ``exception`` is set)."""


class ICheckForbiddenHook(Interface):
    """May veto a send attempt."""

    name = Attribute("A name for logs.")

    def check_forbidden(context: SendMessageContext) -> None:
        """Raise to refuse the attempt: it fails with an MQClientError and is retried like one."""
