"""The ACL calls of :class:`rocketpy.client.admin.AdminClient` (Java's ``MQAdminExt``
``createAndUpdatePlainAccessConfig``, ``deletePlainAccessConfig``, ``updateGlobalWhiteAddrConfig``,
``examineBrokerClusterAclVersionInfo``, ``examineBrokerClusterAclConfig``): codes 50-54, sent to one broker.
A broker with ACL on asks an admin account's signature for each (``credentials=``)."""

from __future__ import annotations

import json
from typing import Any

from rocketpy.acl.config import AccessConfig, AclConfig, AclVersionInfo
from rocketpy.client.adminbase import AdminBase, deferred_method, parse_body
from rocketpy.common.fastjson import BodyError, loads_body
from rocketpy.common.topic import DataVersion
from rocketpy.remoting.codes import RequestCode


def _join(items: list[str] | None) -> str | None:
    return None if items is None else ",".join(items)


def _version(obj: Any) -> DataVersion:
    try:
        return DataVersion.from_json(obj)
    except (TypeError, ValueError):
        raise BodyError(f"not a dataVersion: {obj!r}") from None


def _version_info(fields: dict[str, str]) -> AclVersionInfo:
    try:
        files = json.loads(fields.get("allAclFileVersion") or "{}")
        version = json.loads(fields.get("version") or "{}")
    except ValueError as e:
        raise BodyError(f"unreadable ACL version: {e}") from None
    if not isinstance(files, dict):
        raise BodyError(f"allAclFileVersion is not an object: {files!r}")
    return AclVersionInfo(fields.get("clusterName", ""), fields.get("brokerName", ""), fields.get("brokerAddr", ""),
                          _version(version), {str(path): _version(v) for path, v in files.items()})


def _acl_config(body: bytes) -> AclConfig:
    try:
        return AclConfig.from_json(loads_body(body))
    except ValueError as e:
        raise BodyError(f"unreadable ACL config: {e}") from None


class AclAdmin(AdminBase):
    """Accounts and the global whitelist of a broker's ``plain_acl.yml``."""

    @deferred_method
    async def update_acl_account(self, addr: str, account: AccessConfig) -> None:
        """UPDATE_AND_CREATE_ACL_CONFIG: create the account or change it; the secret key is required and
        ``admin`` is always set; other values left None stay as they are."""
        fields = {"accessKey": account.access_key, "secretKey": account.secret_key,
                  "whiteRemoteAddress": account.white_remote_address, "admin": "true" if account.admin else "false",
                  "defaultTopicPerm": account.default_topic_perm, "defaultGroupPerm": account.default_group_perm,
                  "topicPerms": _join(account.topic_perms), "groupPerms": _join(account.group_perms)}
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
                        {key: value for key, value in fields.items() if value is not None})

    @deferred_method
    async def delete_acl_account(self, addr: str, access_key: str) -> None:
        """DELETE_ACL_CONFIG."""
        await self.call(addr, RequestCode.DELETE_ACL_CONFIG, {"accessKey": access_key})

    @deferred_method
    async def update_global_white_addrs(self, addr: str, patterns: str, acl_file: str | None = None) -> None:
        """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: *patterns* (comma-separated) replace the whitelist."""
        fields = {"globalWhiteAddrs": patterns}
        if acl_file is not None:
            fields["aclFileFullPath"] = acl_file
        await self.call(addr, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, fields)

    @deferred_method
    async def acl_version(self, addr: str) -> AclVersionInfo:
        """GET_BROKER_CLUSTER_ACL_INFO: the broker and the ``dataVersion`` of its ACL file."""
        response = await self.call(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
        return parse_body(_version_info, {k: str(v) for k, v in response.ext_fields.items()})

    @deferred_method
    async def acl_config(self, addr: str) -> AclConfig:
        """GET_BROKER_CLUSTER_ACL_CONFIG: the whitelist and every account, secret keys included."""
        response = await self.call(addr, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        return parse_body(_acl_config, response.body)
