"""``rocketpy-admin``'s ACL sub-commands, mqadmin's names and short flags: updateAclConfig,
deleteAclConfig, updateGlobalWhiteAddr, clusterAclConfigVersion, getAclConfig (doc/admin.md).

The account an ACL sub-command changes is ``-a``/``-s`` (``--account``/``--accountSecret``): the long
``--accessKey``/``--secretKey`` are the account signing the request, which must be an admin."""

from __future__ import annotations

from argparse import Namespace

from rocketpy.acl.config import AccessConfig, AclConfig, split_list
from rocketpy.admin.commands import BROKER_ADDR, CLUSTER, Output, _bool, _targets, arg, command
from rocketpy.admin.render import human_time, table
from rocketpy.client.admin import AdminClient

ONE_OF = ("brokerAddr", "clusterName")


@command("updateAclConfig", "create or change an ACL account in the brokers' plain_acl.yml", BROKER_ADDR, CLUSTER,
         arg("-a", "--account", required=True, help="the account's access key (longer than 6 characters)"),
         arg("-s", "--accountSecret", help="its secret key (longer than 6 characters; required, as in mqadmin)"),
         arg("-w", "--whiteRemoteAddress", help="addresses whose requests need no signature, e.g. 192.168.1.*"),
         arg("-i", "--defaultTopicPerm", help="PUB, SUB, PUB|SUB or DENY for topics not listed"),
         arg("-u", "--defaultGroupPerm", help="PUB, SUB, PUB|SUB or DENY for groups not listed"),
         arg("-t", "--topicPerms", help="e.g. topicA=DENY,topicB=PUB|SUB (replaces the list)"),
         arg("-g", "--groupPerms", help="e.g. groupA=DENY,groupB=SUB (replaces the list)"),
         arg("-m", "--admin", type=_bool, default=False, help="admin account (true|false; false when not given)"),
         one_of=ONE_OF)
async def update_acl_config(admin: AdminClient, args: Namespace) -> Output:
    account = AccessConfig(args.account, args.accountSecret, args.whiteRemoteAddress, args.admin,
                           args.defaultTopicPerm, args.defaultGroupPerm, split_list(args.topicPerms),
                           split_list(args.groupPerms))
    addrs = await _targets(admin, args, masters_only=False)
    for addr in addrs:
        await admin.update_acl_account(addr, account)
    lines = [f"create or update plain access config to {addr} success." for addr in addrs]
    return Output({"brokers": addrs, "accessKey": args.account}, "\n".join(lines))


@command("deleteAclConfig", "delete an ACL account from the brokers' plain_acl.yml", BROKER_ADDR, CLUSTER,
         arg("-a", "--account", required=True, help="the access key of the account to delete"), one_of=ONE_OF)
async def delete_acl_config(admin: AdminClient, args: Namespace) -> Output:
    addrs = await _targets(admin, args, masters_only=False)
    for addr in addrs:
        await admin.delete_acl_account(addr, args.account)
    lines = [f"delete plain access config account from {addr} success." for addr in addrs]
    return Output({"brokers": addrs, "accessKey": args.account},
                  "\n".join(lines) + f"\naccount's accesskey is:{args.account}")


@command("updateGlobalWhiteAddr", "replace the brokers' globalWhiteRemoteAddresses", BROKER_ADDR, CLUSTER,
         arg("-g", "--globalWhiteRemoteAddresses", required=True, help="patterns, e.g. 10.10.103.*,192.168.0.{1,2}"),
         arg("-p", "--aclFileFullPath", help="the ACL file (rocketpy brokers have one; checked when given)"),
         one_of=ONE_OF)
async def update_global_white_addr(admin: AdminClient, args: Namespace) -> Output:
    addrs = await _targets(admin, args, masters_only=False)
    for addr in addrs:
        await admin.update_global_white_addrs(addr, args.globalWhiteRemoteAddresses, args.aclFileFullPath)
    lines = [f"update global white remote addresses to {addr} success." for addr in addrs]
    return Output({"brokers": addrs, "globalWhiteRemoteAddresses": args.globalWhiteRemoteAddresses}, "\n".join(lines))


@command("clusterAclConfigVersion", "the version of each master's ACL file", BROKER_ADDR, CLUSTER, one_of=ONE_OF)
async def cluster_acl_config_version(admin: AdminClient, args: Namespace) -> Output:
    infos = [await admin.acl_version(addr) for addr in await _targets(admin, args)]
    rows = [(i.cluster_name, i.broker_name, i.broker_addr, path, v.counter, human_time(v.timestamp))
            for i in infos for path, v in i.file_versions.items()]
    headers = ("#Cluster Name", "#Broker Name", "#Broker Addr", "#AclFilePath", "#AclConfigVersionNum",
               "#AclLastUpdateTime")
    return Output(infos, table(headers, rows))


def _acl_text(config: AclConfig) -> str:
    """As ``mqadmin getAclConfig``: the whitelist, then each account's fields."""

    def value(v: object) -> str:
        if v is None:
            return ""
        if isinstance(v, list):
            return "[" + ", ".join(v) + "]"
        return str(v).lower() if isinstance(v, bool) else str(v)

    lines = [f"{'globalWhiteRemoteAddresses':<20}: {value(config.global_white_addrs)}", "", "accounts:"]
    for account in config.accounts:
        lines += [f"  {key:<18}: {value(v)}" for key, v in account.java_fields().items()] + [""]
    return "\n".join(lines)


@command("getAclConfig", "every master's ACL: whitelist and accounts (secret keys too)", BROKER_ADDR, CLUSTER,
         one_of=ONE_OF)
async def get_acl_config(admin: AdminClient, args: Namespace) -> Output:
    configs = {addr: await admin.acl_config(addr) for addr in await _targets(admin, args)}
    text = "\n".join(f"============{addr}============\n{_acl_text(c)}" for addr, c in configs.items())
    return Output(configs, text)
