"""Which computation one self-attention call gets: a plan made from declarations alone.

Each term declares its kind (its ``applies_as``, whose
:class:`~fairseq_posenc.core.encodings.kinds.KindFacts` the planner reads) and how it can run
fused (:attr:`~fairseq_posenc.core.encodings.base.PositionEncoding.fused_kernel`, a
:class:`~fairseq_posenc.core.context.FusedKernel`). :func:`plan_attention` reads those, the
layer's kernel switches and what the call is (:class:`Call`: device, dtype, lengths,
causality, dropout, weights asked, a decoding step, autograd, positions chosen per
sequence) and returns a :class:`Plan`: the path, the term the fused distance kernel runs,
the low-rank terms concatenated as extra query and key dimensions, and whether the float
mask needs a gradient. It touches no
tensor (a pair bias that is by distance on some calls answers for itself: FIRE reads its
learned threshold once per forward, ``PairBias.distance_covers``), so a table of cases
tests it (``tests/core/attention/test_attention_plan.py``), and
:meth:`~fairseq_posenc.core.attention_core.PositionalAttentionCore.attend` runs the plan with
no decision of its own. The rules, kind by kind: ``docs/architecture.md``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple, Optional, Sequence

import torch

from .context import FusedKernel, KernelFamily, PositionScope
from .encodings.kinds import KindFacts, built_refusal
from .encodings.outputs import term_name
from . import kernels
from .kernels import Verifier

if TYPE_CHECKING:
    from .encodings.base import PositionEncoding

#: ``"auto"``: the concatenated low-rank dimensions on CUDA, the bias on CPU.
LowRankKernel = Literal["auto", "concat", "bias"]
#: ``"auto"``: the fused Triton kernel on CUDA in half precision once self-checked there,
#: the bias elsewhere.
DistanceKernel = Literal["auto", "fused", "bias"]

#: ``"auto"`` on CUDA: a distance table with no gradient (``alibi``'s encoder,
#: ``sandwich``) for keys up to this length takes torch's SDPA with the table summed into
#: its float mask, with or without attention dropout, which beats or ties the fused kernel
#: there; longer keys take the fused kernel (``docs/decisions.md``, "Fixed tables on
#: torch's SDPA").
FIXED_TABLE_SDPA_MAX_LEN = 256

#: ``"auto"`` on CUDA: causal ALiBi (the decoder's) runs as two extra key dimensions for
#: keys up to this length without attention dropout, and in the fused kernel otherwise,
#: where that kernel runs (``docs/decisions.md``, "Causal ALiBi: extra dimensions or the
#: fused kernel").
CAUSAL_CONCAT_MAX_LEN = 128

#: The families the fused distance kernel runs (a causal-exact bias without its causal
#: mask is a :attr:`KernelFamily.DISTANCE` term).
DISTANCE_FAMILIES = frozenset({KernelFamily.DISTANCE, KernelFamily.DISTANCE_FACTOR,
                               KernelFamily.CLIPPED, KernelFamily.ROWS,
                               KernelFamily.CAUSAL_EXTRA_DIMENSIONS})


def facts_of(term: "PositionEncoding") -> KindFacts:
    """What ``term``'s kind declares (:attr:`~.encodings.base.PositionEncoding.applies_as`)."""
    return term.applies_as.facts


def family_of(term: "PositionEncoding") -> Optional[KernelFamily]:
    """The kernel family ``term`` declares, or None."""
    fused: Optional[FusedKernel] = term.fused_kernel
    return None if fused is None else fused.family


