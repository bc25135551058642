"""fairseq glue: the ``transformer_posenc`` model, its encoder/decoder and arguments.

The model is fairseq's args-based ``TransformerModel`` with

* ``--pos-encoding NAME`` choosing the encoding (``fairseq_posenc.core.encodings``), or one
  per stack (``--encoder-pos-encoding``, ``--decoder-pos-encoding``: :mod:`.stacks`), and
  one flag per hyperparameter of each encoding;
* for input encodings, fairseq's own position embeddings configured accordingly;
* for attention-level encodings, input positions off (as in the papers; ``--keep-input-
  positions`` keeps them for ablations) and every encoder and decoder self-attention
  replaced by :class:`PositionalMultiheadAttention`. Encoder-decoder attention is stock.

Each stack (encoder, decoder) is built from its own view of the arguments
(:func:`.stacks.stack_args`: ``pos_encoding`` is the stack's encoding), in one phase: its
:class:`PositionStack` first (its position terms: one encoding per layer, or one shared by
all layers; segment attention), then the layers, each built with its terms. The stack owns
(registers) the terms; it builds a :class:`PositionContext` for each forward, which its
layers read through the position stack's :class:`PositionScope`, and the decoder keeps one
context per generated sequence in ``incremental_state`` so that per-step work is a slice.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoder,
    TransformerEncoder,
    TransformerModel,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import Tensor, nn

from .attention import AttachedPositions, PositionalMultiheadAttention
from .checkpoint import decode_tag, encode_tag
from ..core.context import PositionContext, PositionScope
from ..core.encodings import get_encoding
from ..core.encodings.base import PositionEncoding
from .input_positions import InputPositions
from ..core.kernel_choice import choose_kernels
from ..core.segments import SegmentAttention, segment_embedding, segment_ids
from .position_args import (
    add_position_args,
    configure_positions,
    encoding_values,
    separator_index,
    uses_segments,
)
from .stacks import model_tag, stack_args
from .translation_scaling import model_scaling
from .rope_lengths import decoder_lengths, source_lengths

logger = logging.getLogger(__name__)

# --- layers and stacks --------------------------------------------------------------


def positional_self_attention(layer: nn.Module, heads: int, cfg: TransformerConfig,
                              positions: AttachedPositions) -> PositionalMultiheadAttention:
    return PositionalMultiheadAttention(
        layer.embed_dim,
        heads,
        dropout=cfg.attention_dropout,
        q_noise=layer.quant_noise,
        qn_block_size=layer.quant_noise_block_size,
        positions=positions,
    )


class PositionalEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer with position-aware self-attention built with ``positions``."""

    def __init__(self, cfg: TransformerConfig, positions: AttachedPositions,
                 return_fc: bool = False) -> None:
        self._pending_positions = positions  # read by build_self_attention, within __init__
        super().__init__(cfg, return_fc=return_fc)
        del self._pending_positions

    def build_self_attention(self, embed_dim: int, cfg: TransformerConfig):
        return positional_self_attention(self, cfg.encoder.attention_heads, cfg,
                                         self._pending_positions)


class PositionalDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with position-aware self-attention built with ``positions``."""

    def __init__(self, cfg: TransformerConfig, positions: AttachedPositions,
                 no_encoder_attn: bool = False) -> None:
        self._pending_positions = positions  # read by build_self_attention, within __init__
        super().__init__(cfg, no_encoder_attn)
        del self._pending_positions

    def build_self_attention(
        self, embed_dim: int, cfg: TransformerConfig, add_bias_kv=False, add_zero_attn=False
    ):
        if add_bias_kv or add_zero_attn or cfg.cross_self_attention:
            raise ValueError(
                "attention-level position encodings do not support --cross-self-attention "
                "or bias_kv / zero_attn in decoder self-attention"
            )
        return positional_self_attention(self, cfg.decoder.attention_heads, cfg,
                                         self._pending_positions)


def wrap_layer(layer: nn.Module, cfg: TransformerConfig) -> nn.Module:
    """Activation checkpointing and FSDP wrapping, as fairseq's ``build_*_layer`` do."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)


@dataclass
class PositionStack:
    """A stack's positions, the plugin's counterpart of
    :class:`fairseq_posenc.nn.PositionStack`: the position terms of each of its layers and
    the scope through which they read each forward's context. It is phase one of a stack's
    build, made before the layers; phase two hands the terms out, one layer at a time, as
    fairseq builds each."""

    scope: PositionScope
    #: Per layer: its encoding (None: plain) and further terms (segment attention).
    encodings: list[Optional[PositionEncoding]]
    extra_terms: list[list[PositionEncoding]]
    built: int = field(default=0)

    def next_layer(self) -> AttachedPositions:
        i, self.built = self.built, self.built + 1
        return AttachedPositions.of(self.encodings[i], self.scope, self.extra_terms[i])


