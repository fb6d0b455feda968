"""The name server's request processor: one handler per request code (doc/wire.md §2).

Handlers return the response at once, except the KV writes, which answer once the KV file
is written (off the reactor thread). Header and body errors become SYSTEM_ERROR responses
whose remark names the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from zope.interface import implementer

from rocketpy.common.headers import get_bool, get_int, get_str, to_fields
from rocketpy.common.message import body_crc
from rocketpy.common.properties import format_properties, parse_properties
from rocketpy.common.route import NAMESPACE_ORDER_TOPIC_CONFIG
from rocketpy.interfaces import ICommandLocator
from rocketpy.namesrv import bodies
from rocketpy.namesrv.kvconfig import KVConfigManager
from rocketpy.namesrv.routeinfo import FLAG_UNIT, FLAG_UNIT_SUB, RouteInfoManager
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand

#: Name server settings that UPDATE_NAMESRV_CONFIG may not change (as Java 4.9.7).
CONFIG_BLACKLIST = frozenset({"configBlackList", "configStorePath", "kvConfigPath"})

_Handler = Callable[[object, RemotingCommand], "RemotingCommand | Deferred[RemotingCommand]"]


@implementer(ICommandLocator)
class NamesrvProcessor:
    """Answers every name server request code, one method each (:meth:`responders`).

    :param route_info: the route tables.
    :param kv_config: the KV config (already loaded).
    :param clock: the time source for broker last-update times.
    :param config: the name server settings GET/UPDATE_NAMESRV_CONFIG show and change.
    """

    log = Logger()

    def __init__(
        self,
        route_info: RouteInfoManager,
        kv_config: KVConfigManager,
        clock: IReactorTime,
        config: Mapping[str, str] | None = None,
    ) -> None:
        self._routes = route_info
        self._kv = kv_config
        self._clock = clock
        self._config = dict(config or {})
        self._handlers: dict[int, _Handler] = {
            RequestCode.PUT_KV_CONFIG: self._put_kv_config,
            RequestCode.GET_KV_CONFIG: self._get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self._get_kv_list,
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._get_all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self._get_system_topics,
            RequestCode.GET_UNIT_TOPIC_LIST: self._unit_topics(FLAG_UNIT),
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self._unit_topics(FLAG_UNIT_SUB),
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self._unit_topics(FLAG_UNIT_SUB, FLAG_UNIT),
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self._wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self._add_write_perm,
            RequestCode.UPDATE_NAMESRV_CONFIG: self._update_config,
            RequestCode.GET_NAMESRV_CONFIG: self._get_config,
        }

    def responders(self) -> dict[int, _Handler]:
        """Request code → its handler (the server registers each under its code)."""
        return self._handlers

    # -- KV config -------------------------------------------------------

    def _put_kv_config(self, channel: object, request: RemotingCommand) -> Deferred[RemotingCommand]:
        ext = request.ext_fields
        namespace, key = get_str(ext, "namespace"), get_str(ext, "key")
        return self._once_written(self._kv.put(namespace, key, get_str(ext, "value")), request)

    def _get_kv_config(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        namespace, key = get_str(request.ext_fields, "namespace"), get_str(request.ext_fields, "key")
        value = self._kv.get(namespace, key)
        if value is None:
            remark = f"No config item, Namespace: {namespace} Key: {key}"
            return request.make_response(ResponseCode.QUERY_NOT_FOUND, remark)
        return request.make_response(ResponseCode.SUCCESS, ext_fields={"value": value})

    def _delete_kv_config(self, channel: object, request: RemotingCommand) -> Deferred[RemotingCommand]:
        written = self._kv.delete(get_str(request.ext_fields, "namespace"), get_str(request.ext_fields, "key"))
        return self._once_written(written, request)

    def _once_written(self, written: Deferred[None], request: RemotingCommand) -> Deferred[RemotingCommand]:
        """SUCCESS once the KV file is written; SYSTEM_ERROR (logged) when writing failed."""

        def failed(failure: Failure) -> RemotingCommand:
            failure.trap(OSError)
            self.log.failure("name server request {code} failed", failure, level=LogLevel.error, code=request.code)
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"I/O error: {failure.value}")

        return written.addCallbacks(lambda _: request.make_response(ResponseCode.SUCCESS), failed)

    def _get_kv_list(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        namespace = get_str(request.ext_fields, "namespace")
        table = self._kv.namespace(namespace)
        if table is None:
            return request.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        return request.make_response(ResponseCode.SUCCESS, body=bodies.encode_kv_table(table))

    # -- brokers ---------------------------------------------------------

    def _register_broker(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        cluster, addr = get_str(ext, "clusterName"), get_str(ext, "brokerAddr")
        name, ha_addr = get_str(ext, "brokerName"), get_str(ext, "haServerAddr")
        broker_id = get_int(ext, "brokerId")
        expected_crc = get_int(ext, "bodyCrc32", 0)
        if expected_crc != 0 and body_crc(request.body) != expected_crc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        body = bodies.decode_register_body(request.body, get_bool(ext, "compressed"))
        result = self._routes.register_broker(
            cluster,
            addr,
            name,
            broker_id,
            ha_addr,
            self._clock.seconds(),
            body.data_version,
            body.topic_configs,
            body.filter_servers,
            channel,
        )
        reply = to_fields(haServerAddr=result.ha_server_addr, masterAddr=result.master_addr)
        order_conf = self._kv.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        reply_body = bodies.encode_kv_table(order_conf) if order_conf is not None else b""
        return request.make_response(ResponseCode.SUCCESS, ext_fields=reply, body=reply_body)

    def _unregister_broker(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        self._routes.unregister_broker(
            get_str(ext, "clusterName"),
            get_str(ext, "brokerAddr"),
            get_str(ext, "brokerName"),
            get_int(ext, "brokerId"),
        )
        return request.make_response(ResponseCode.SUCCESS)

    def _query_data_version(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        for name in ("clusterName", "brokerName", "brokerId"):
            get_str(ext, name)
        addr = get_str(ext, "brokerAddr")
        changed = self._routes.is_broker_topic_config_changed(addr, bodies.decode_data_version(request.body))
        if not changed:
            self._routes.touch_broker(addr, self._clock.seconds())
        stored = self._routes.query_data_version(addr)
        body = bodies.encode_data_version(stored) if stored is not None else b""
        return request.make_response(ResponseCode.SUCCESS, ext_fields=to_fields(changed=changed), body=body)

    # -- routes and topic lists ------------------------------------------

    def _get_route_info(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        topic = get_str(request.ext_fields, "topic")
        route = self._routes.pickup_topic_route_data(topic)
        if route is None:
            remark = f"No topic route info in name server for the topic: {topic}"
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST, remark)
        route.order_topic_conf = self._kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        return request.make_response(ResponseCode.SUCCESS, body=bodies.encode_topic_route(route))

    def _get_cluster_info(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        brokers, clusters = self._routes.cluster_info()
        return request.make_response(ResponseCode.SUCCESS, body=bodies.encode_cluster_info(brokers, clusters))

    def _get_all_topics(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=bodies.encode_topic_list(self._routes.topic_list()))

    def _get_topics_by_cluster(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        topics = self._routes.topics_by_cluster(get_str(request.ext_fields, "cluster"))
        return request.make_response(ResponseCode.SUCCESS, body=bodies.encode_topic_list(topics))

    def _get_system_topics(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        topics, broker_addr = self._routes.system_topic_list()
        return request.make_response(ResponseCode.SUCCESS, body=bodies.encode_topic_list(topics, broker_addr))

    def _unit_topics(self, required: int, forbidden: int = 0) -> _Handler:
        def handler(channel: object, request: RemotingCommand) -> RemotingCommand:
            topics = self._routes.topics_with_sys_flag(required, forbidden)
            return request.make_response(ResponseCode.SUCCESS, body=bodies.encode_topic_list(topics))

        return handler

    # -- admin -----------------------------------------------------------

    def _delete_topic(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        self._routes.delete_topic(get_str(ext, "topic"), ext.get("clusterName") or None)
        return request.make_response(ResponseCode.SUCCESS)

    def _wipe_write_perm(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        count = self._routes.wipe_write_perm_of_broker(get_str(request.ext_fields, "brokerName"))
        return request.make_response(ResponseCode.SUCCESS, ext_fields=to_fields(wipeTopicCount=count))

    def _add_write_perm(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        count = self._routes.add_write_perm_of_broker(get_str(request.ext_fields, "brokerName"))
        return request.make_response(ResponseCode.SUCCESS, ext_fields=to_fields(addTopicCount=count))

    def _update_config(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        try:
            updates = parse_properties(request.body.decode("utf-8"))
        except UnicodeDecodeError:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "string2Properties error")
        if CONFIG_BLACKLIST.intersection(updates):
            return request.make_response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        self._config.update(updates)
        self.log.info("name server config updated: {keys}", keys=sorted(updates))
        return request.make_response(ResponseCode.SUCCESS)

    def _get_config(self, channel: object, request: RemotingCommand) -> RemotingCommand:
        body = format_properties(self._config).encode("utf-8")
        return request.make_response(ResponseCode.SUCCESS, body=body)
