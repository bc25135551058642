"""Position encodings, one module each; ``ENCODINGS`` maps ``--pos-encoding`` names to them."""

from . import alibi, diet_abs, diet_rel, input, rope, shaw, t5, t5_nob  # noqa: F401  (registration)
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
