"""What a kind asks of an encoding, checked: at registration for what a class shows
(:func:`class_refusal`), when a layer attaches a built term for what its constructor set
(:func:`built_refusal`). Each refusal is a sentence that ``register_encoding`` or the layer
prefixes with the class's name."""

from __future__ import annotations

from typing import Optional

from ...context import KernelFamily
from ..base import PositionEncoding
from .absolute import LowRank
from .facts import implements
from .sequence import InputEmbedding


def kinds_of(cls: type) -> list[type]:
    """The kinds ``cls`` derives from (a kind: a class that declares ``facts`` in its body),
    in its method resolution order, the most derived of each line (``DistanceScale``, not
    also ``DistanceBias``)."""
    found = [kind for kind in cls.__mro__ if "facts" in vars(kind)]
    return [kind for kind in found
            if not any(other is not kind and issubclass(other, kind) for other in found)]


def class_refusal(cls: type) -> Optional[str]:
    """Why registration refuses ``cls`` (None: it fulfils its kinds' contracts): no kind;
    two kinds and no declared :attr:`~..base.PositionEncoding.applies_as`; a method of a
    kind, or of a fused family it declares, left unimplemented; a family its kinds cannot
    take; what a kind asks to declare (:func:`_declaration_refusal`)."""
    kinds = kinds_of(cls)
    if not kinds:
        return ("derives from no kind: derive it from one of fairseq_posenc.nn's kinds "
                "(DistanceBias, PairBias, LowRank, Rotation, ...)")
    applied = getattr(cls, "applies_as", None)
    if applied not in kinds and not (applied is not None and issubclass(cls, applied)):
        names = " and ".join(kind.__name__ for kind in kinds)
        return (f"derives from {names}: declare which kind the attention applies, as the "
                f"class attribute applies_as = {kinds[0].__name__} (a constructor may set "
                "another of them per instance, as TUPE's reset does)")
    for kind in kinds:
        missing = [m for m in kind.methods if not implements(cls, m)]
        if missing:
            return (f"derives from {kind.__name__} but does not implement "
                    f"{', '.join(missing)}: a {kind.__name__} implements "
                    f"{' and '.join(kind.methods)}")
    possible = {family: methods for kind in kinds for family, methods in
                kind.facts.families.items()}
    for family in sorted(cls.fused_families, key=lambda f: f.value):
        if family not in possible:
            return (f"declares the fused family {family.name} in fused_families, which none "
                    f"of its kinds ({', '.join(k.__name__ for k in kinds)}) can take: "
                    f"drop it, or choose among {_names(possible)}")
        missing = [m for m in possible[family] if not implements(cls, m)]
        if missing:
            return (f"declares the fused family {family.name} but does not implement "
                    f"{', '.join(missing)}, which that kernel calls: implement them, or "
                    "drop the family from fused_families")
    return _declaration_refusal(cls)


def _names(families) -> str:
    return ", ".join(sorted(family.name for family in families)) or "none"


def _declaration_refusal(cls: type) -> Optional[str]:
    """An :class:`InputEmbedding` without ``fairseq_flags``; a term whose factors need
    ``max_len`` where the class shows it has none (no class attribute, and no constructor
    of its own to set it: one that has is checked when built, :func:`built_refusal`)."""
    if issubclass(cls, InputEmbedding):
        flags = getattr(cls, "fairseq_flags", None)
        if not (isinstance(flags, tuple) and len(flags) == 2
                and all(isinstance(flag, bool) for flag in flags)):
            got = "has none" if flags is None else f"got {flags!r}"
            return ("is an InputEmbedding and needs the class attribute fairseq_flags = "
                    "(no_token_positional_embeddings, learned_pos), the fairseq input "
                    "embedding it configures: (False, False) sinusoidal, (False, True) "
                    f"learned, (True, False) none; {got}")
    if issubclass(cls, LowRank) and getattr(cls, "max_len", None) is None and all(
            "__init__" not in vars(base) for base in cls.__mro__
            if issubclass(base, PositionEncoding) and base is not PositionEncoding):
        return ("is a LowRank without max_len: set the number of absolute positions its "
                "factors cover, as a class attribute max_len or as self.max_len in its "
                "__init__ (from the stack's max_positions, or an option)")
    return None


def built_refusal(term: PositionEncoding) -> Optional[str]:
    """Why a built ``term`` cannot be attended with (None: it can): a kind chosen per
    instance that is not one of its class's; a kind of another attention than
    self-attention; a fused kernel of a family its class does not
    declare; a term that reads factors (a ``LowRank``, or a ``CAUSAL_EXTRA_DIMENSIONS``
    family) whose ``max_len``, the positions its factors cover, its constructor left unset
    or not a positive int."""
    cls = type(term)
    if not (isinstance(term.applies_as, type) and issubclass(cls, term.applies_as)):
        return (f"sets applies_as = {getattr(term.applies_as, '__name__', term.applies_as)}, "
                f"which is none of its kinds ({', '.join(k.__name__ for k in kinds_of(cls))})")
    if term.applies_as.facts.attention != "self":
        return (f"is a term of the {term.applies_as.facts.attention} attention "
                f"({term.applies_as.__name__}); a self-attention layer takes self-attention "
                "terms only")
    fused = term.fused_kernel
    if fused is not None and fused.family not in cls.fused_families:
        return (f"runs the fused family {fused.family.name} (its fused_kernel) but its class "
                f"declares {_names(cls.fused_families)} in fused_families: declare it")
    if not (term.applies_as is LowRank or (
            fused is not None and fused.family is KernelFamily.CAUSAL_EXTRA_DIMENSIONS)):
        return None
    max_len = getattr(term, "max_len", None)
    if isinstance(max_len, int) and not isinstance(max_len, bool) and max_len >= 1:
        return None
    got = "has none" if max_len is None else f"got {max_len!r}"
    return ("is a LowRank term and needs max_len, the number of absolute positions its "
            "factors cover, a positive int: set self.max_len in its __init__ (from the "
            f"stack's max_positions, or an option); {got}")