@dataclass(frozen=True)
class AttachedPositions:
    """A layer's position terms and its stack's scope. A plain object, not a submodule:
    the stack owns (registers) the encodings, and may share one between layers.

    The terms grouped once, when attached, by what they declare: a kind and a kernel
    family never change after a term is built, and beam search calls the layer once per
    step and layer, where every Python operation counts."""

    encoding: Optional["PositionEncoding"]
    terms: tuple["PositionEncoding", ...]
    scope: PositionScope
    #: ``PROJECTION`` terms; ``ROTATION`` terms; ``PROBABILITIES`` terms (a value term).
    projections: tuple = ()
    rotations: tuple = ()
    #: Terms that read the layer's input (``reads_input``): every call reads it first.
    input_readers: tuple = ()
    on_probabilities: tuple = ()
    #: :attr:`KernelFamily.CLIPPED` terms: a decoding step adds their rows by key to its
    #: keys and values (:meth:`PositionEncoding.rows_by_key`).
    by_key: tuple = ()
    #: :attr:`KernelFamily.ROWS` terms: one query reads their products by distance.
    by_rows: tuple = ()
    #: Two or more terms whose step row depends on positions only (``content_free``;
    #: a step has no padding; TUPE-R's): summed once per decoding step for the layers
    #: that share them. One such term reads its own cached row (a ``narrow``): cheaper
    #: than looking up a sum where layers have their own tables (``diet_rel``;
    #: docs/decisions.md, "Decoding steps").
    #: ``step_terms``: the terms a decoding step computes itself (not ``by_key``), and
    #: ``step_value_terms`` those of them with a value term.
    content_free: tuple = ()
    step_terms: tuple = ()
    step_value_terms: tuple = ()
    #: Terms that add a ``len x len`` tensor or need the logits (``mask_sized``,
    #: ``needs_logits``).
    sized: tuple = ()
    #: Whether a term needs the logits written out (``needs_logits``).
    needs_logits: bool = False
    #: Terms that add to the float mask (``additive``).
    additive: tuple = ()
    #: Terms that rewrite the keys the cache keeps (``rewrites_cached_keys``).
    key_rewriters: tuple = ()
    #: The term whose weights replace the softmax (``replaces_softmax``), or None.
    normaliser: Optional["PositionEncoding"] = None

    @classmethod
    def of(cls, encoding, scope: PositionScope, extra_terms: Sequence = ()) -> "AttachedPositions":
        """``encoding`` None: no position term of its own (``--pos-layers first``).
        ``extra_terms``: further terms, e.g. segment attention. A term built without what
        its kind needs (:func:`~.encodings.kinds.built_refusal`) is a ``TypeError`` naming
        its class, before the layer runs."""
        own = () if encoding is None else encoding.terms()
        terms = (*own, *extra_terms)
        for term in terms:
            refusal = built_refusal(term)
            if refusal is not None:
                raise TypeError(f"{term_name(term)} {refusal}")

        def having(fact: str) -> tuple:
            return tuple(t for t in terms if getattr(facts_of(t), fact))

        def of_family(family: KernelFamily) -> tuple:
            return tuple(t for t in terms if family_of(t) is family)

        by_key = of_family(KernelFamily.CLIPPED)
        content_free = having("content_free")
        if len(content_free) < 2:
            content_free = ()
        step_terms = tuple(t for t in terms if t not in by_key and t not in content_free)
        on_probabilities = having("adds_to_output")
        normalisers = having("replaces_softmax")
        if len(normalisers) > 1:
            raise TypeError(f"a layer takes one term in place of the softmax, got "
                            f"{', '.join(term_name(t) for t in normalisers)}")
        return cls(encoding, terms, scope,
                   projections=having("projects_keys"), rotations=having("transforms_qk"),
                   input_readers=having("reads_input"), on_probabilities=on_probabilities,
                   by_key=by_key, by_rows=of_family(KernelFamily.ROWS),
                   content_free=content_free, step_terms=step_terms,
                   step_value_terms=tuple(t for t in step_terms if t in on_probabilities),
                   sized=tuple(t for t in terms
                               if facts_of(t).mask_sized or facts_of(t).needs_logits),
                   needs_logits=bool(having("needs_logits")), additive=having("additive"),
                   key_rewriters=having("rewrites_cached_keys"),
                   normaliser=normalisers[0] if normalisers else None)

    @property
    def content_scale(self) -> float:
        return 1.0 if self.encoding is None else self.encoding.content_scale


