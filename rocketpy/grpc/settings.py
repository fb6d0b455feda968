"""Client settings of the Telemetry stream, merged with the server's as the Java proxy's
``GrpcClientSettingsManager`` does (its ProxyConfig defaults)."""

from __future__ import annotations

from collections.abc import Callable

from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.grpc.convert import duration
from rocketpy.grpc.v2 import definition_pb2 as pb

PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1000
RECEIVE_BATCH_SIZE = 32
MAX_LONG_POLLING_MS = 20_000
MIN_LONG_POLLING_MS = 5_000
MAX_MESSAGE_SIZE = 4 * 1024 * 1024


class ClientSettings:
    """The last Settings each client (by ``x-mq-client-id``) sent."""

    def __init__(self, retry_delays_ms: list[int],
                 group_config: Callable[[str], SubscriptionGroupConfig] = SubscriptionGroupConfig,
                 max_body_size: int = MAX_MESSAGE_SIZE) -> None:
        self._raw: dict[str, pb.Settings] = {}
        self._retry_delays_ms = retry_delays_ms
        self._group_config = group_config
        self._max_body_size = max_body_size

    def update(self, client_id: str, settings: pb.Settings) -> pb.Settings:
        """Remember a client's settings; the merged settings to send back."""
        self._raw[client_id] = settings
        return self.merged(settings)

    def get(self, client_id: str) -> pb.Settings | None:
        raw = self._raw.get(client_id)
        return None if raw is None else self.merged(raw)

    def remove(self, client_id: str) -> pb.Settings | None:
        return self._raw.pop(client_id, None)

    def all_raw(self) -> dict[str, pb.Settings]:
        """Every client's settings as it sent them, by client id."""
        return dict(self._raw)

    def merged(self, raw: pb.Settings) -> pb.Settings:
        settings = pb.Settings()
        settings.CopyFrom(raw)
        if settings.HasField("publishing"):
            settings.backoff_policy.max_attempts = PRODUCER_MAX_ATTEMPTS
            backoff = settings.backoff_policy.exponential_backoff
            backoff.initial.CopyFrom(duration(PRODUCER_BACKOFF_INITIAL_MS))
            backoff.max.CopyFrom(duration(PRODUCER_BACKOFF_MAX_MS))
            backoff.multiplier = 2
            settings.publishing.validate_message_type = True
            settings.publishing.max_body_size = self._max_body_size
        elif settings.HasField("subscription"):
            subscription = settings.subscription
            subscription.receive_batch_size = RECEIVE_BATCH_SIZE
            subscription.long_polling_timeout.CopyFrom(duration(MAX_LONG_POLLING_MS))
            group = self._group_config(subscription.group.name)
            subscription.fifo = group.consume_message_orderly
            settings.backoff_policy.max_attempts = group.retry_max_times + 1
            customized = settings.backoff_policy.customized_backoff
            del customized.next[:]
            customized.next.extend(duration(ms) for ms in self._retry_delays_ms)
        settings.metric.on = False
        return settings