class PositionalEncoderDecoderMixin:
    """What :class:`PositionalEncoder` and :class:`PositionalDecoder` add alike to fairseq's
    ``TransformerEncoder`` and ``TransformerDecoder``: each builds its
    :class:`PositionStack` with its first layer, registers the stack's terms after the
    layers, and checks and chooses the positions of each forward."""

    args: argparse.Namespace
    layers: nn.ModuleList
    padding_idx: int

    def _uses_attention_encoding(self) -> bool:
        return not get_encoding(self.args.pos_encoding).at_input

    def _layer_positions(self, config: TransformerConfig, causal: bool,
                         max_positions: int) -> AttachedPositions:
        """The next layer's terms; the first call builds those of the whole stack."""
        stack: Optional[PositionStack] = getattr(self, "_position_stack", None)
        if stack is None:
            heads, layers = config.attention_heads, config.layers
            head_dim = config.embed_dim // heads
            encoding = get_encoding(self.args.pos_encoding)
            per_layer: list[Optional[PositionEncoding]] = [None] * layers
            if not encoding.at_input:
                per_layer = encoding.build_stack(
                    encoding_values(self.args, encoding), layers, self.args.pos_layers,
                    num_heads=heads, head_dim=head_dim, causal=causal,
                    max_positions=max_positions, rope_scaling=model_scaling(self.args))
            stack = self._position_stack = PositionStack(PositionScope(), per_layer,
                                                         self._extra_terms(heads, layers))
        return stack.next_layer()

    def _extra_terms(self, heads: int, layers: int) -> list[list[PositionEncoding]]:
        """Per layer, the terms beside the encoding's (the encoder's segment attention)."""
        return [[] for _ in range(layers)]

    def _own_positions(self, max_positions: int, side: str) -> None:
        """After the layers: register the encodings (one module per shared encoding), after
        every other submodule as before (so the parameters, and an optimizer's state,
        keep their order)."""
        encoding = get_encoding(self.args.pos_encoding)
        values = encoding_values(self.args, encoding)
        self.pos_max_length = encoding.max_length(values, max_positions)
        self.pos_flag = encoding.max_length_flag(values)
        self.pos_side = side
        stack: Optional[PositionStack] = getattr(self, "_position_stack", None)
        if stack is not None:
            del self._position_stack
        self.pos_scope = stack.scope if stack is not None else PositionScope()
        if stack is not None and not encoding.at_input:
            self.pos_encodings = nn.ModuleList(
                [m for m in dict.fromkeys(stack.encodings) if m is not None])
        self.pos_draw = encoding.position_draw(values, self.args.random_positions)
        if self.pos_draw is not None and self.embed_positions is not None:
            # the input embedding reads the positions each training forward chooses
            self.embed_positions = InputPositions(self.embed_positions, self.pos_scope)

    def _chosen_positions(self, tokens: Tensor) -> Optional[Tensor]:
        """The positions of this forward's tokens where a training forward chooses them
        per sequence (SHAPE's shift, ``--random-positions``' draw), else None (the count
        of real tokens): drawn once for the stack, read by every term of every layer."""
        if self.pos_draw is None or not self.training:
            return None
        return self.pos_draw(tokens.eq(self.padding_idx))

    def _check_length(self, tokens: Tensor) -> None:
        limit = self.pos_max_length
        if limit is None or tokens.size(1) <= limit:
            return
        longest = int(tokens.ne(self.padding_idx).sum(dim=1).max())
        if longest > limit:
            flag = self.pos_flag or (
                "--max-source-positions" if self.pos_side == "source" else "--max-target-positions"
            )
            raise ValueError(
                f"a {self.pos_side} sequence has {longest} tokens, but --pos-encoding "
                f"{self.args.pos_encoding} has positions for only {limit} ({flag}). "
                f"Train with a larger {flag}, shorten or skip long inputs "
                "(--skip-invalid-size-inputs-valid-test), or use a relative encoding."
            )


