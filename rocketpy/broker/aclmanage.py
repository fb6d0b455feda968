"""The ACL management requests (Java's ``AdminBrokerProcessor.updateAndCreateAccessConfig``,
``deleteAccessConfig``, ``getBrokerAclConfigVersion``, ``updateGlobalWhiteAddrsConfig``,
``getBrokerClusterAclConfig``): ``mqadmin updateAclConfig`` and its kin (doc/security.md).

A change is written to ``plain_acl.yml`` (in the config pool, atomically) and in force at once; the file
watcher is told, so it does not load it again. Changes are made one at a time, as Java's are
(``synchronized``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred, DeferredLock
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from rocketpy.acl.config import AccessConfig, AclConfigError, split_list, split_patterns
from rocketpy.broker.config import BrokerConfig
from rocketpy.common.fastjson import dump_json
from rocketpy.common.headers import get_bool, get_str
from rocketpy.interfaces import IChannel, ICommandLocator
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand

if TYPE_CHECKING:  # they need PyYAML (the acl extra), as does every call that edits the file
    from rocketpy.acl.manage import Edit
    from rocketpy.acl.watch import AclFileWatcher, RunBlocking
    from rocketpy.broker.acl import PlainAccessValidator

#: The remark of every ACL management request while ``aclEnable`` is off.
ACL_OFF = "ACL is not enabled on this broker (aclEnable=false)"


@implementer(ICommandLocator)
class AclAdminProcessor:
    """Answers codes 50-54; with ACL off (*validator* None) each answers its failure code and :data:`ACL_OFF`.

    :param run_blocking: runs the file work in the broker's config pool (as the watcher's reads).
    """

    log = Logger()

    def __init__(self, config: BrokerConfig, validator: PlainAccessValidator | None,
                 watcher: AclFileWatcher | None, run_blocking: RunBlocking, clock: IReactorTime) -> None:
        self._config = config
        self._validator = validator
        self._watcher = watcher
        self._run = run_blocking
        self._clock = clock
        self._lock = DeferredLock()
        #: the ACL file as the version answer names it (Java: the absolute path)
        self._file = os.path.abspath(watcher.path) if watcher is not None else None

    def responders(self) -> Mapping[int, Callable[[IChannel, RemotingCommand], Any]]:
        return {
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: self.update_account,
            RequestCode.DELETE_ACL_CONFIG: self.delete_account,
            RequestCode.GET_BROKER_CLUSTER_ACL_INFO: self.version,
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: self.update_global_white,
            RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG: self.acl_config,
        }

    def update_account(self, channel: IChannel, request: RemotingCommand) -> Any:
        fields = request.ext_fields
        failed = ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
        if self._watcher is None:
            return request.make_response(failed, ACL_OFF)
        config = AccessConfig(
            get_str(fields, "accessKey"), fields.get("secretKey"), fields.get("whiteRemoteAddress"),
            get_bool(fields, "admin"), fields.get("defaultTopicPerm"), fields.get("defaultGroupPerm"),
            split_list(fields.get("topicPerms")), split_list(fields.get("groupPerms")),
        )
        from rocketpy.acl.manage import update_account

        try:
            edit = update_account(config)
        except AclConfigError as e:
            return self._refused(channel, request, failed, e)
        return self._edit(channel, request, edit, failed, f"account {config.access_key} updated")

    def delete_account(self, channel: IChannel, request: RemotingCommand) -> Any:
        failed = ResponseCode.DELETE_ACL_CONFIG_FAILED
        if self._watcher is None:
            return request.make_response(failed, ACL_OFF)
        from rocketpy.acl.manage import delete_account

        access_key = get_str(request.ext_fields, "accessKey")
        return self._edit(channel, request, delete_account(access_key), failed, f"account {access_key} deleted")

    def update_global_white(self, channel: IChannel, request: RemotingCommand) -> Any:
        fields = request.ext_fields
        failed = ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
        if self._watcher is None:
            return request.make_response(failed, ACL_OFF)
        text = get_str(fields, "globalWhiteAddrs")
        file = fields.get("aclFileFullPath")  # Java 4.9.4 requires it, but its mqadmin sends it only with -p
        if file and os.path.abspath(file) != self._file:  # paths compared as text: no file work here
            return self._refused(channel, request, failed, AclConfigError(
                f"The globalWhiteAddresses[{text}] has been updated failed. "
                f"(aclFileFullPath {file} is not this broker's ACL file, {self._file})"))
        from rocketpy.acl.manage import set_global_white

        patterns = split_patterns(text)
        return self._edit(channel, request, set_global_white(patterns), failed,
                          f"global white addresses set to {patterns}")

    def version(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        if self._validator is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, ACL_OFF)
        version = self._validator.acl.version.to_json()
        config = self._config
        fields = {
            "version": dump_json(version).decode(),
            "allAclFileVersion": dump_json({self._file: version}).decode(),
            "brokerName": config.broker_name, "brokerAddr": config.advertised_address,
            "clusterName": config.cluster_name,
        }
        return request.make_response(ResponseCode.SUCCESS, None, fields)

    def acl_config(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        if self._validator is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, ACL_OFF)
        body = dump_json(self._validator.acl.config.to_json())
        return request.make_response(ResponseCode.SUCCESS, None, None, body)

    def _refused(self, channel: IChannel, request: RemotingCommand, code: int, error: AclConfigError) -> RemotingCommand:
        self.log.warn("ACL change from {peer} refused, the file is unchanged: {error}",
                      peer=channel.remote_address, error=str(error).replace("\n", " "))
        return request.make_response(code, str(error))

    def _edit(self, channel: IChannel, request: RemotingCommand, edit: Edit, failed: int,
              what: str) -> Deferred[RemotingCommand]:
        return Deferred.fromCoroutine(self._edit_one_at_a_time(channel, request, edit, failed, what))

    async def _edit_one_at_a_time(self, channel: IChannel, request: RemotingCommand, edit: Edit, failed: int,
                                  what: str) -> RemotingCommand:
        from rocketpy.acl.manage import edit_acl_file

        assert self._watcher is not None
        await self._lock.acquire()
        try:
            now_ms = int(self._clock.seconds() * 1000)
            acl, stamp = await self._run(edit_acl_file, self._watcher.path, edit, now_ms)
            self._watcher.adopt(acl, stamp)  # in force now; the watcher will not load it again
        except AclConfigError as e:
            return self._refused(channel, request, failed, e)
        finally:
            self._lock.release()
        self.log.info("ACL {what} by {peer} (dataVersion {counter})", what=what, peer=channel.remote_address,
                      counter=acl.version.counter)
        return request.make_response(ResponseCode.SUCCESS)
