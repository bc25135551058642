"""What each position term of a model adds to the attention logits, as :class:`Picture`
records, computed by the terms' own methods -- the calls the attention makes.

For every stack (encoder, decoder) the self-attention layers' terms are collected
(:func:`stack_terms`; a module shared by several layers is one entry, with its layers) and
each term is read according to its declared
:class:`~fairseq_posenc.core.encodings.kinds.PositionKind`:

* ``DISTANCE_BIAS`` / ``DISTANCE_SCALE`` -- :meth:`DistanceBias.expanded` for one
  query at position ``D`` over keys ``0..2D`` (causal: ``0..D``): the bias (or factor) of
  every distance ``-D..D``, exactly the row the attention adds; AT5's soft buckets
  ``f_h(r)`` from :meth:`SoftBucketBias.soft_bucket`.
* ``LOW_RANK`` -- :func:`~fairseq_posenc.core.encodings.base.low_rank_bias` over positions
  ``0..n-1``; ``PAIR_BIAS`` -- :meth:`pair_bias` (TUPE with its reset and FIRE over
  positions ``0..n-1``; segment attention over a probe with one token per segment);
  ``PROJECTION`` -- :meth:`projected_bias`.
* ``CONTENT_BIAS`` / ``PROBABILITIES`` -- :meth:`logit_bias` with a content-free probe:
  Transformer-XL with ``q = k = 0``, which leaves exactly its global position term
  ``v.W_R R_{i-j} / sqrt(d_h)``; Shaw and Huang's method 4 with the query and key of an
  all-zero layer input (the projection biases), the part of ``q.aK`` / ``(q + k).a`` that no
  token changes. Shaw's key and value vectors themselves (their norms) come from
  :meth:`logit_bias` with unit queries and :meth:`value_term` with one-hot probabilities.
* ``CONTENT_LOGITS`` -- :meth:`content_logits` with all-ones ``q``, ``k``, divided by
  ``d_h``: the mean gate, i.e. the factor on ``q.k`` for isotropic queries and keys
  (Huang's method 3). CoPE, whose positions are counted by its gates: its term with the
  query and keys of an all-zero layer input (the part no token changes), and its logits
  ``q.e[p]`` at integer contextual positions (:func:`cope_pictures`).
* ``ROTATION`` -- :meth:`rotate_qk` of all-ones queries and keys: per frequency pair the
  product of a rotated pair is ``2 cos((j - i) theta_p)`` (xPos: times its decay
  ``zeta_p^((i - j)/gamma)``); the picture is the mean over pairs (1 at distance 0), i.e.
  ``q_i.k_j / d_h``, and the per-pair table.
* ``INPUT_GATES`` -- FoX's gates read an all-zero layer input (their biases: the part no
  token changes), every log-gate then ``log sigmoid(b_h)``: the bias ``c_i - c_j`` of one
  query at position ``D``, from the attention's own sums and bias
  (:mod:`fairseq_posenc.core.encodings.gate_sums`).
* ``WEIGHTS`` -- stick-breaking's weights of one query at position ``D`` for the query and
  keys of an all-zero layer input: every logit of the row the same, the recency of the
  process alone.
* ``PATH`` -- nothing content-free (an all-zero input transforms nothing): a note, and with
  ``--sentence`` the decoder's effective ``q.k`` on the sentence against plain ``q.k``
  (:func:`~.sentence.path_picture`).
* ``INPUT`` -- the stack's own position embedding module (cosine similarities).

Limits: distances up to ``--max-distance`` and heatmaps over ``--positions`` positions,
never past what the stack supports (its max positions; an absolute term's ``max_len``).
Everything runs under ``torch.no_grad`` in the model's dtype, with a fresh context.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from fairseq.modules import LearnedPositionalEmbedding
from torch import Tensor, nn

from ...core.context import PositionContext
from ...core.encodings.at5 import SoftBucketBias
from ...core.encodings.kinds import DistanceBias, PositionKind
from ...core.encodings.absolute_tables import low_rank_bias
from ...core.encodings.cope import CoPE
from ...core.encodings.shaw import Shaw
from ...core.encodings.xl import TransformerXL
from ...core.encodings.gate_sums import gate_bias, gate_sums
from ...core.segments import SegmentAttention
from . import captions
from .layers import (
    Limits,
    Stack,
    TermUse,
    distance_probe,
    heatmap_size,
    stack_terms,
    stacks,
    term_name,
    zero_input_qk,
)
from .records import CurvePanel, HeatmapPanel, Note, Picture, floats, layer_label

K = PositionKind


# -- pictures ------------------------------------------------------------------------


def head_labels(rows: int) -> list[str]:
    return ["all heads"] if rows == 1 else [f"head {h + 1}" for h in range(rows)]


def curve_picture(stack: Stack, group: list[TermUse], what: str, x: list[int],
                  values: Callable[[TermUse], Tensor], ylabel: str,
                  scale: str = "diverging", series: Optional[list[str]] = None,
                  xlabel: str = "distance j - i") -> Picture:
    """One panel per term module (its layers), one curve per row of ``values`` (heads,
    unless ``series`` names the rows)."""
    panels = []
    for use in group:
        rows = values(use)
        names = series or head_labels(rows.size(0))
        panels.append(CurvePanel(layer_label(use.layers, stack.num_layers), use.layers,
                                 dict(zip(names, floats(rows)))))
    name = term_name(group[0].term)
    return Picture(f"{stack.name}-{name}-{what}", stack.name, name,
                   captions.title(name, what, stack.name),
                   captions.caption(name, what, stack.causal), "curves", panels,
                   xlabel=xlabel, ylabel=ylabel, x=x,
                   scale=scale)  # type: ignore[arg-type]


def heatmap_picture(stack: Stack, group: list[TermUse], what: str,
                    values: Callable[[TermUse], Tensor], rows: list[str], cols: list[str],
                    xlabel: str, ylabel: str) -> Picture:
    """One panel per term module and head: ``values(use)`` is ``(H, rows, cols)``."""
    panels = []
    for use in group:
        table = values(use)
        for head, label in enumerate(head_labels(table.size(0))):
            title = f"{layer_label(use.layers, stack.num_layers)}, {label}"
            panels.append(HeatmapPanel(title, use.layers, None if table.size(0) == 1 else head,
                                       floats(table[head])))
    name = term_name(group[0].term)
    return Picture(f"{stack.name}-{name}-{what}", stack.name, name,
                   captions.title(name, what, stack.name),
                   captions.caption(name, what, stack.causal), "heatmaps", panels,
                   xlabel=xlabel, ylabel=ylabel, row_labels=rows, col_labels=cols)


def labels(n: int) -> list[str]:
    return [str(i) for i in range(n)]


def distance_pictures(stack: Stack, group: list[TermUse], limits: Limits) -> list[Picture]:
    d, k_len, x = distance_probe(stack, limits)
    term = group[0].term
    assert isinstance(term, DistanceBias)
    factor = term.kind is K.DISTANCE_SCALE
    pictures = [curve_picture(
        stack, group, "factor" if factor else "bias", x,
        lambda use: use.term.expanded(1, k_len, d, PositionContext())[:, 0],
        "factor on q.k" if factor else "added to the logit", "factor" if factor else "diverging")]
    if isinstance(term, SoftBucketBias):
        r = torch.tensor(x)

        def buckets(use: TermUse) -> Tensor:
            parts = [use.term.soft_bucket(r[r <= 0], positive=False)]
            if (r > 0).any():
                parts.append(use.term.soft_bucket(r[r > 0], positive=True))
            return torch.cat(parts, dim=-1)

        pictures.append(curve_picture(stack, group, "soft-bucket", x, buckets,
                                      "soft bucket f(j - i)", "sequential"))
    return pictures


def content_pictures(stack: Stack, group: list[TermUse], limits: Limits) -> list[Picture]:
    d, k_len, x = distance_probe(stack, limits)
    term = group[0].term
    content = not isinstance(term, TransformerXL)  # XL: q = k = 0 leaves v.W_R R alone

    def probe(use: TermUse) -> Tensor:
        q, k = zero_input_qk(use.attn, k_len, content)
        return use.term.logit_bias(q, k, d, PositionContext())[0, :, 0]

    pictures = [curve_picture(stack, group, "position-bias", x, probe, "added to the logit")]
    if isinstance(term, Shaw):
        pictures.append(curve_picture(stack, group, "vector-norms", x,
                                      lambda use: shaw_norms(use, d, k_len), "norm",
                                      "sequential", ["||aK[c]|| (keys)", "||aV[c]|| (values)"]))
    return pictures


def shaw_norms(use: TermUse, d: int, k_len: int) -> Tensor:
    """``||aK[c]||`` and ``||aV[c]||`` by distance (rows), read back through the term:
    :meth:`Shaw.logit_bias` of the unit queries gives ``aK[c]`` coordinate by coordinate,
    :meth:`Shaw.value_term` of one-hot probabilities gives ``aV[c]``."""
    term, ctx = use.term, PositionContext()
    head_dim = use.attn.head_dim
    unit = torch.eye(head_dim, dtype=use.attn.q_proj.weight.dtype)
    keys = unit.new_zeros(head_dim, 1, k_len, head_dim)
    a_k = term.logit_bias(unit.view(head_dim, 1, 1, head_dim), keys, d, ctx)[:, 0, 0]
    rows = [a_k.norm(dim=0)]
    if term.kind is K.PROBABILITIES:
        one_hot = torch.eye(k_len, dtype=unit.dtype).view(k_len, 1, 1, k_len)
        rows.append(term.value_term(one_hot, d, ctx)[:, 0, 0].norm(dim=-1))
    return torch.stack(rows)


def rotation_pictures(stack: Stack, group: list[TermUse], limits: Limits) -> list[Picture]:
    d, k_len, x = distance_probe(stack, limits)

    def per_pair(use: TermUse) -> Tensor:
        ones = use.attn.q_proj.weight.new_ones(1, 1, k_len, use.attn.head_dim)
        q, k = use.term.rotate_qk(ones, ones, 0, PositionContext())
        products = (q[0, 0, d] * k[0, 0]).unflatten(-1, (-1, 2)).sum(-1)  # k_len, pairs
        return products.t() / 2  # cos((j - i) theta_p), times xPos's decay

    mean = curve_picture(stack, group, "cosine", x,
                         lambda use: per_pair(use).mean(0, keepdim=True),
                         "mean over pairs: q_i.k_j / d_h for q = k = 1")
    pairs = heatmap_picture(stack, group, "pairs", lambda use: per_pair(use)[None],
                            [str(p) for p in range(stack.head_dim // 2)],
                            [str(r) for r in x], "distance j - i", "frequency pair p")
    return [mean, pairs]


def absolute_pictures(stack: Stack, group: list[TermUse], limits: Limits) -> list[Picture]:
    term = group[0].term
    n = heatmap_size(stack, limits)
    axes = ("key position j", "query position i")
    if term.kind is K.LOW_RANK:
        return [heatmap_picture(stack, group, "logits", lambda use: low_rank_bias(
            use.term, n, n, 0, None, PositionContext()), labels(n), labels(n), *axes)]
    if term.kind is K.PROJECTION:
        def projected(use: TermUse) -> Tensor:
            return use.term.projected_bias(n, None, PositionContext())

        cols = projected(group[0]).size(-1)
        return [heatmap_picture(stack, group, "logits", projected, labels(n), labels(cols),
                                "projected key row m", "query position i")]
    if isinstance(term, SegmentAttention):
        segments = term.seg_bias.size(-1)
        ctx = PositionContext(segment_ids=torch.arange(segments)[None])  # a token each
        return [heatmap_picture(stack, group, "logits", lambda use: use.term.pair_bias(
            segments, segments, 0, None, ctx)[0], labels(segments), labels(segments),
            "key segment", "query segment")]
    # PAIR_BIAS over positions: TUPE with --tupe-reset-first, FIRE, a user's; the bias is
    # (H, q, k) or, as PairBias documents it, (1, H, q, k)
    def pairs(use: TermUse) -> Tensor:
        bias = use.term.pair_bias(n, n, 0, None, PositionContext())
        return bias[0] if bias.dim() == 4 else bias

    return [heatmap_picture(stack, group, "logits", pairs, labels(n), labels(n), *axes)]


def content_logit_pictures(stack: Stack, group: list[TermUse],
                           limits: Limits) -> list[Picture]:
    d, k_len, x = distance_probe(stack, limits)
    if isinstance(group[0].term, CoPE):
        return cope_pictures(stack, group, d, k_len, x)

    def mean_gate(use: TermUse) -> Tensor:
        ones = use.attn.q_proj.weight.new_ones(1, use.attn.num_heads, k_len, use.attn.head_dim)
        logits = use.term.content_logits(ones[:, :, d:d + 1], ones, d, PositionContext())
        return logits[0, :, 0] / use.attn.head_dim

    return [curve_picture(stack, group, "gate", x, mean_gate, "mean gate (factor on q.k)",
                          "factor")]


def cope_pictures(stack: Stack, group: list[TermUse], d: int, k_len: int,
                  x: list[int]) -> list[Picture]:
    """CoPE reads content: with the query and keys of an all-zero layer input (the
    projection biases), the part of ``q.e[p_ij]`` that no token changes, by distance
    (every gate is then the same, ``p_ij`` a multiple of the distance); and ``z[p] =
    q.e[p]`` for that query at each integer contextual position ``p``."""
    def probe(use: TermUse) -> Tensor:
        q, k = zero_input_qk(use.attn, k_len, True)
        logits = use.term.content_logits(q, k, d, PositionContext())
        return (logits - q @ k.transpose(-1, -2))[0, :, 0]

    term = group[0].term
    lo, hi = max(term.p_lo, -d), min(term.npos - 1, d)

    def integer_logits(use: TermUse) -> Tensor:
        q, _ = zero_input_qk(use.attn, 1, True)
        return use.term.position_logits(q, lo, hi)[0, :, 0]

    return [curve_picture(stack, group, "position-bias", x, probe, "added to the logit"),
            curve_picture(stack, group, "position-logits", list(range(lo, hi + 1)),
                          integer_logits, "q.e[p] / sqrt(d_h)",
                          xlabel="contextual position p")]


def gate_pictures(stack: Stack, group: list[TermUse], limits: Limits) -> list[Picture]:
    d, k_len, x = distance_probe(stack, limits)

    def probe(use: TermUse) -> Tensor:
        zero = use.attn.q_proj.weight.new_zeros(k_len, 1, use.attn.embed_dim)
        sums = gate_sums(use.term, zero, None, None)
        bias = gate_bias(sums, use.attn.num_heads, k_len, use.term.bidirectional)
        return bias[0, :, d]

    return [curve_picture(stack, group, "bias", x, probe, "added to the logit")]


def weight_pictures(stack: Stack, group: list[TermUse], limits: Limits) -> list[Picture]:
    """Stick-breaking: the weights of one query at position ``D`` over keys ``0..D`` for
    the query and keys of an all-zero layer input (every logit of a row the same, so the
    weights are the process's recency alone)."""
    d, k_len, x = distance_probe(stack, limits)

    def probe(use: TermUse) -> Tensor:
        q, k = zero_input_qk(use.attn, k_len, content=True)
        weights, _ = use.term.weights(torch.matmul(q, k.transpose(-1, -2)), d)
        return weights[0, :, 0]

    return [curve_picture(stack, group, "weights", x, probe, "attention weight",
                          scale="sequential")]


def path_pictures(stack: Stack, group: list[TermUse], limits: Limits) -> list[Picture]:
    """PaTH: nothing without tokens (an all-zero input's ``w`` is 0: no transform); the
    report's note says so, and ``--sentence`` pictures a sentence's logits
    (:func:`~.sentence.path_picture`)."""
    return []


BY_KIND: dict[PositionKind, Callable[[Stack, list[TermUse], Limits], list[Picture]]] = {
    K.DISTANCE_BIAS: distance_pictures,
    K.DISTANCE_SCALE: distance_pictures,
    K.LOW_RANK: absolute_pictures,
    K.PAIR_BIAS: absolute_pictures,
    K.PROJECTION: absolute_pictures,
    K.CONTENT_BIAS: content_pictures,
    K.PROBABILITIES: content_pictures,
    K.CONTENT_LOGITS: content_logit_pictures,
    K.ROTATION: rotation_pictures,
    K.INPUT_GATES: gate_pictures,
    K.PATH: path_pictures,
    K.WEIGHTS: weight_pictures,
}


def input_picture(stack: Stack, limits: Limits) -> Optional[Picture]:
    """Cosine similarity of the stack's input position embeddings (fairseq's module, fed a
    row of ``n`` real tokens), or None when the stack has none."""
    embed = getattr(stack.module, "embed_positions", None)
    if embed is None:
        return None
    n = heatmap_size(stack, limits)
    tokens = torch.full((1, n), stack.module.padding_idx + 1, dtype=torch.long)
    vectors = embed(tokens)[0]  # n, d
    unit = vectors / vectors.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    name = ("learned" if isinstance(embed, LearnedPositionalEmbedding)
            or getattr(embed, "learned", False) else "sinusoidal")
    if getattr(stack.module.args, "pos_encoding", None) == "shape":
        name = "shape"  # fairseq's sinusoids, unshifted as in evaluation
    panel = HeatmapPanel("input embedding", (), None, floats(unit @ unit.t()))
    return Picture(f"{stack.name}-{name}-cosine", stack.name, name,
                   captions.title(name, "cosine", stack.name),
                   captions.caption(name, "cosine", stack.causal), "heatmaps", [panel],
                   xlabel="position j", ylabel="position i", row_labels=labels(n),
                   col_labels=labels(n))


@torch.no_grad()
def position_pictures(model: nn.Module, limits: Limits) -> tuple[list[Picture], list[Note]]:
    """Every picture of every stack's position terms, and notes for stacks without any."""
    pictures: list[Picture] = []
    notes: list[Note] = []
    for stack in stacks(model):
        found = [p for p in [input_picture(stack, limits)] if p is not None]
        groups = stack_terms(stack)
        for group in groups:
            found += BY_KIND[group[0].term.kind](stack, group, limits)
            if group[0].term.kind in captions.ONLY_WITH_TOKENS:
                notes.append(Note(stack.name, captions.ONLY_WITH_TOKENS[group[0].term.kind]))
        if not groups and not found:
            notes.append(Note(stack.name, captions.NO_POSITION_TERM))
        pictures += found
    return pictures, notes
