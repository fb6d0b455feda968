"""Changes to ``plain_acl.yml`` asked for over the wire (Java's ``PlainPermissionManager.updateAccessConfig``,
``deleteAccessConfig``, ``updateGlobalWhiteAddrsConfig``): the file is read, changed, checked whole and
written atomically, or left untouched with the reason (doc/security.md, "Managing the ACL remotely")."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import yaml

from rocketpy.acl.config import AccessConfig, AclConfigError, text_or_none
from rocketpy.acl.plain import PlainAcl, check_keys, data_version, parse_acl
from rocketpy.acl.watch import file_stamp
from rocketpy.util.fileio import write_atomically

#: Edits the parsed file in place; raises :class:`AclConfigError` to refuse.
Edit = Callable[[dict[str, Any]], None]
_PERMS = ("PUB", "SUB", "PUB|SUB", "SUB|PUB", "DENY")


def check_resource_perms(items: list[str] | None) -> None:
    """Java's ``Permission.checkResourcePerms``: each item ``Name=PERM``, PERM one of PUB, SUB, PUB|SUB,
    SUB|PUB, DENY.

    :raises AclConfigError: with Java's message.
    """
    for item in items or ():
        parts = [part for part in item.split("=") if part]
        if len(parts) != 2:
            raise AclConfigError(f"Parse Resource format error for {item}.\n"
                                 "The expected resource format is 'Res=Perm'. For example: topicA=SUB")
        if parts[1].strip() not in _PERMS:
            raise AclConfigError(f"Parse resource permission error for {item}.\n"
                                 "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'.")


def _check_default_perm(name: str, value: str | None) -> None:
    """A default permission that is not one of Java's (Java takes it as DENY without a word)."""
    if value and value.strip() not in _PERMS:
        raise AclConfigError(f"Parse default permission error for {name}={value}.\n"
                             "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB' or 'DENY'.")


def _accounts(document: dict[str, Any]) -> list[Any]:
    accounts = document.get("accounts")
    if accounts is None:
        accounts = document["accounts"] = []
    if not isinstance(accounts, list):
        raise AclConfigError("accounts must be a list")
    return accounts


def _index(accounts: list[Any], access_key: str) -> int | None:
    for index, entry in enumerate(accounts):
        if isinstance(entry, dict) and text_or_none(entry.get("accessKey")) == access_key:
            return index
    return None


def update_account(config: AccessConfig) -> Edit:
    """Create or change the account of ``config.access_key`` as Java's ``createAclAccessConfigMap``: the
    secret key, ``admin`` and the values given replace the old; what is not given (None, or an empty
    default permission) stays."""
    check_keys(config.access_key, config.secret_key)
    check_resource_perms(config.topic_perms)
    check_resource_perms(config.group_perms)
    _check_default_perm("defaultTopicPerm", config.default_topic_perm)
    _check_default_perm("defaultGroupPerm", config.default_group_perm)
    changes = config.to_json()
    for key in ("defaultTopicPerm", "defaultGroupPerm"):  # Java skips an empty one
        if not changes.get(key, "x").strip():
            del changes[key]

    def edit(document: dict[str, Any]) -> None:
        accounts = _accounts(document)
        assert config.access_key is not None
        index = _index(accounts, config.access_key)
        if index is None:
            accounts.append(changes)
        else:
            accounts[index] = {**accounts[index], **changes}

    return edit


def delete_account(access_key: str) -> Edit:
    """Remove the account of *access_key*; refused (with Java's message) when there is none."""

    def edit(document: dict[str, Any]) -> None:
        accounts = _accounts(document)
        index = _index(accounts, access_key) if access_key else None
        if index is None:
            raise AclConfigError(f"The accesskey[{access_key}] corresponding to accessConfig has been deleted failed.")
        del accounts[index]

    return edit


def set_global_white(patterns: list[str]) -> Edit:
    """Replace ``globalWhiteRemoteAddresses`` (each pattern is checked with the whole file)."""

    def edit(document: dict[str, Any]) -> None:
        document["globalWhiteRemoteAddresses"] = list(patterns)

    return edit


def _load(path: str) -> tuple[dict[str, Any], int | None]:
    """The parsed file (empty when there is none) and its permission bits."""
    try:
        with open(path, encoding="utf-8") as f:
            text, mode = f.read(), os.fstat(f.fileno()).st_mode & 0o7777
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as e:
        raise AclConfigError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AclConfigError(f"{path} is not valid YAML: {e}") from None
    if document is None:
        return {}, mode
    if not isinstance(document, dict):
        raise AclConfigError(f"{path} must be a mapping with globalWhiteRemoteAddresses and accounts")
    return document, mode


def edit_acl_file(path: str, edit: Edit, now_ms: int) -> tuple[PlainAcl, tuple[int, int] | None]:
    """Apply *edit* to the ``plain_acl.yml`` at *path*, bump its ``dataVersion`` (Java's
    ``updateAclConfigFileVersion``) and write it atomically; blocking (the broker's config pool).

    :returns: the new ACL and the file's new :func:`~rocketpy.acl.watch.file_stamp`.
    :raises AclConfigError: the edit is refused, or the result would not be a valid file (the file
        is then untouched), or the file cannot be read or written.
    """
    target = os.path.realpath(path)  # a link (a mounted config map) keeps pointing at the new file
    document, mode = _load(target)
    edit(document)
    version = data_version(document, now_ms)
    version.bump(now_ms)
    document["dataVersion"] = [{"counter": version.counter, "timestamp": version.timestamp}]
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, default_flow_style=False)
    acl = parse_acl(text)
    try:
        write_atomically(target, text.encode("utf-8"))
        if mode is not None:
            os.chmod(target, mode)  # the temporary file was created private
    except OSError as e:
        raise AclConfigError(f"cannot write {target}: {e.strerror or e}") from None
    return acl, file_stamp(path)
