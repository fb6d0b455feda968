"""Remote-address patterns of ``plain_acl.yml``, as Java's ``RemoteAddressStrategyFactory``.

- blank: matches nothing; ``*`` (or ``*.*.*.*``, ``*:*:*:*:*:*:*:*``): everything;
- ``192.168.0.{1,2}`` or ``10.0.0.1,10.0.0.2``: one of a list;
- ``192.168.1.1-5``, ``192.168.*.*``, ``10.*.*.*``: a range of one part (the first part
  after the fixed head that is ``*`` or ``a-b``); IPv6 alike, in hex (``1050::5:600:300c:1-200``);
- otherwise one IPv4 or IPv6 address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from functools import lru_cache

Matcher = Callable[[str], bool]


class AddressPatternError(ValueError):
    """A remote-address pattern Java would refuse too."""


def _never(host: str) -> bool:
    return False


def _always(host: str) -> bool:
    return True


@lru_cache(maxsize=4096)  # clients come from few addresses; parsing costs microseconds
def _ip_version(text: str) -> int | None:
    """4 or 6 for an IP address, None for anything else."""
    try:
        return ipaddress.ip_address(text).version
    except ValueError:
        return None


def _is_ipv4(text: str) -> bool:
    return _ip_version(text) == 4


def _is_ipv6(text: str) -> bool:
    return _ip_version(text) == 6


@lru_cache(maxsize=4096)  # clients come from few addresses; parsing costs microseconds
def _canonical(host: str) -> str:
    """IPv6 addresses in full form (``expandIP``), IPv4 as they are."""
    return ipaddress.IPv6Address(host).exploded.upper() if _is_ipv6(host) else host


def _split(text: str, sep: str) -> list[str]:
    """``StringUtils.split``: empty tokens dropped."""
    return [part for part in text.split(sep) if part]


def address_matcher(pattern: str | None) -> Matcher:
    """A predicate on a remote host (an IP address without port) for *pattern*.

    :raises AddressPatternError: for a pattern Java would refuse.
    """
    if pattern is None or not pattern.strip():
        return _never
    if pattern in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return _always
    if pattern.endswith("}"):
        parts = _split(pattern, ":") if ":" in pattern else _split(pattern, ".")
        if ":" not in pattern and len(parts) < 4:
            raise AddressPatternError(f"{pattern!r} is not four dotted parts")
        if not parts[-1].startswith("{"):
            raise AddressPatternError(f"{pattern!r}: the {{…}} list must be the last part")
        head = pattern[: pattern.index("{")]
        return _one_of([head + tail for tail in _split(parts[-1][1:-1], ",")])
    if "," in pattern:
        return _one_of(_split(pattern, ","))
    if "*" in pattern or "-" in pattern:
        return _range(pattern)
    if not (_is_ipv4(pattern) or _is_ipv6(pattern)):
        raise AddressPatternError(f"{pattern!r} is not an IP address")
    one = _canonical(pattern)
    return lambda host: _canonical(host) == one


def _one_of(addresses: list[str]) -> Matcher:
    allowed = set()
    for address in addresses:
        if not (_is_ipv4(address) or _is_ipv6(address)):
            raise AddressPatternError(f"{address!r} is not an IP address")
        allowed.add(_canonical(address))
    return lambda host: _canonical(host) in allowed


def _range(pattern: str) -> Matcher:
    """Java's ``RangeRemoteAddressStrategy`` for IPv4: the first of parts 2-4 that is ``*`` or
    ``a-b`` is the range; the parts before it are the fixed head; the parts after it are not looked at."""
    if ":" in pattern:
        return _range6(pattern)
    parts = _split(pattern, ".")
    if len(parts) != 4:
        raise AddressPatternError(f"{pattern!r} is not four dotted parts")
    for index in (1, 2, 3):
        value = parts[index].strip()
        if value == "*":
            start, end = 0, 255
        elif "-" in value:
            low, _, high = value.partition("-")
            if not low.isdigit() or not high.isdigit() or not 0 <= int(low) <= int(high) <= 255:
                raise AddressPatternError(f"{pattern!r}: bad range {value!r}")
            start, end = int(low), int(high)
        else:
            continue
        if end > 0:
            break
    else:
        raise AddressPatternError(f"{pattern!r} has no range part")
    head = parts[:index]
    if not all(p.strip().isdigit() and int(p) <= 255 for p in head):
        raise AddressPatternError(f"{pattern!r}: bad address part")
    prefix = ".".join(p.strip() for p in head) + "."

    def match(host: str) -> bool:
        if not _is_ipv4(host) or not host.startswith(prefix):
            return False
        return start <= int(host.split(".")[index]) <= end

    return match


def _expand(address: str, groups: int) -> str:
    """Java's ``AclUtils.expandIP``: ``::`` widened to *groups* groups, each padded to four hex digits."""
    address = address.upper()
    pad = groups - address.count(":")
    if pad > 0:
        address = address.replace("::", ":" + ":" * pad)
    return ":".join(group.rjust(4, "0") for group in address.split(":"))


def _range6(pattern: str) -> Matcher:
    """Java's ``RangeRemoteAddressStrategy`` for IPv6: ``1050::5:600:300c:1-200``, ``…:300c:*`` or
    ``…:300c:1-20:*``; the first group that is ``*`` or ``a-b`` (hex) is the range."""
    star, minus = pattern.find("*"), pattern.find("-")
    if star > -1 and star != len(pattern) - 1:
        raise AddressPatternError(f"{pattern!r}: '*' must end the pattern")
    last = pattern.rfind(":")
    if minus > -1 and minus <= (last if star == -1 else pattern.rfind(":", 0, last)):
        raise AddressPatternError(f"{pattern!r}: the range must be the last group before any '*'")
    groups = _split(pattern, ":")
    for value in (g.strip() for g in groups[1:]):
        if value == "*":
            start, end = 0, 0xFFFF
        elif "-" in value:
            low, _, high = value.partition("-")
            try:
                start, end = int(low, 16), int(high, 16)
            except ValueError:
                raise AddressPatternError(f"{pattern!r}: bad range {value!r}") from None
            if not low or not 0 <= start <= end <= 0xFFFF:
                raise AddressPatternError(f"{pattern!r}: bad range {value!r}")
        else:
            continue
        if end > 0:
            break
    else:
        raise AddressPatternError(f"{pattern!r} has no range group")
    if star > -1 and minus > -1:  # head: the groups before the range, as Java's v6ipProcess
        head = _expand(pattern[: pattern.rfind(":", 0, last)], 6)
    else:
        head = _expand(pattern[:last], 7)
    try:
        fixed = [int(group, 16) for group in head.split(":")]
    except ValueError:
        raise AddressPatternError(f"{pattern!r}: bad address group") from None
    if any(not 0 <= group <= 0xFFFF for group in fixed):
        raise AddressPatternError(f"{pattern!r}: bad address group")
    index = len(fixed)

    def match(host: str) -> bool:
        if not _is_ipv6(host):
            return False
        full = _canonical(host)
        return full.startswith(head) and start <= int(full[5 * index: 5 * index + 4], 16) <= end

    return match


def host_of(remote_address: str) -> str:
    """The host of ``"ip:port"`` (Java cuts at the last ``:``)."""
    host, sep, _ = remote_address.rpartition(":")
    return host.strip("[]") if sep else remote_address
