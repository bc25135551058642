"""Where a model's position terms are, and the content-free probes that read them.

:func:`stacks` describes the encoder and decoder (causal or not, heads, max positions);
:func:`stack_terms` collects each stack's distinct position terms from its self-attention
layers -- a module shared by several layers (T5's table, TUPE, RoPE) is one
:class:`TermUse` with all its layers, so it becomes one panel -- grouped by class (one
picture per group). The probes are what :mod:`.term_pictures` feeds the terms' methods: one
query at position ``D`` over keys ``0..2D`` (causal ``0..D``), and the query and keys an
all-zero layer input gives (the projection biases, scaled as the attention scales).
Limits are clipped to what the stack supports (its max positions; an absolute term's
``max_len``), so nothing is read past the model's tables.
"""

from __future__ import annotations

from dataclasses import dataclass
import torch
from torch import Tensor, nn

from ...plugin.attention import PositionalMultiheadAttention
from ...core.encodings.base import PositionEncoding
from ...core.segments import SegmentAttention

@dataclass(frozen=True)
class Limits:
    """How far to draw: distances ``-max_distance..max_distance``, ``positions`` x
    ``positions`` heatmaps (both clipped to what a stack supports)."""

    max_distance: int = 64
    positions: int = 64


@dataclass(frozen=True)
class Stack:
    name: str  # "encoder" / "decoder"
    module: nn.Module
    causal: bool
    max_positions: int
    num_heads: int
    head_dim: int

    @property
    def num_layers(self) -> int:
        return len(self.module.layers)


@dataclass(frozen=True)
class TermUse:
    """A term and the layers that apply it; ``attn`` is the first of those layers'
    self-attention (its projections give the zero-input probe)."""

    term: PositionEncoding
    layers: tuple[int, ...]
    attn: PositionalMultiheadAttention


def stacks(model: nn.Module) -> list[Stack]:
    """Encoder and decoder. ``max_positions``: the longest sequence the stack accepts, its
    ``--max-source/target-positions`` or an absolute encoding's shorter table
    (``pos_max_length``, from :meth:`PositionEncoding.max_length`)."""
    args = model.args
    found = []
    for name, module, causal, positions in (
            ("encoder", model.encoder, False, args.max_source_positions),
            ("decoder", model.decoder, True, args.max_target_positions)):
        heads = getattr(args, f"{name}_attention_heads")
        longest = min(positions, module.pos_max_length or positions)
        found.append(Stack(name, module, causal, longest, heads,
                           getattr(args, f"{name}_embed_dim") // heads))
    return found


def term_name(term: PositionEncoding) -> str:
    return "segments" if isinstance(term, SegmentAttention) else term.name


def stack_terms(stack: Stack) -> list[list[TermUse]]:
    """The stack's distinct terms grouped by class (one picture per group), in layer order."""
    uses: dict[int, TermUse] = {}
    for index, layer in enumerate(stack.module.layers):
        attn = layer.self_attn
        if not isinstance(attn, PositionalMultiheadAttention):
            continue
        for term in attn.position_terms():
            old = uses.get(id(term))
            uses[id(term)] = TermUse(term, (*old.layers, index) if old else (index,),
                                     old.attn if old else attn)
    groups: dict[type, list[TermUse]] = {}
    for use in uses.values():
        groups.setdefault(type(use.term), []).append(use)
    return list(groups.values())


# -- probes --------------------------------------------------------------------------


def distance_probe(stack: Stack, limits: Limits) -> tuple[int, int, list[int]]:
    """One query at position ``D`` and keys ``0..2D`` (causal ``0..D``): ``(q_offset,
    k_len, distances j - i)``; ``D`` at most the stack's longest distance."""
    d = max(1, min(limits.max_distance, stack.max_positions - 1))
    k_len = d + 1 if stack.causal else 2 * d + 1
    return d, k_len, list(range(-d, k_len - d))


def zero_input_qk(attn: PositionalMultiheadAttention, k_len: int,
                  content: bool) -> tuple[Tensor, Tensor]:
    """Query ``(1, H, 1, d_h)`` and keys ``(1, H, k_len, d_h)`` as the attention makes them
    from an all-zero layer input (the projections' biases; the query scaled as the
    attention scales it), or zeros when ``content`` is False."""
    zero = attn.q_proj.weight.new_zeros(1, 1, attn.embed_dim)
    q = attn.q_proj(zero) * attn.scaling * (attn.encoding.content_scale if attn.encoding
                                            is not None else 1.0)
    k = attn.k_proj(zero)
    if not content:
        q, k = torch.zeros_like(q), torch.zeros_like(k)
    heads = (1, attn.num_heads, 1, attn.head_dim)
    return q.view(heads), k.view(heads).expand(-1, -1, k_len, -1)


def heatmap_size(stack: Stack, limits: Limits) -> int:
    return min(limits.positions, stack.max_positions)
