"""Position encodings, one module each; ``ENCODINGS`` maps ``--pos-encoding`` names to them.

Every module of this package except the shared machinery (:data:`SHARED`: ``base``,
``kinds``, ``options``, ``registry``, PaTH's ``path_products``, ...) is imported here, so an
encoding registers itself by living in its own module with ``@register_encoding``.
"""

import importlib
import pkgutil

from ..context import PositionContext, PositionScope
from .base import PositionEncoding
from .kinds import DistanceBias, PositionKind
from .registry import ENCODINGS, get_encoding, register_encoding

SHARED = ("absolute_tables", "base", "distance_rows", "gate_sums", "kinds", "options", "outputs",
          "path_products", "registry", "stick_weights")

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in SHARED:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "ENCODINGS",
    "DistanceBias",
    "PositionContext",
    "PositionEncoding",
    "PositionKind",
    "PositionScope",
    "get_encoding",
    "register_encoding",
]
