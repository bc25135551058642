"""Name -> encoding class, filled by ``@register_encoding`` in each encoding's module."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import PositionEncoding

ENCODINGS: dict[str, type["PositionEncoding"]] = {}


def register_encoding(cls: type["PositionEncoding"]) -> type["PositionEncoding"]:
    if cls.name in ENCODINGS:
        raise ValueError(f"position encoding {cls.name!r} registered twice")
    ENCODINGS[cls.name] = cls
    return cls


def get_encoding(name: str) -> type["PositionEncoding"]:
    try:
        return ENCODINGS[name]
    except KeyError:
        raise ValueError(
            f"unknown --pos-encoding {name!r}; choose one of: {', '.join(sorted(ENCODINGS))}"
        ) from None


def flag_owners() -> dict[str, list[str]]:
    """Each option's Python name (``--shaw-clip``: ``shaw_clip``) -> the encodings whose
    flags list it, by name."""
    owners: dict[str, list[str]] = {}
    for name, cls in sorted(ENCODINGS.items()):
        for flag in cls.flags:
            owners.setdefault(flag.dest, []).append(name)
    return owners
