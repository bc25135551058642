"""Position encodings, one module each; ``ENCODINGS`` maps ``--pos-encoding`` names to them.

Every module of this package except the shared ``base`` and ``registry`` is imported here,
so an encoding registers itself by living in its own module with ``@register_encoding``.
"""

import importlib
import pkgutil

from ..context import PositionContext, PositionKind, PositionScope
from .base import PositionEncoding, RelativeScalarBias
from .registry import ENCODINGS, get_encoding, register_encoding

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "registry"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "ENCODINGS",
    "PositionContext",
    "PositionEncoding",
    "PositionKind",
    "PositionScope",
    "RelativeScalarBias",
    "get_encoding",
    "register_encoding",
]
