"""Position encodings, one module each; ``ENCODINGS`` maps ``--pos-encoding`` names to them."""

from . import (  # noqa: F401  (registration)
    alibi,
    diet_abs,
    diet_rel,
    huang1,
    huang2,
    huang4,
    input,
    rope,
    shaw,
    t5,
    t5_nob,
)
from .base import PositionEncoding, PositionMemo, RelativeScalarBias
from .registry import ENCODINGS, get_encoding, register_encoding

__all__ = [
    "ENCODINGS",
    "PositionEncoding",
    "PositionMemo",
    "RelativeScalarBias",
    "get_encoding",
    "register_encoding",
]
