"""The RocketMQ client on Deferreds: :class:`Producer`, :class:`PullConsumer`, :class:`PushConsumer`.

See ``doc/client.md``; :mod:`rocketpy.blocking` wraps the same classes for code without a reactor.
"""

from rocketpy.client.consumer import ConsumeFromWhere, MessageModel, PullConsumer
from rocketpy.client.errors import (
    BrokerNotFoundError,
    ClientErrorCode,
    MessageInvalidError,
    MQBrokerError,
    MQClientError,
    MQError,
    NoNameServerError,
    NoRouteError,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
    SendFailedError,
)
from rocketpy.client.hooks import ICheckForbiddenHook, ISendMessageHook, SendMessageContext
from rocketpy.client.instance import ClientInstance
from rocketpy.client.message import new_message
from rocketpy.client.process import ConsumeContext
from rocketpy.client.producer import Producer, select_by_hash
from rocketpy.client.push import PushConsumer
from rocketpy.client.results import ConsumeResult, PullResult, PullStatus, SendResult, SendStatus
from rocketpy.client.reply import RequestTimeoutError, create_reply_message
from rocketpy.client.subscription import MessageSelector
from rocketpy.common.message import Message, MessageExt
from rocketpy.common.route import MessageQueue

__all__ = [
    "BrokerNotFoundError", "ClientErrorCode", "ClientInstance", "ConsumeContext", "ConsumeFromWhere",
    "ConsumeResult", "ICheckForbiddenHook", "ISendMessageHook", "MQBrokerError", "MQClientError", "MQError",
    "Message", "MessageExt", "MessageInvalidError", "MessageSelector", "MessageModel", "MessageQueue", "NoNameServerError",
    "NoRouteError", "Producer", "PullConsumer", "PullResult", "PullStatus", "PushConsumer", "RemotingConnectError",
    "RemotingError", "RemotingSendRequestError", "RequestTimeoutError", "create_reply_message", "RemotingTimeoutError", "RemotingTooMuchRequestError",
    "SendFailedError", "SendMessageContext", "SendResult", "SendStatus", "new_message", "select_by_hash",
]
