"""Command locators: each responder goes into the server's table under its code."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from rocketpy.common.fastjson import BodyError
from rocketpy.common.headers import HeaderError
from rocketpy.interfaces import IChannel, ICommandLocator, IRequestProcessor
from rocketpy.remoting.codes import ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.responders import RequestRefused
from tests.fakes import FakeChannel, registered


@implementer(ICommandLocator)
class Echoes:
    """Answers code 1 with its body; codes 2 to 5 fail in each way a handler may."""

    def responders(self) -> dict[int, Any]:
        return {1: self.echo, 2: self.refuse, 3: self.bad_header, 4: self.bad_body, 5: self.crash}

    def echo(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=request.body)

    def refuse(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        raise RequestRefused(ResponseCode.TOPIC_NOT_EXIST, "no such topic")

    def bad_header(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        raise HeaderError("topic", "is missing")

    def bad_body(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        raise BodyError("malformed JSON body")

    def crash(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        raise ZeroDivisionError("bug")


class ResponderTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.server = registered(Echoes())

    def answer(self, code: int) -> RemotingCommand:
        response = self.server.answer(FakeChannel(), RemotingCommand.request(code, {}, b"body"))
        assert isinstance(response, RemotingCommand)
        return response

    def test_one_entry_per_code(self) -> None:
        """Every responder is registered under its own code, as a request processor never busy."""
        self.assertEqual(sorted(self.server.processors), [1, 2, 3, 4, 5])
        for processor in self.server.processors.values():
            self.assertTrue(verifyObject(IRequestProcessor, processor))
            self.assertFalse(processor.reject_request())
        self.assertEqual(self.answer(1).body, b"body")

    def test_refusals_become_answers(self) -> None:
        """A refusal answers its code and remark; a bad header or body SYSTEM_ERROR naming it."""
        self.assertEqual((self.answer(2).code, self.answer(2).remark), (ResponseCode.TOPIC_NOT_EXIST, "no such topic"))
        self.assertEqual(self.answer(3).code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("topic", self.answer(3).remark or "")
        self.assertEqual((self.answer(4).code, self.answer(4).remark), (ResponseCode.SYSTEM_ERROR, "malformed JSON body"))

    def test_other_errors_reach_the_node(self) -> None:
        """Any other exception propagates: the node answers SYSTEM_ERROR and logs it."""
        self.assertRaises(ZeroDivisionError, self.answer, 5)