class Call(NamedTuple):
    """What one self-attention call is, as the planner needs it (no tensor)."""

    #: The device of the queries (``torch.device("cuda")`` can be named without a GPU).
    device: torch.device
    dtype: torch.dtype
    #: Queries, and keys including any cache (the input's length for a projection term).
    q_len: int
    k_len: int
    #: The caller's ``attn_mask`` (fairseq's future mask): causal attention.
    causal: bool = False
    #: A key padding mask, of the call or cached.
    padding: bool = False
    #: Attention dropout acts (training, or fairseq's ``apply_during_inference``).
    dropout: bool = False
    #: Attention weights asked for.
    need_weights: bool = False
    #: An incremental state (a decoder generating).
    incremental: bool = False
    #: Autograd records (``torch.is_grad_enabled()``).
    grad: bool = False
    #: Positions chosen per sequence (:attr:`~fairseq_posenc.core.context.PositionContext.
    #: positions`: ``--random-positions`` in training): distances differ by sequence and
    #: are not consecutive, so every term is a ``(B, H, q, k)`` tensor read at them, and
    #: nothing that assumes consecutive positions runs (the fused distance kernels, the
    #: low-rank dimensions, products by distance for one query, a decoding step).
    chosen_positions: bool = False


class Path(enum.Enum):
    """The computation of one call (``docs/architecture.md``, "Paths")."""

    #: A step of beam search: the explicit path's numbers with the fewest operations.
    STEP = "decoding step"
    #: The layer's one ``len x len`` term in the fused distance kernel.
    FUSED_DISTANCE = "fused distance kernel"
    #: ``F.scaled_dot_product_attention`` with the additive terms in its float mask.
    SDPA = "scaled dot-product attention"
    #: Logits, softmax, dropout and ``p @ v`` written out.
    EXPLICIT = "explicit"


@dataclass(frozen=True)
class Plan:
    """What a call computes and how."""

    path: Path
    #: The term in the fused distance kernel, and the kernel family it runs as.
    fused: Optional["PositionEncoding"] = None
    family: Optional[KernelFamily] = None
    #: ``LOW_RANK`` (and causal-exact) terms run as extra query and key dimensions.
    concatenated: tuple["PositionEncoding", ...] = ()
    #: Whether the float mask (SDPA, explicit) has a gradient.
    mask_needs_grad: bool = False
    #: :attr:`KernelFamily.ROWS` terms that one query reads as products by distance
    #: (the others, clipped shorter than the sentence, as their bias).
    one_query_rows: tuple["PositionEncoding", ...] = ()


_STEP = Plan(Path.STEP)


def plan_attention(positions: AttachedPositions, call: Call,
                   low_rank_kernel: LowRankKernel = "auto",
                   distance_kernel: DistanceKernel = "auto",
                   verified: Optional[Verifier] = None) -> Plan:
    """The plan of one self-attention call of a layer with ``positions``; each path gives
    the same numbers up to rounding. ``verified``: for
    :func:`~fairseq_posenc.core.kernels.auto_fuses`."""
    chosen = call.chosen_positions
    if (call.incremental and call.q_len == 1 and not call.causal and not call.padding
            and not call.need_weights and not positions.projections and not chosen):
        if not positions.by_rows:
            return _STEP
        return Plan(Path.STEP, one_query_rows=_covered_rows(positions, call))
    explicit = call.need_weights or call.q_len == 1
    concatenated = () if explicit or chosen else tuple(
        t for t in positions.terms
        if _concatenates(t, call, low_rank_kernel, distance_kernel, verified))
    sized = [t for t in positions.sized if t not in concatenated]
    fused, family = None, None
    if not explicit and not chosen and len(sized) == 1:
        family = _fused_family(sized[0], call, distance_kernel, verified, positions)
        fused = sized[0] if family is not None else None
    if fused is None and positions.needs_logits:
        explicit, concatenated = True, ()
    elif sized and fused is None:
        # Another term adds a len x len bias anyway (TUPE-R's buckets without the fused
        # kernel): the low-rank term joins it, computed once per forward for all layers,
        # cheaper than extra dimensions in every layer (docs/decisions.md, "Low-rank
        # terms as extra dimensions").
        concatenated = ()
    if fused is not None:
        return Plan(Path.FUSED_DISTANCE, fused, family, concatenated)
    mask_needs_grad = call.grad and any(
        _has_gradient(t) for t in positions.additive if t not in concatenated)
    if mask_needs_grad and not explicit and call.device.type == "cpu":
        # The CPU fused kernel does not differentiate its float mask: the low-rank terms
        # join the bias, and the logits are written out.
        explicit, concatenated = True, ()
    return Plan(Path.EXPLICIT if explicit else Path.SDPA, concatenated=concatenated,
                mask_needs_grad=mask_needs_grad,
                one_query_rows=(_covered_rows(positions, call)
                                if call.q_len == 1 and not chosen else ()))


