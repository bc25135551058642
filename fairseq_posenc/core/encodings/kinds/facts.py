"""What a kind of position term is, declared once: its name and the facts the planner reads.

Each kind of :mod:`.kinds` sets ``facts`` (:class:`KindFacts`) in its class body; the
planner (:mod:`fairseq_posenc.core.attention_plan`) groups a layer's terms by these facts
and by the fused kernel families a term declares, never by the kind's name. The name
(:class:`PositionKind`) is what plans, docs and messages call the kind.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Mapping, TypeVar

from ...context import KernelFamily


class PositionKind(enum.Enum):
    """The name of a kind of position term (:attr:`KindFacts.name`)."""

    #: Added to the input embeddings by fairseq's own position embeddings.
    INPUT = "input embedding"
    #: ``b[h, j - i]``: a content-free scalar per head and relative distance, added to the
    #: logits (``distance_bias``).
    DISTANCE_BIAS = "content-free bias by distance"
    #: A content-free table per head and relative distance multiplying ``q_i.k_j``
    #: (``distance_bias`` read as factors).
    DISTANCE_SCALE = "content-free factor by distance"
    #: ``b[h, i, j]``: content-free, per pair of absolute positions or segments
    #: (``pair_bias``).
    PAIR_BIAS = "content-free bias by pair"
    #: ``P_Q[pos_i] . P_K[pos_j]``: a low-rank term over absolute positions
    #: (``factors``). Exactly an attention over ``[q, P_Q] . [k, P_K]``.
    LOW_RANK = "low-rank absolute term"
    #: A rotation of queries and keys by their positions (``rotate_qk``).
    ROTATION = "rotation of q and k"
    #: Added to the logits, computed from the queries or keys (``logit_bias``).
    CONTENT_BIAS = "bias that reads q or k"
    #: Replaces ``q_i.k_j`` by a position-dependent product (``content_logits``).
    CONTENT_LOGITS = "position-dependent q.k"
    #: A bias that reads q or k and a term added to the output from the attention
    #: probabilities (``logit_bias`` and ``value_term``).
    PROBABILITIES = "terms on keys and on the probabilities"
    #: Keys and values computed from a projection of the input along the sequence, with
    #: their own bias (``project_sequence`` and ``projected_bias``).
    PROJECTION = "projection of keys and values"
    #: Differences of cumulative sums of log-gates that read the layer's input, added to
    #: the logits (``log_gates``; the sums are cached while decoding).
    INPUT_GATES = "bias from gates on the layer input"
    #: Keys carried to the query through transforms that read the layer's input, one per
    #: position between them (``transforms``; the cached keys are rewritten each step).
    PATH = "keys transformed along the path"
    #: The softmax replaced by other attention weights from the logits (``weights``).
    WEIGHTS = "attention weights in place of the softmax"


@dataclass(frozen=True)
class KindFacts:
    """What the attention must know of a kind to plan a call: the kind's own declaration."""

    name: PositionKind
    #: Adds a ``len x len`` (or larger) tensor to the logits.
    mask_sized: bool = False
    #: Adds to the float mask (the mask-sized kinds and the low-rank term).
    additive: bool = False
    #: Needs the logits written out (the explicit path), unless a fused kernel runs it.
    needs_logits: bool = False
    #: Additive, and a function of positions only given the padding (a decoding step may
    #: sum such terms once for the layers that share them).
    content_free: bool = False
    #: Its tensor reads the queries, keys or the layer's input (so it has a gradient
    #: whenever autograd records).
    reads_content: bool = False
    #: Transforms queries and keys before the product and the cache (``transform_qk``).
    transforms_qk: bool = False
    #: Computes keys and values from its own projection of the input (``keys_input``).
    projects_keys: bool = False
    #: Reads the layer's input once per call before the paths split (``read_input``), and
    #: keeps what it read of every cached key in the layer's cache.
    reads_input: bool = False
    #: Adds a term to the output from the probabilities (``add_to_output``).
    adds_to_output: bool = False
    #: Rewrites the keys it caches while decoding (``cache_keys``): a cached key is the key
    #: as the latest query reads it.
    rewrites_cached_keys: bool = False
    #: Gives the attention weights from the logits in place of the softmax (``weights``).
    replaces_softmax: bool = False
    #: Defined for causal attention only: a stack without the causal mask (an encoder)
    #: refuses it.
    causal_only: bool = False
    #: The fused kernel families a term of the kind may declare, each with the methods that
    #: family calls on the term (``register_encoding`` checks them).
    families: Mapping[KernelFamily, tuple[str, ...]] = field(default_factory=dict)
    #: The attention it acts in: ``"self"`` (the only one so far).
    attention: str = "self"


F = TypeVar("F", bound=Callable)


def to_implement(method: F) -> F:
    """Marks a kind's method that each encoding of the kind implements: the contract checks
    (:mod:`.contracts`) read the mark, so a method left as the kind's raises no
    ``NotImplementedError`` in training but is refused at registration."""
    method.__to_implement__ = True  # type: ignore[attr-defined]
    return method


def implements(cls: type, method: str) -> bool:
    """Whether ``cls`` has ``method`` of its own or of a base other than the kind's mark."""
    found = getattr(cls, method, None)
    return found is not None and not getattr(found, "__to_implement__", False)