class PositionalEncoder(PositionalEncoderDecoderMixin, TransformerEncoder):
    def __init__(self, args, dictionary, embed_tokens, return_fc: bool = False) -> None:
        super().__init__(args, dictionary, embed_tokens, return_fc=return_fc)
        self.segment_separator: Optional[int] = None
        if uses_segments(args):
            self.segment_separator = separator_index(args, dictionary)
        if args.segment_embedding:
            self.segment_embed = segment_embedding(args.num_segments, embed_tokens.embedding_dim)
        stack: Optional[PositionStack] = getattr(self, "_position_stack", None)
        if args.segment_attention and stack is not None:
            self.segment_attention = nn.ModuleList([terms[0] for terms in stack.extra_terms])
        self._own_positions(args.max_source_positions, "source")

    def _extra_terms(self, heads: int, layers: int) -> list[list[PositionEncoding]]:
        if not self.args.segment_attention:
            return super()._extra_terms(heads, layers)
        return [[SegmentAttention(heads, self.args.num_segments)] for _ in range(layers)]

    def _uses_attention_encoding(self) -> bool:
        return super()._uses_attention_encoding() or bool(self.args.segment_attention)

    def build_encoder_layer(self, args):
        if not self._uses_attention_encoding():
            return super().build_encoder_layer(args)
        cfg = TransformerConfig.from_namespace(args)
        positions = self._layer_positions(cfg.encoder, causal=False,
                                          max_positions=cfg.max_source_positions)
        return wrap_layer(PositionalEncoderLayer(cfg, positions, return_fc=self.return_fc), cfg)

    def forward_embedding(self, src_tokens, token_embedding: Optional[Tensor] = None):
        if self.args.segment_embedding:  # BERT: token + segment (+ position) embeddings
            if token_embedding is None:
                token_embedding = self.embed_tokens(src_tokens)
            token_embedding = token_embedding + self.segment_embed(
                self.pos_scope.context.segment_ids)
        return super().forward_embedding(src_tokens, token_embedding)

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None):
        self._check_length(src_tokens)
        segments = (None if self.segment_separator is None else
                    segment_ids(src_tokens, self.segment_separator, self.args.num_segments))
        context = PositionContext(segment_ids=segments,
                                  positions=self._chosen_positions(src_tokens),
                                  lengths=source_lengths(self.args, src_tokens, self.padding_idx))
        with self.pos_scope.open(context):
            return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)


class PositionalDecoder(PositionalEncoderDecoderMixin, TransformerDecoder):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn: bool = False,
                 output_projection=None) -> None:
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self._own_positions(args.max_target_positions, "target")

    def build_decoder_layer(self, args, no_encoder_attn: bool = False):
        if not self._uses_attention_encoding():
            return super().build_decoder_layer(args, no_encoder_attn)
        cfg = TransformerConfig.from_namespace(args)
        positions = self._layer_positions(cfg.decoder, causal=True,
                                          max_positions=cfg.max_target_positions)
        return wrap_layer(PositionalDecoderLayer(cfg, positions, no_encoder_attn), cfg)

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment: bool = False, alignment_layer=None,
                         alignment_heads=None):
        self._check_length(prev_output_tokens)
        if incremental_state is None:
            context = PositionContext(positions=self._chosen_positions(prev_output_tokens))
        else:
            # Kept for the whole generated sequence; never reordered (nothing in it
            # depends on the batch), so it lives outside the attention's own buffer.
            context = self.get_incremental_state(incremental_state, "pos_context")
            if context is None:
                context = PositionContext(incremental=True)
                self.set_incremental_state(incremental_state, "pos_context", context)
        context.lengths = decoder_lengths(self, encoder_out)  # --rope-scaling dynamic
        with self.pos_scope.open(context):
            return super().extract_features(
                prev_output_tokens, encoder_out, incremental_state,
                full_context_alignment, alignment_layer, alignment_heads,
            )


# --- model --------------------------------------------------------------------------


@register_model("transformer_posenc")
class PosencTransformerModel(TransformerModel):
    """fairseq's Transformer with a choice of position encoding (``--pos-encoding``)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_position_args(parser)

    @classmethod
    def build_model(cls, args, task):
        configure_positions(args)
        model = super().build_model(args, task)
        # checkpoints written before the flag existed: their args lack it
        choose_kernels(model, getattr(args, "pos_kernels", "auto"))
        return model

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return PositionalEncoder(stack_args(args, "encoder"), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return PositionalDecoder(stack_args(args, "decoder"), tgt_dict, embed_tokens,
                                 no_encoder_attn=getattr(args, "no_cross_attention", False))

    # The encodings travel with the weights (see checkpoint.py): NAME, or ENCODER/DECODER.
    def get_extra_state(self) -> Tensor:
        return encode_tag(model_tag(self.args))

    def set_extra_state(self, state: Any) -> None:
        theirs = decode_tag(state) if isinstance(state, torch.Tensor) else repr(state)
        ours = model_tag(self.args)
        if theirs != ours:
            def flags(tag: str) -> str:
                encoder, _, decoder = tag.partition("/")
                return (f"--encoder-pos-encoding {encoder} --decoder-pos-encoding {decoder}"
                        if decoder else f"--pos-encoding {tag}")
            raise ValueError(
                f"this checkpoint was trained with {flags(theirs)}, but the model "
                f"being built uses {flags(ours)}. "
                "fairseq-generate and fairseq-interactive rebuild the model from the "
                "checkpoint's own arguments; for fairseq-train --restore-file or "
                f"--finetune-from-model pass the checkpoint's --arch and {flags(theirs)}."
            )

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        if strict and "_extra_state" not in state_dict:
            raise ValueError(
                "this checkpoint was not written by fairseq-posenc's transformer_posenc "
                "model (it has no position-encoding tag), so it cannot be loaded into "
                f"--arch {getattr(self.args, 'arch', 'transformer_posenc')}. Load it with "
                "the architecture it was trained with."
            )
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
