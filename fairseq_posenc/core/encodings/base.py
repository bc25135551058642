"""What every position encoding shares: its name, its options, how a stack builds it.

An encoding acts either at the input (an :class:`~.kinds.InputEmbedding`; self-attention
stays stock) or inside self-attention through one or more *position terms*
(:meth:`PositionEncoding.terms`; usually the encoding itself). Each term is of a *kind*, a
base class of :mod:`.kinds` with the one to three methods that compute it, and
:class:`~fairseq_posenc.core.attention_core.PositionalAttentionCore` computes each kind in
one way, choosing the fastest exact kernel for it (:mod:`fairseq_posenc.core.attention_plan`).

An encoding's options are its constructor's keyword arguments (:mod:`.options`); the stack
gives it the structural ones (:data:`.options.STRUCTURAL`, and those the class declares
beside them: :attr:`PositionEncoding.structural`) and builds one module per layer
or one shared by all (:meth:`PositionEncoding.shares_layers`), in the layers that
``pos_layers`` chooses (:func:`layers_with_encoding`: every layer, or the first only, AT5's
translation setting).

Content-free values are cached in the stack's
:class:`~fairseq_posenc.core.context.PositionContext`, keyed by the term that owns them: a
table shared by all layers is expanded once per forward, and while decoding each step only
slices a table computed for a window that grows geometrically.
"""

from __future__ import annotations

import inspect
import enum
from typing import Any, Callable, ClassVar, Mapping, Optional

from torch import Tensor, nn

from ..context import FusedKernel
from ..random_positions import RandomPositions
from .options import STRUCTURAL, Declared, flag_name

LAYER_CHOICES = ("all", "first")


