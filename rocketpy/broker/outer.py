"""Registration with the name servers (Java ``BrokerOuterAPI`` + the registration timer, doc/wire.md §2).

The broker registers with every configured name server at start, every
``register_name_server_period`` seconds (clamped to 10–60 s) and as soon as
its topic table changes; it unregisters on a clean stop. Failures are logged
and never fatal: the next period tries again.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from rocketpy.broker.config import BrokerConfig
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.fastjson import dump_json
from rocketpy.common.headers import to_fields
from rocketpy.common.message import body_crc
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand

MIN_PERIOD = 10.0
MAX_PERIOD = 60.0


class Invoker(Protocol):
    """What registration needs of :class:`~rocketpy.remoting.client.RemotingClient`."""

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]: ...


#: ``(master_addr, ha_server_addr)`` from a REGISTER_BROKER answer.
MasterListener = Callable[["str | None", "str | None"], None]


def registration_period(seconds: float) -> float:
    """Java clamps ``registerNameServerPeriod`` to 10–60 s."""
    return min(MAX_PERIOD, max(MIN_PERIOD, seconds))


def register_body(topics: TopicConfigManager) -> bytes:
    """RegisterBrokerBody JSON: the topic table with its data version, no filter servers."""
    return dump_json({"filterServerList": [], "topicConfigSerializeWrapper": topics.to_json()})


class NameServerRegistration:
    """Keeps this broker registered with its name servers.

    :param clock: runs the timer.
    :param client: sends the requests (a :class:`~rocketpy.remoting.client.RemotingClient`).
    :param config: broker name, address, cluster, id, name servers, period and timeout.
    :param topics: the table sent with every registration; its changes trigger one.
    """

    log = Logger()

    def __init__(
        self, clock: IReactorTime, client: Invoker, config: BrokerConfig, topics: TopicConfigManager
    ) -> None:
        self._clock = clock
        self._client = client
        self._config = config
        self._topics = topics
        self._loop = LoopingCall(self.register_all)
        self._loop.clock = clock
        self._loop_done: Deferred[Any] | None = None
        self._soon: IDelayedCall | None = None
        self._soon_running: set[Deferred[None]] = set()  # registrations register_soon started
        self._running = False
        self._master_listeners: list[MasterListener] = []
        topics.add_change_listener(self.register_soon)

    def add_master_listener(self, listener: MasterListener) -> None:
        """Call ``listener(master_addr, ha_server_addr)`` with each successful registration's
        answer (a slave learns its master there; both None when it is not registered)."""
        self._master_listeners.append(listener)

    def start(self) -> None:
        """Register now and then every period."""
        self._running = True
        if self._config.namesrv_addr:
            self._loop_done = self._loop.start(registration_period(self._config.register_name_server_period))

    async def stop(self) -> None:
        """Stop the timer, let running registrations end (the timer's and register_soon's), then
        unregister everywhere."""
        self._running = False
        if self._soon is not None and self._soon.active():
            self._soon.cancel()
        self._soon = None
        if self._loop.running:
            self._loop.stop()
        if self._loop_done is not None:
            await self._loop_done
            self._loop_done = None
        while self._soon_running:
            await next(iter(self._soon_running))
        await self.unregister_all()

    def register_soon(self) -> None:
        """Register on the next reactor turn; a burst of topic changes gives one registration."""
        if not self._running or (self._soon is not None and self._soon.active()):
            return
        self._soon = self._clock.callLater(0, self._register_now)

    def _register_now(self) -> None:
        d = self.register_all()
        if not d.called:  # stop waits for it
            self._soon_running.add(d)
            d.addBoth(lambda _: self._soon_running.discard(d))

    def _header(self) -> dict[str, str]:
        c = self._config
        return to_fields(
            brokerName=c.broker_name,
            brokerAddr=c.advertised_address,
            clusterName=c.cluster_name,
            brokerId=c.broker_id,
        )

    def register_all(self) -> Deferred[None]:
        """Send REGISTER_BROKER to every name server; fires when all answered or failed."""
        body = register_body(self._topics)
        ext = self._header()
        ext.update(to_fields(haServerAddr=self._config.ha_server_addr, compressed=False, bodyCrc32=body_crc(body)))
        return self._to_all(RequestCode.REGISTER_BROKER, ext, body)

    def unregister_all(self) -> Deferred[None]:
        """Send UNREGISTER_BROKER to every name server; fires when all answered or failed."""
        return self._to_all(RequestCode.UNREGISTER_BROKER, self._header(), b"")

    def _to_all(self, code: int, ext: dict[str, str], body: bytes) -> Deferred[None]:
        calls = []
        for address in self._config.namesrv_addr:
            request = RemotingCommand.request(code, dict(ext), body)
            d = self._client.invoke_sync(address, request, self._config.register_broker_timeout)
            d.addCallbacks(self._answered, self._failed, callbackArgs=(address, code), errbackArgs=(address, code))
            calls.append(d)
        return DeferredList(calls).addCallback(lambda _: None)

    def _answered(self, response: RemotingCommand, address: str, code: int) -> None:
        what = RequestCode(code).name
        if response.code != ResponseCode.SUCCESS:
            self.log.warn(
                "{what} at {address}: code {code} {remark}",
                what=what, address=address, code=response.code, remark=response.remark,
            )
        else:
            self.log.debug("{what} at {address} done", what=what, address=address)
            if code == RequestCode.REGISTER_BROKER:
                ext = response.ext_fields
                for listener in self._master_listeners:
                    listener(ext.get("masterAddr") or None, ext.get("haServerAddr") or None)

    def _failed(self, failure: Any, address: str, code: int) -> None:
        self.log.warn(
            "{what} at {address} failed: {error}",
            what=RequestCode(code).name, address=address, error=failure.getErrorMessage(),
        )
