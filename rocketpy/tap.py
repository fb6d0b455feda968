"""``twistd rocketpy``: options and the service tree (name server and/or broker).

``makeService`` only builds objects: ports, files and threads start in the
services' ``startService``, after twistd has daemonized.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.logger import Logger, LogLevel
from twisted.python import usage
from twisted.python.failure import Failure

from rocketpy.grpc.endpoint import listen_address
from rocketpy.ha.config import ha_listen_endpoint
from rocketpy.store.config import DEFAULT_DELAY_LEVELS, SYNC_FLUSH_COMPLETIONS
from rocketpy.util.gctuning import DEFAULT_GEN0_THRESHOLD, GCThresholdService
from rocketpy.util.heaptuning import DEFAULT_HEAP_KEEP, HeapKeepService
from rocketpy.util.service import OrderedMultiService

if TYPE_CHECKING:
    from rocketpy.broker.config import BrokerConfig
    from rocketpy.store.config import MessageStoreConfig

_Tree = TypeVar("_Tree", bound=OrderedMultiService)

ROLES = ("all", "namesrv", "broker")
DEFAULT_GRPC_LISTEN = "tcp:8081:interface=127.0.0.1"
FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
DEFAULTS: dict[str, str] = {
    "role": "all",
    "namesrv-listen": "tcp:9876:interface=127.0.0.1",
    "listen": "tcp:10911:interface=127.0.0.1",
    "store-dir": os.path.join("~", ".rocketpy", "store"),
    "namesrv-config-dir": os.path.join("~", ".rocketpy", "namesrv"),
    "flush-disk-type": "ASYNC_FLUSH",
    "sync-flush-completion": "native",
    "commit-log-file-size": str(1024 * 1024 * 1024),
    "consume-queue-file-size": str(300_000 * 20),
    "commit-log-page-cache-keep": str(1 << 30),
    "max-hash-slot-num": str(5_000_000),
    "max-index-num": str(20_000_000),
    "broker-name": "broker-a",
    "cluster-name": "DefaultCluster",
    "broker-id": "0",
    "broker-role": "ASYNC_MASTER",
    "auto-create-topic-enable": "true",
    "default-topic-queue-nums": "8",
    "slave-read-enable": "false",
    "enable-property-filter": "false",
    "clean-file-forcibly-enable": "false",
    "trace-topic-enable": "false",
    "msg-trace-topic-name": "RMQ_SYS_TRACE_TOPIC",
    "message-delay-level": DEFAULT_DELAY_LEVELS,
    "timer-wheel-enable": "true",
    "timer-max-delay-sec": str(3 * 24 * 3600),
    "timer-precision-ms": "1000",
    "gc-threshold": str(DEFAULT_GEN0_THRESHOLD),
    "heap-keep": str(DEFAULT_HEAP_KEEP),
    "transaction-check-interval": "60000",
    "transaction-timeout": "6000",
}
#: ``--http`` of the all-in-one role.
DEFAULT_HTTP = "tcp:8080:interface=127.0.0.1"
#: RocketMQ ``broker.conf`` names accepted in ``--config`` files, besides the option names.
JAVA_KEYS = {
    "brokerName": "broker-name",
    "brokerClusterName": "cluster-name",
    "brokerId": "broker-id",
    "brokerRole": "broker-role",
    "namesrvAddr": "namesrv-addr",
    "storePathRootDir": "store-dir",
    "flushDiskType": "flush-disk-type",
    "mappedFileSizeCommitLog": "commit-log-file-size",
    "mappedFileSizeConsumeQueue": "consume-queue-file-size",
    "maxHashSlotNum": "max-hash-slot-num",
    "maxIndexNum": "max-index-num",
    "autoCreateTopicEnable": "auto-create-topic-enable",
    "defaultTopicQueueNums": "default-topic-queue-nums",
    "haMasterAddress": "ha-master-address",
    "slaveReadEnable": "slave-read-enable",
    "enablePropertyFilter": "enable-property-filter",
    "cleanFileForciblyEnable": "clean-file-forcibly-enable",
    "traceTopicEnable": "trace-topic-enable",
    "msgTraceTopicName": "msg-trace-topic-name",
    "messageDelayLevel": "message-delay-level",
    "timerWheelEnable": "timer-wheel-enable",
    "timerMaxDelaySec": "timer-max-delay-sec",
    "timerPrecisionMs": "timer-precision-ms",
    "aclEnable": "acl-enable",
    "tls.server.mode": "tls-mode",
    "tls.server.certPath": "tls-cert",
    "tls.server.keyPath": "tls-key",
    "tls.server.trustCertPath": "tls-ca",
    "transactionCheckInterval": "transaction-check-interval",
    "transactionTimeOut": "transaction-timeout",
}
_BOOL_OPTIONS = ("auto-create-topic-enable", "slave-read-enable", "enable-property-filter",
                 "clean-file-forcibly-enable", "trace-topic-enable", "timer-wheel-enable")
_INT_OPTIONS = (
    "commit-log-file-size", "consume-queue-file-size", "commit-log-page-cache-keep", "max-hash-slot-num", "max-index-num",
    "broker-id", "default-topic-queue-nums", "gc-threshold", "heap-keep", "transaction-check-interval", "transaction-timeout",
    "timer-max-delay-sec", "timer-precision-ms",
)
_KEY_VALUE = re.compile(r"([^=:\s]+)\s*[=:]\s*(.*)$")
_ENDPOINT_PORT = re.compile(r"^(?:tcp|tcp6):(?:port=)?(\d+)(?::|$)")


def endpoint_port(description: str) -> int | None:
    """The port of a ``tcp:PORT:…`` server endpoint string, or None."""
    match = _ENDPOINT_PORT.match(description)
    return int(match.group(1)) if match else None


def read_config_file(path: str) -> Iterator[tuple[str, str]]:
    """``key=value`` (or ``key: value``) pairs of a broker.conf-like file; ``#`` and ``!`` start comments.

    :raises usage.UsageError: when the file cannot be read or a line has no separator.
    """
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise usage.UsageError(f"cannot read config file {path}: {e.strerror}") from None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = _KEY_VALUE.match(line)
        if match is None:
            raise usage.UsageError(f"{path}:{number}: expected key=value, got {line!r}")
        yield match.group(1), match.group(2).strip()


class Options(usage.Options):
    """Command line of ``twistd rocketpy``; every option can also come from ``--config``."""

    synopsis = "[options]"
    optParameters = [
        ["role", None, None, "what to run: all | namesrv | broker [default: all]"],
        ["namesrv-listen", None, None, "name server endpoint [default: tcp:9876:interface=127.0.0.1]"],
        ["listen", "l", None, "broker endpoint [default: tcp:10911:interface=127.0.0.1]"],
        ["fast-listen", None, None,
         "second broker endpoint (e.g. tcp:10909:interface=127.0.0.1) for Java clients <= 4.5.0, "
         "which send to listen port - 2 [default: none]"],
        ["advertised-address", None, None,
         "broker ip:port that clients reach, written into every stored message [default: 127.0.0.1:<listen port>]"],
        ["namesrv-addr", "n", None,
         "name servers the broker registers with, ';'-separated [default: 127.0.0.1:<namesrv-listen port>]"],
        ["store-dir", "d", None, "broker data root (commitlog/, config/ …) [default: ~/.rocketpy/store]"],
        ["namesrv-config-dir", None, None, "where the name server keeps kvConfig.json [default: ~/.rocketpy/namesrv]"],
        ["flush-disk-type", None, None, "ASYNC_FLUSH | SYNC_FLUSH [default: ASYNC_FLUSH]"],
        ["sync-flush-completion", None, None,
         "SYNC_FLUSH's fdatasync: native (a C thread) | uring (io_uring) | thread (Python) [default: native]"],
        ["commit-log-file-size", None, None, "bytes per commit log file [default: 1073741824]"],
        ["consume-queue-file-size", None, None, "bytes per consume queue file [default: 6000000]"],
        ["commit-log-page-cache-keep", None, None,
         "bytes of the commit log kept in the page cache behind its flushed offset; older pages no "
         "reader read in the last minute are dropped (reads of them go to the disk); 0 keeps all "
         "[default: 1073741824]"],
        ["max-hash-slot-num", None, None, "hash slots per index file [default: 5000000]"],
        ["max-index-num", None, None, "entries per index file (40 + 4 x slots + 20 x entries bytes) [default: 20000000]"],
        ["broker-name", None, None, "[default: broker-a]"],
        ["cluster-name", None, None, "[default: DefaultCluster]"],
        ["broker-id", None, None, "0 = master [default: 0]"],
        ["broker-role", None, None, "ASYNC_MASTER | SYNC_MASTER | SLAVE [default: ASYNC_MASTER]"],
        ["auto-create-topic-enable", None, None, "create topics on first send from TBW102 [default: true]"],
        ["default-topic-queue-nums", None, None, "queues of TBW102 [default: 8]"],
        ["ha-listen", None, None, "a master's HA endpoint for its slaves [default: tcp:<listen port + 1>]"],
        ["ha-master-address", None, None, "a slave's master HA ip:port [default: from the name server]"],
        ["slave-read-enable", None, None, "a master lagging in memory sends consumers to its slave [default: false]"],
        ["enable-property-filter", None, None, "serve SQL92 subscriptions (true | false) [default: false]"],
        ["clean-file-forcibly-enable", None, None,
         "above 85 % disk use delete the oldest files even when unconsumed (RocketMQ's rule); false refuses "
         "puts while a group still has messages in the oldest file [default: false]"],
        ["trace-topic-enable", None, None, "create the message trace topic (true | false) [default: false]"],
        ["msg-trace-topic-name", None, None, "the message trace topic [default: RMQ_SYS_TRACE_TOPIC]"],
        ["message-delay-level", None, None, 'delay of each DELAY level, units s m h d [default: "1s 5s 10s … 2h"]'],
        ["timer-wheel-enable", None, None, "serve timer messages (TIMER_DELIVER_MS …, 5.x delivery times) [default: true]"],
        ["timer-max-delay-sec", None, None, "longest timer delay; longer ones are refused [default: 259200, 3 days]"],
        ["timer-precision-ms", None, None, "timer step: 100, 200, 500 or 1000 [default: 1000]"],
        ["gc-threshold", None, None,
         f"the garbage collector's first-generation threshold; 0 keeps Python's [default: {DEFAULT_GEN0_THRESHOLD}]"],
        ["heap-keep", None, None,
         "bytes of freed heap glibc keeps rather than returning them to the kernel (M_TRIM_THRESHOLD; "
         f"allocations below half of it come from the heap); 0 keeps glibc's [default: {DEFAULT_HEAP_KEEP}]"],
        ["http", None, None,
         "endpoint serving /metrics (Prometheus) and the dashboard (/), or none [default: tcp:8080:interface=127.0.0.1 "
         "with --role all, none otherwise]"],
        ["grpc-listen", None, None,
         "RocketMQ 5.x gRPC endpoint, or none [default: tcp:8081:interface=127.0.0.1 with --role all, else none]"],
        ["grpc-advertised-address", None, None,
         "host:port that the gRPC QueryRoute returns for this broker, also published to the name servers for the "
         "other brokers' routes [default: the address the client reached; published: broker host, gRPC port]"],
        ["transaction-check-interval", None, None,
         "ms between the broker's checks of undecided transactions [default: 60000]"],
        ["transaction-timeout", None, None, "ms a half message waits before its first check [default: 6000]"],
        ["config", "c", None, "key=value file (option names or RocketMQ broker.conf names)"],
        ["acl-file", None, None, "plain_acl.yml of --acl-enable, re-read when it changes (doc/security.md)"],
        ["tls-mode", None, None, "disabled | permissive (TLS and plain TCP; gRPC: plain only) | enforcing (TLS only) "
         "[default: enforcing with --tls-cert, else disabled]"],
        ["tls-cert", None, None, "PEM certificate of the broker, name server and gRPC ports"],
        ["tls-key", None, None, "PEM private key of --tls-cert"],
        ["tls-ca", None, None, "PEM CA: clients must present a certificate it signed [default: none asked]"],
    ]
    optFlags = [["acl-enable", None, "check every broker request against --acl-file (RocketMQ plain ACL)"],
                ["http-admin", None, "enable the dashboard's write actions on --http: create topic, reset offsets, "
                 "resend dead letters (doc/dashboard.md)"]]

    def postOptions(self) -> None:
        """Merge: command line, then ``--config``, then defaults; validate; derive addresses."""
        from_file: dict[str, str] = {}
        ignored: list[str] = []
        if self["config"]:
            for key, value in read_config_file(self["config"]):
                name = JAVA_KEYS.get(key, key.replace("_", "-"))
                if key in ("listenPort", "haListenPort"):
                    from_file["listen" if key == "listenPort" else "ha-listen"] = f"tcp:{value}:interface=127.0.0.1"
                elif key == "brokerIP1":
                    from_file["advertised-host"] = value
                elif name in self.opts and name != "config":
                    from_file[name] = value
                else:
                    ignored.append(key)
        self["ignored-config-keys"] = ignored
        for name in [str(p[0]) for p in self.optParameters]:
            if self[name] is None:
                self[name] = from_file.get(name, DEFAULTS.get(name))
        for flag in ("acl-enable", "http-admin"):
            self[flag] = bool(self[flag]) or from_file.get(flag, "").strip().lower() == "true"
        self._validate()
        self._derive(from_file.get("advertised-host"))
        self._security()
        self._grpc()

    def _security(self) -> None:
        """Check the ACL file and the TLS files now, so a mistake is a usage error, not a failed start."""
        if self["acl-enable"]:
            if not self["acl-file"]:
                raise usage.UsageError("--acl-enable needs --acl-file PATH (a plain_acl.yml)")
            try:
                from rocketpy.acl.watch import load_acl_file

                load_acl_file(os.path.expanduser(self["acl-file"]))
            except ImportError as e:
                raise usage.UsageError(f"--acl-enable needs PyYAML: pip install 'rocketpy[acl]' ({e})") from None
            except ValueError as e:
                raise usage.UsageError(f"--acl-file: {e}") from None
        from rocketpy.remoting.tls import TLS_MODES, ServerTLS, TLSConfigError

        mode = self["tls-mode"] or ("enforcing" if self["tls-cert"] else "disabled")
        if mode not in TLS_MODES:
            raise usage.UsageError(f"--tls-mode must be one of {', '.join(TLS_MODES)}, not {mode!r}")
        self["tls"] = None
        if mode == "disabled":
            return
        if not self["tls-cert"] or not self["tls-key"]:
            raise usage.UsageError(f"--tls-mode {mode} needs --tls-cert and --tls-key")
        ca = os.path.expanduser(self["tls-ca"]) if self["tls-ca"] else None
        tls = ServerTLS(os.path.expanduser(self["tls-cert"]), os.path.expanduser(self["tls-key"]), ca, mode)
        try:
            tls.context_factory()
        except TLSConfigError as e:
            raise usage.UsageError(f"TLS: {e}") from None
        self["tls"] = tls
    def _grpc(self) -> None:
        """``grpc-listen`` (None when off) and ``grpc-advertised`` ((host, port) or None)."""
        self["grpc-explicit"] = self["grpc-listen"] is not None
        if self["grpc-listen"] is None:
            self["grpc-listen"] = DEFAULT_GRPC_LISTEN if self["role"] == "all" else "none"
        if self["grpc-listen"] == "none" or self["role"] == "namesrv":
            self["grpc-listen"] = None
        else:
            try:
                listen_address(self["grpc-listen"])
            except ValueError as e:
                raise usage.UsageError(str(e)) from None
        self["grpc-advertised"] = None
        address = self["grpc-advertised-address"]
        if address is not None:
            if not re.fullmatch(r"[^:\s]+:\d+", address):
                raise usage.UsageError(f"--grpc-advertised-address must be host:port, not {address!r}")
            host, _, port = address.rpartition(":")
            self["grpc-advertised"] = (host, int(port))

    def _validate(self) -> None:
        for name, allowed in (("role", ROLES), ("flush-disk-type", FLUSH_TYPES), ("broker-role", BROKER_ROLES),
                              ("sync-flush-completion", SYNC_FLUSH_COMPLETIONS)):
            if self[name] not in allowed:
                raise usage.UsageError(f"--{name} must be one of {', '.join(allowed)}, not {self[name]!r}")
        for name in _INT_OPTIONS:
            try:
                self[name] = int(self[name])
            except ValueError:
                raise usage.UsageError(f"--{name} must be an integer, not {self[name]!r}") from None
        for name in _BOOL_OPTIONS:
            value = str(self[name]).lower()
            if value not in ("true", "false"):
                raise usage.UsageError(f"--{name} must be true or false, not {value!r}")
            self[name] = value == "true"
        levels = self["message-delay-level"]
        if not re.fullmatch(r"\s*(\d+[smhd]\s*)+", levels):
            raise usage.UsageError(f"--message-delay-level must be like '1s 5s 1m 2h', not {levels!r}")
        if self["transaction-check-interval"] <= 0 or self["transaction-timeout"] < 0:
            raise usage.UsageError("--transaction-check-interval must be above 0 ms, --transaction-timeout 0 ms or more")
        if self["broker-role"] == "SLAVE" and self["broker-id"] <= 0:
            raise usage.UsageError("a SLAVE needs --broker-id 1 or more")
        if self["broker-role"] != "SLAVE":
            self["broker-id"] = 0  # as RocketMQ: a master is always id 0

    def _derive(self, advertised_host: str | None) -> None:
        if self["advertised-address"] is None:
            port = endpoint_port(self["listen"])
            if port is None:
                raise usage.UsageError("--advertised-address is needed when --listen has no tcp port")
            self["advertised-address"] = f"{advertised_host or '127.0.0.1'}:{port}"
        if not re.fullmatch(r"[^:\s]+:\d+", self["advertised-address"]):
            raise usage.UsageError(f"--advertised-address must be ip:port, not {self['advertised-address']!r}")
        if self["namesrv-addr"] is None:
            port = endpoint_port(self["namesrv-listen"]) or 9876
            self["namesrv-addr"] = f"127.0.0.1:{port}"
        self["namesrv-addr-list"] = [a.strip() for a in re.split(r"[;,]", self["namesrv-addr"]) if a.strip()]
        if self["ha-master-address"] is not None and not re.fullmatch(r"[^:\s]+:\d+", self["ha-master-address"]):
            raise usage.UsageError(f"--ha-master-address must be ip:port, not {self['ha-master-address']!r}")
        self._derive_http()
        if self["ha-listen"] is None and self["broker-role"] != "SLAVE":
            try:
                self["ha-listen"] = ha_listen_endpoint(self["listen"])
            except ValueError:
                raise usage.UsageError("--ha-listen is needed when --listen has no tcp port") from None

    def _derive_http(self) -> None:
        """``--http``: on by default only for the all-in-one role (one broker per machine: several
        brokers of one host would fight over a fixed port); ``none`` turns it off."""
        if self["http"] is None:
            self["http"] = DEFAULT_HTTP if self["role"] == "all" else "none"
        if self["http"] == "none":
            if self["http-admin"]:
                raise usage.UsageError("--http-admin enables the dashboard's write actions: it needs --http")
            return
        if self["role"] == "namesrv":
            raise usage.UsageError("--http serves a broker's metrics: use it with --role all or broker")
        try:
            serverFromString(None, self["http"])
        except Exception as e:  # ValueError, KeyError … and, for ssl:, unreadable certificate files
            raise usage.UsageError(f"--http must be a server endpoint like {DEFAULT_HTTP}, or none; "
                                   f"not {self['http']!r} ({type(e).__name__}: {e})") from None


class OrderedServices(OrderedMultiService):
    """``twistd rocketpy``'s top service: the ordered tree (:class:`OrderedMultiService`) whose
    failed start stops the process.

    :param exit_process: ends the process with a status, once the reactor has shut down after
        a failed start (twistd's runners would exit 0); default :func:`os._exit`.
    """

    def __init__(self, reactor: Any, exit_process: Callable[[int], object] = os._exit) -> None:
        super().__init__()
        self._reactor = reactor
        self._exit_process = exit_process

    def startService(self) -> Deferred[None]:
        return super().startService().addErrback(self._start_failed)

    def _start_failed(self, failure: Failure) -> None:
        """A part that cannot start (a port in use, a locked store) stops the whole process,
        which then exits with status 1 (after every started part stopped)."""
        self.log.failure("rocketpy cannot start ({error}): stopping", failure, level=LogLevel.critical,
                         error=failure.getErrorMessage())
        self._reactor.addSystemEventTrigger("after", "shutdown", self._exit_failed)
        # twistd starts services before reactor.run(): stop once it runs
        self._reactor.callWhenRunning(self._reactor.stop)

    def _exit_failed(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        self._exit_process(1)


def _grpc_service(reactor: Any, options: Options, broker: Any, delays_ms: list[int], log: Logger) -> Any:
    """The 5.x gRPC endpoint beside the broker (doc/grpc.md); None when grpcio is not installed
    and the endpoint was not asked for explicitly."""
    try:
        from rocketpy.grpc.server import GrpcService, broker_access, broker_messaging
    except ImportError as e:
        if options["grpc-explicit"]:
            raise usage.UsageError(f"--grpc-listen needs pip install 'rocketpy[grpc]' ({e})") from None
        log.info("no gRPC endpoint for 5.x clients: pip install 'rocketpy[grpc]' to add it")
        return None
    return GrpcService(reactor, options["grpc-listen"],
                       lambda: broker_messaging(reactor, broker, delays_ms, options["grpc-advertised"]),
                       broker_access(broker), options.get("tls"))


def install_lean_reactor() -> None:
    """Install the rocketpy reactor (rocketpy/remoting/reactor.py) unless one is installed already
    (``twistd --reactor NAME``, ``python -m twisted``, a test run) or epoll is missing."""
    if "twisted.internet.reactor" in sys.modules:
        return
    try:
        from rocketpy.remoting.reactor import install
    except ImportError:  # no epoll: Twisted's default
        return
    install()


def makeService(options: Options, reactor: Any = None) -> OrderedServices:
    """The name server and/or broker of ``options``; nothing is opened or started here."""
    if reactor is None:
        install_lean_reactor()
        from twisted.internet import reactor  # the global reactor only at the edge
    return build_tree(options, reactor, OrderedServices(reactor))


def build_tree(options: Options, reactor: Any, top: _Tree) -> _Tree:
    """Add the services of ``options`` to ``top`` in start order (each starts once the previous one
    has; they stop in reverse): GC and heap tuning, name server, broker, its gRPC endpoint, then its HTTP
    endpoint. Adding a service is one ``top.add(name, service)`` line here."""
    log = Logger(namespace="rocketpy.tap")
    top.add("gc", GCThresholdService(options["gc-threshold"]))
    top.add("heap", HeapKeepService(options["heap-keep"]))
    if options["role"] in ("all", "namesrv"):
        from rocketpy.namesrv.service import NamesrvService

        top.add("namesrv", NamesrvService(reactor, options["namesrv-listen"], options["namesrv-config-dir"],
                                          tls=options.get("tls")))
    if options["role"] in ("all", "broker"):
        from rocketpy.broker.controller import BrokerService

        config, store_config = _broker_configs(options)
        broker = top.add("broker", BrokerService(reactor, config, store_config, tls=options.get("tls")))
        if options["grpc-listen"] is not None:
            grpc = _grpc_service(reactor, options, broker, store_config.delay_level_table(), log)
            if grpc is not None:
                top.add("grpc", grpc)
        if options["http"] != "none":
            from rocketpy.web.service import http_service

            top.add("http", http_service(reactor, options["http"], broker, options["http-admin"]))
    for key in options.get("ignored-config-keys", []):
        log.info("config file key {key} is not used by rocketpy", key=key)
    return top


def _broker_configs(options: Options) -> tuple[BrokerConfig, MessageStoreConfig]:
    """The broker's and its store's settings from ``options``."""
    from rocketpy.broker.config import BrokerConfig
    from rocketpy.store.config import MessageStoreConfig

    config = BrokerConfig(
        broker_name=options["broker-name"],
        cluster_name=options["cluster-name"],
        broker_id=options["broker-id"],
        broker_role=options["broker-role"],
        listen=options["listen"],
        fast_listen=options["fast-listen"],
        advertised_address=options["advertised-address"],
        namesrv_addr=options["namesrv-addr-list"],
        auto_create_topic_enable=options["auto-create-topic-enable"],
        default_topic_queue_nums=options["default-topic-queue-nums"],
        ha_listen=options["ha-listen"],
        ha_master_address=options["ha-master-address"],
        slave_read_enable=options["slave-read-enable"],
        acl_enable=bool(options.get("acl-enable")),
        acl_file=os.path.expanduser(options["acl-file"]) if options.get("acl-file") else None,
        enable_property_filter=options["enable-property-filter"],
        trace_topic_enable=options["trace-topic-enable"],
        msg_trace_topic_name=options["msg-trace-topic-name"],
        transaction_check_interval=options["transaction-check-interval"] / 1000,
        transaction_timeout=options["transaction-timeout"] / 1000,
    )
    store_config = MessageStoreConfig(
        store_path_root_dir=os.path.expanduser(options["store-dir"]),
        flush_disk_type=options["flush-disk-type"],
        sync_flush_completion=options["sync-flush-completion"],
        mapped_file_size_commit_log=options["commit-log-file-size"],
        mapped_file_size_consume_queue=options["consume-queue-file-size"],
        commit_log_page_cache_keep=options["commit-log-page-cache-keep"],
        max_hash_slot_num=options["max-hash-slot-num"],
        max_index_num=options["max-index-num"],
        broker_role=options["broker-role"],
        message_delay_level=options["message-delay-level"],
        clean_file_forcibly_enable=options["clean-file-forcibly-enable"],
        timer_wheel_enable=options["timer-wheel-enable"],
        timer_max_delay_sec=options["timer-max-delay-sec"],
        timer_precision_ms=options["timer-precision-ms"],
    )
    return config, store_config