class PositionEncoding(nn.Module):
    """The root of every encoding. A class derives from a kind of :mod:`.kinds`, sets
    ``name`` and declares its options as its constructor's keyword arguments."""

    name: ClassVar[str]
    #: True for encodings added to the input embeddings (self-attention untouched).
    at_input: ClassVar[bool] = False
    #: The options ``__init__`` declares, set by ``register_encoding``.
    options: ClassVar[tuple[Declared, ...]] = ()
    #: The structural arguments the stack gives the class (:meth:`build`), if its
    #: constructor names them; no option. A class that reads more than every encoding's
    #: declares them here (RoPE's rotations: ``rope_scaling``).
    structural: ClassVar[tuple[str, ...]] = STRUCTURAL
    #: What ``--pos-kernels`` (:func:`~fairseq_posenc.core.kernel_choice.choose_kernels`)
    #: sets the term's own ``kernel`` to, by choice; None: the term has no kernel switch of
    #: its own (the attention's planner chooses its kernels).
    pos_kernels: ClassVar[Optional[Mapping[str, str]]] = None
    #: ``pos_layers`` when the user gives none: "all", or "first" (AT5's MT setting).
    default_layers: ClassVar[str] = "all"
    #: Absolute encodings: the option (``diet_abs_max_len``) whose value, by default the
    #: stack's ``max_positions``, bounds the sequence length.
    max_len_option: ClassVar[Optional[str]] = None

    # -- the options ----------------------------------------------------------------------
    @classmethod
    def check_options(cls, values: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` with a fix for values that make no sense together or that
        the option's type cannot say (each option's own check has run:
        :func:`~.registry.option_values`)."""

    @classmethod
    def shares_layers(cls, values: Mapping[str, Any]) -> bool:
        """One module for all layers of a stack (True) or one per layer (False)."""
        return False

    @classmethod
    def max_length(cls, values: Mapping[str, Any], max_positions: int) -> Optional[int]:
        """Longest sequence the encoding supports (absolute encodings), else None."""
        if cls.max_len_option is None:
            return None
        return values.get(cls.max_len_option) or max_positions

    @classmethod
    def max_length_flag(cls, values: Mapping[str, Any]) -> Optional[str]:
        """The flag of the option that sets :meth:`max_length`, if it was given."""
        option = cls.max_len_option
        return flag_name(option) if option and values.get(option) else None

    @classmethod
    def random_positions_refusal(cls, values: Mapping[str, Any]) -> Optional[str]:
        """Why ``random_positions`` cannot apply to this encoding with ``values`` (None: its
        terms read positions, or their differences, wherever they are)."""
        return None

    @classmethod
    def position_draw(cls, values: Mapping[str, Any], random_positions: Optional[int]
                      ) -> Optional[Callable[[Tensor], Tensor]]:
        """How a training forward chooses each sequence's positions from the padding mask
        (``random_positions``' draw, SHAPE's shift), or None: ``0..n-1``."""
        return None if random_positions is None else RandomPositions(random_positions)

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def build(cls, values: Mapping[str, Any], **structural: Any) -> "PositionEncoding":
        """One module: the constructor with the structural arguments it takes (of those
        the class reads, :attr:`structural`) and the option ``values``
        (:func:`~.registry.option_values`); a class without a constructor of its own
        (``nn.Module``'s, whose ``**kwargs`` takes none) gets none."""
        if structural.get("causal") is False and cls.causal_only():
            raise ValueError(f"{cls.name} is defined for causal attention only (a decoder's "
                             "self-attention), not for a stack without the causal mask (an "
                             "encoder): give the encoder another encoding")
        params = inspect.signature(cls.__init__).parameters
        takes_all = cls.__init__ is not nn.Module.__init__ and any(
            p.kind is p.VAR_KEYWORD for p in params.values())
        given = {name: value for name, value in structural.items()
                 if name in cls.structural and (takes_all or name in params)}
        return cls(**given, **values)

    @classmethod
    def causal_only(cls) -> bool:
        """Whether the encoding's kind is defined for causal attention only (PaTH,
        stick-breaking): an encoder refuses it."""
        return cls.applies_as is not None and cls.applies_as.facts.causal_only

    @classmethod
    def build_stack(cls, values: Mapping[str, Any], num_layers: int,
                    pos_layers: Optional[str] = None,
                    **structural: Any) -> list[Optional["PositionEncoding"]]:
        """The encoding of each layer (None: plain self-attention). Layer-shared encodings
        repeat the same module; ``pos_layers="first"`` leaves every later layer plain."""
        used = layers_with_encoding(pos_layers, cls, num_layers)
        if cls.shares_layers(values):
            shared = cls.build(values, **structural)
            return [shared if used_here else None for used_here in used]
        return [cls.build(values, **structural) if used_here else None for used_here in used]

    # -- what the attention reads of every term ------------------------------------------
    #: The kind (a base class of :mod:`.kinds`) whose facts the planner reads and whose
    #: hooks the attention calls for this term: the one kind its class derives from, set
    #: when the class is made. A class of two kinds declares it (``Fire``: a ``PairBias``);
    #: a constructor may set another of its class's kinds where an option changes what the
    #: term is (TUPE's reset makes the low-rank term a pair table; Shaw without values is
    #: a bias on keys only), which :func:`~.kinds.built_refusal` checks.
    applies_as: ClassVar[Optional[type]] = None
    #: The fused kernel families the class may take (:class:`~..context.KernelFamily`),
    #: each checked at registration against its kinds' ``facts.families``.
    fused_families: ClassVar[frozenset] = frozenset()
    #: Factor on ``q_i.k_j / sqrt(d_h)`` (TUPE's ``1/sqrt(2 d_h)`` is ``1/sqrt(2)``).
    content_scale: float = 1.0
    #: How the term runs fused, its kernel family (None: no fused kernel), one of
    #: :attr:`fused_families`; the planner reads it.
    fused_kernel: Optional[FusedKernel] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "applies_as" in vars(cls):
            return
        kinds = [c for c in cls.__mro__ if "facts" in vars(c)]
        leaves = [c for c in kinds if not any(o is not c and issubclass(o, c) for o in kinds)]
        if len(leaves) == 1:
            cls.applies_as = leaves[0]
        else:  # a class of two kinds: what a base of its own declared, or undecided
            cls.applies_as = next((vars(c)["applies_as"] for c in cls.__mro__[1:]
                                   if "applies_as" in vars(c) and c not in kinds), None)

    @property
    def kind(self) -> enum.Enum:
        """The name of the term's kind (:class:`~.kinds.PositionKind`)."""
        return self.applies_as.facts.name

    # -- the hooks the attention calls; each kind implements those it needs ----------------
    def add_to_logits(self, logits: Any, a: Any) -> None:
        """Add to, multiply or replace the call's logits (:class:`~.kinds.LogitTerms`) from
        the call's operands (:class:`~.kinds.Operands`); a kind that acts elsewhere (a
        rotation) adds nothing."""

    def fused_covers(self, family: Any, q_len: int, k_len: int, q_offset: int,
                     ctx: Any) -> bool:
        """Whether the fused kernel of ``family`` computes this call's term exactly (a
        family that depends on the call answers for it: FIRE's threshold, clips)."""
        return True

    def terms(self) -> tuple["PositionEncoding", ...]:
        """The position terms this encoding adds to a layer: itself, unless it is a sum of
        terms of different kinds (TUPE-R: a low-rank term and a distance bias)."""
        return (self,)


def layers_with_encoding(pos_layers: Optional[str], encoding: type[PositionEncoding],
                         num_layers: int) -> list[bool]:
    """Which self-attention layers of a stack get the encoding (``pos_layers``)."""
    choice = pos_layers or encoding.default_layers
    if choice not in LAYER_CHOICES:
        raise ValueError(f"--pos-layers must be one of {', '.join(LAYER_CHOICES)}, "
                         f"got {choice!r}")
    return [choice == "all" or i == 0 for i in range(num_layers)]


def init_scalar_table(table: Tensor) -> None:
    """Scalar position tables start as N(0, 0.02): BERT's initializer range, which the
    DIET / REL-SCALAR experiments (BERT code base) use for every parameter."""
    nn.init.normal_(table, mean=0.0, std=0.02)
