"""Java-properties text: the bodies of GET_BROKER_CONFIG, GET_NAMESRV_CONFIG and UPDATE_*_CONFIG."""

from __future__ import annotations

from collections.abc import Mapping


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text (``key=value`` or ``key:value`` lines, ``#``/``!`` comments)."""
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key, value = (line[:cut], line[cut + 1 :]) if cut >= 0 else (line, "")
        result[key.strip()] = value.strip()
    return result


def format_properties(config: Mapping[str, str]) -> str:
    """``key=value`` lines, sorted by key."""
    return "".join(f"{key}={value}\n" for key, value in sorted(config.items()))