def _covered_rows(positions: AttachedPositions, call: Call) -> tuple["PositionEncoding", ...]:
    q_offset = call.k_len - call.q_len
    return tuple(t for t in positions.by_rows
                 if t.rows_cover(call.q_len, call.k_len, q_offset))


def _has_gradient(term: "PositionEncoding") -> bool:
    """Whether ``term``'s tensor has a gradient when autograd records: it reads the
    queries or keys, or it has a trained parameter."""
    return facts_of(term).reads_content or any(p.requires_grad for p in term.parameters())


def _concatenates(term: "PositionEncoding", call: Call, low_rank_kernel: LowRankKernel,
                  distance_kernel: DistanceKernel, verified: Optional[Verifier]) -> bool:
    """Whether ``term`` runs as extra query and key dimensions."""
    family = family_of(term)
    if family is KernelFamily.EXTRA_DIMENSIONS:
        pass
    elif family is KernelFamily.CAUSAL_EXTRA_DIMENSIONS:
        # The bias is low-rank under the causal mask over the rows its factors have.
        if not (call.causal and call.k_len <= term.max_len):
            return False
        if (low_rank_kernel == "auto" and distance_kernel != "bias"
                and (call.dropout or call.k_len > CAUSAL_CONCAT_MAX_LEN)
                and call.q_len == call.k_len
                and kernels.auto_fuses(KernelFamily.DISTANCE, call.device, call.dtype,
                                           call.dropout, verified)):
            return False  # the fused kernel takes it (CAUSAL_CONCAT_MAX_LEN)
    elif family is KernelFamily.CAUSAL_SUMS:
        # c_i - c_j is c_i (dropped by the softmax) and -c_j under the causal mask only
        if not call.causal:
            return False
    else:
        return False
    return low_rank_kernel == "concat" or (low_rank_kernel == "auto"
                                           and call.device.type == "cuda")


def _sdpa_takes_fixed_table(term: "PositionEncoding", call: Call) -> bool:
    """Whether ``"auto"`` leaves ``term``, a table by distance with no gradient, to SDPA's
    float mask (:data:`FIXED_TABLE_SDPA_MAX_LEN`); causal ALiBi, which declares its own
    family, is not one of them (:data:`CAUSAL_CONCAT_MAX_LEN`)."""
    return (family_of(term) is KernelFamily.DISTANCE and call.device.type == "cuda"
            and call.k_len <= FIXED_TABLE_SDPA_MAX_LEN and not _has_gradient(term))


def _fused_family(term: "PositionEncoding", call: Call, distance_kernel: DistanceKernel,
                  verified: Optional[Verifier],
                  positions: AttachedPositions) -> Optional[KernelFamily]:
    """The family in which the fused distance kernel runs ``term``, the layer's one
    ``len x len`` term; None where it does not."""
    family = family_of(term)
    if family not in DISTANCE_FAMILIES or distance_kernel == "bias":
        return None
    if family is KernelFamily.CAUSAL_EXTRA_DIMENSIONS:  # not concatenated: a bias
        family = KernelFamily.DISTANCE
    # fairseq gives self-attention one attn_mask, the decoder's future mask over a full
    # sequence: the kernel reads it as causality.
    if call.causal and call.q_len != call.k_len:
        return None
    if distance_kernel != "fused" and (_sdpa_takes_fixed_table(term, call)
                                       or not kernels.auto_fuses(family, call.device, call.dtype,
                                                                call.dropout, verified)):
        return None
    # A family that depends on the call answers for it (FIRE's threshold, clips).
    covers = term.applies_as.fused_covers(term, family, call.q_len, call.k_len,
                                          call.k_len - call.q_len, positions.scope.context)
    return family if covers else None
