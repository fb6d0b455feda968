"""An admin's requests to a 5.x consumer as Telemetry commands, and the client's answers as the
remoting responses the admin waits for (the Java proxy's ``GrpcClientChannel``,
``ClientActivity.reportVerifyMessageResult`` / ``reportThreadStackTrace``).

- CONSUME_MESSAGE_DIRECTLY (``mqadmin consumeMessage``) → VerifyMessageCommand; the client's
  VerifyMessageResult status → a ConsumeMessageDirectlyResult (OK: CR_SUCCESS,
  FAILED_TO_CONSUME_MESSAGE: CR_LATER, MESSAGE_CORRUPTED: CR_RETURN_NULL, any other:
  CR_THROW_EXCEPTION with the status in the remark; the Java proxy leaves it unset).
- GET_CONSUMER_RUNNING_INFO with ``jstackEnable`` → PrintThreadStackTraceCommand; the client's
  ThreadStackTrace → a ConsumerRunningInfo with that ``jstack``. Without ``jstackEnable`` the
  endpoint answers at once from the client's settings (the Java proxy never answers it).
"""

from __future__ import annotations

from typing import Any

from rocketpy.broker.heartbeat import SubscriptionData
from rocketpy.common.fastjson import dump_json
from rocketpy.common.message import MessageExt, decode_record
from rocketpy.grpc import convert
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand

#: what a 5.x client is asked, by the remoting request it stands for
ASKED = (RequestCode.CONSUME_MESSAGE_DIRECTLY, RequestCode.GET_CONSUMER_RUNNING_INFO)
_DIRECT_RESULTS = {
    pb.Code.OK: "CR_SUCCESS",
    pb.Code.FAILED_TO_CONSUME_MESSAGE: "CR_LATER",
    pb.Code.MESSAGE_CORRUPTED: "CR_RETURN_NULL",
}
REMARK = "from gRPC client"


def shown(ext: MessageExt) -> pb.Message:
    """A stored message as a server command shows it (``GrpcConverter.buildMessage``): as received,
    without receipt handle or invisibility."""
    message = convert.to_v2(ext, "", ext.reconsume_times + 1, 0)
    for name in ("receipt_handle", "invisible_duration"):
        message.system_properties.ClearField(name)
    return message


def wants_jstack(request: RemotingCommand) -> bool:
    return request.ext_fields.get("jstackEnable", "").lower() == "true"


def command_for(request: RemotingCommand, nonce: str) -> rpc.TelemetryCommand:
    """The Telemetry command asking the client what ``request`` asks (one of :data:`ASKED`).

    :raises RecordError: for a CONSUME_MESSAGE_DIRECTLY whose body is not a stored message.
    """
    if request.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
        message = shown(decode_record(request.body))
        return rpc.TelemetryCommand(verify_message_command=rpc.VerifyMessageCommand(nonce=nonce, message=message))
    return rpc.TelemetryCommand(print_thread_stack_trace_command=rpc.PrintThreadStackTraceCommand(nonce=nonce))


def answer_nonce(command: rpc.TelemetryCommand) -> str | None:
    """The nonce a client's answer (ThreadStackTrace, VerifyMessageResult) carries; None for other commands."""
    kind = command.WhichOneof("command")
    if kind == "thread_stack_trace":
        return command.thread_stack_trace.nonce
    if kind == "verify_message_result":
        return command.verify_message_result.nonce
    return None


def response_to(request: RemotingCommand, answer: rpc.TelemetryCommand, settings: pb.Settings | None
                ) -> RemotingCommand:
    """The admin's response to ``request`` from the client's ``answer``."""
    code = answer.status.code if answer.HasField("status") else pb.Code.OK
    if request.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
        result: dict[str, Any] = {"autoCommit": True, "order": False, "spentTimeMills": 0,
                                  "consumeResult": _DIRECT_RESULTS.get(code, "CR_THROW_EXCEPTION"), "remark": REMARK}
        if code not in _DIRECT_RESULTS:
            result["remark"] = f"{REMARK}: {pb.Code.Name(code)} {answer.status.message}"
        return request.make_response(ResponseCode.SUCCESS, None, None, dump_json(result))
    if code != pb.Code.OK:
        return request.make_response(ResponseCode.SYSTEM_ERROR, f"thread stack trace failed: {pb.Code.Name(code)} "
                                                                f"{answer.status.message}")
    return request.make_response(ResponseCode.SUCCESS, None, None,
                                 running_info(settings, answer.thread_stack_trace.thread_stack_trace))


def running_info(settings: pb.Settings | None, jstack: str | None = None) -> bytes:
    """A ConsumerRunningInfo of a 5.x consumer from its settings: no queues (it pops), no statistics."""
    settings = settings or pb.Settings()
    ua = settings.user_agent
    properties = {
        "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY" if settings.client_type == pb.ClientType.PUSH_CONSUMER
        else "CONSUME_ACTIVELY",
        "PROP_CLIENT_VERSION": ua.version,
        "clientType": pb.ClientType.Name(settings.client_type),
        "language": pb.Language.Name(ua.language),
        "hostname": ua.hostname,
        "platform": ua.platform,
    }
    subscriptions = [SubscriptionData.build(e.topic.name, e.expression.expression or "*").to_json()
                     for e in settings.subscription.subscriptions]
    info: dict[str, Any] = {"mqTable": {}, "properties": properties, "statusTable": {},
                            "subscriptionSet": sorted(subscriptions, key=lambda s: s["topic"])}
    if jstack is not None:
        info["jstack"] = jstack
    return dump_json(info)
