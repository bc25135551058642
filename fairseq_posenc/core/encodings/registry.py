"""Name -> encoding class, filled by ``@register_encoding`` (each built-in encoding's
module, and a user's: :func:`fairseq_posenc.nn.register_encoding` is this one)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from .base import PositionEncoding
from .kinds import class_refusal
from .options import Declared, declared_options

ENCODINGS: dict[str, type[PositionEncoding]] = {}
#: Called with each class about to be registered; may refuse it with a ``ValueError`` (the
#: fairseq plugin: an option whose flag fairseq has already).
CHECKS: list[Callable[[type[PositionEncoding]], None]] = []
#: Called with each class registered from now on (the fairseq plugin adds its
#: architectures for it).
LISTENERS: list[Callable[[type[PositionEncoding]], None]] = []


def register_encoding(cls: type[PositionEncoding]) -> type[PositionEncoding]:
    """Class decorator: register ``cls`` under ``cls.name``. A ``TypeError`` or
    ``ValueError`` naming the class for a class that breaks its kinds' contracts (no kind,
    a method of its kind or of a fused family it declares left unimplemented, what its
    kind asks it to declare: :func:`~.kinds.class_refusal`), a name registered already, or
    an option that another encoding declares differently."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    if not (isinstance(cls, type) and issubclass(cls, PositionEncoding)):
        raise TypeError(f"{where} is no position encoding: derive it from a kind of "
                        "fairseq_posenc.nn (DistanceBias, PairBias, Rotation, ...)")
    name = cls.__dict__.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"{where} needs a class attribute name, a Python identifier "
                        f"(its --pos-encoding NAME), got {name!r}")
    if name in ENCODINGS:
        other = ENCODINGS[name]
        raise ValueError(f"{where}: the encoding name {name!r} is registered already, by "
                         f"{other.__module__}.{other.__qualname__}: choose another name")
    refusal = class_refusal(cls)
    if refusal is not None:
        raise TypeError(f"{where} {refusal}")
    options = declared_options(cls)
    for option in options:
        for other_name, other in ENCODINGS.items():
            theirs = next((o for o in other.options if o.name == option.name), None)
            if theirs is not None and theirs != option:
                differ = ", ".join(
                    f"{field} {getattr(option, field)!r} against {getattr(theirs, field)!r}"
                    for field in option.__dataclass_fields__
                    if getattr(option, field) != getattr(theirs, field))
                raise ValueError(
                    f"{where}'s option {option.name!r} is also an option of "
                    f"{other.__module__}.{other.__qualname__} ({other_name!r}), declared "
                    f"differently ({differ}): rename it, or declare it the same way")
    cls.options = options
    for check in CHECKS:
        check(cls)
    ENCODINGS[name] = cls
    for listener in LISTENERS:
        listener(cls)
    return cls


def get_encoding(name: str) -> type[PositionEncoding]:
    try:
        return ENCODINGS[name]
    except KeyError:
        raise ValueError(
            f"unknown --pos-encoding {name!r}; choose one of: {', '.join(sorted(ENCODINGS))}"
        ) from None


def option_owners() -> dict[str, list[str]]:
    """Each option's name -> the encodings that declare it."""
    owners: dict[str, list[str]] = {}
    for name, cls in sorted(ENCODINGS.items()):
        for option in cls.options:
            owners.setdefault(option.name, []).append(name)
    return owners


def option_values(cls: type[PositionEncoding], given: Mapping[str, Any],
                  labels: Optional[Callable[[Declared], str]] = None) -> dict[str, Any]:
    """Every option of ``cls`` at its default but those ``given``, each checked (its type,
    choices and minimum: a ``ValueError`` naming it by ``labels(option)``, its flag by
    default), then ``cls.check_options``. An unknown name is a ``TypeError`` that names the
    encodings it belongs to, if any, and ``cls``'s options."""
    own = {option.name: option for option in cls.options}
    unknown = [name for name in given if name not in own]
    if unknown:
        owners = option_owners()
        named = [f"{name!r} (an option of {', '.join(owners[name])})" if name in owners
                 else repr(name) for name in unknown]
        valid = ", ".join(f"{o.name}={o.default!r}" for o in cls.options)
        raise TypeError(f"encoding {cls.name!r} has no option {', '.join(named)}; its "
                        f"options, with their defaults: {valid or 'none'}")
    values = {name: option.default for name, option in own.items()}
    values.update(given)
    for name, value in given.items():
        own[name].check(value, labels(own[name]) if labels else None)
    cls.check_options(values)
    return values
