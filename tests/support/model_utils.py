"""Builders shared by the numeric tests: tiny models and single attention layers."""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from fairseq.data import Dictionary

from fairseq_posenc.plugin import build
from fairseq_posenc.plugin.attention import PositionalMultiheadAttention
from fairseq_posenc.core.encodings import ENCODINGS, PositionScope, get_encoding
from fairseq_posenc.core.encodings.registry import option_values

INPUT_ENCODINGS = ["sinusoidal", "learned", "none", "shape"]
# Every registered encoding: a new one is covered by the shared tests as soon as it exists.
ATTENTION_ENCODINGS = sorted(name for name, cls in ENCODINGS.items() if not cls.at_input)
ALL_ENCODINGS = INPUT_ENCODINGS + ATTENTION_ENCODINGS
assert set(ALL_ENCODINGS) == set(ENCODINGS)
VOCAB = 40


def stack_params(names, ids=("False", "True")) -> list:
    """``(encoding, causal)`` for every stack each of ``names`` can be in: both, or the
    decoder alone for an encoding defined for causal attention only (PaTH,
    stick-breaking); each identified ``NAME-ids[causal]``."""
    import pytest

    return [pytest.param(name, causal, id=f"{name}-{ids[causal]}") for name in names
            for causal in (False, True) if causal or not get_encoding(name).causal_only()]

#: Whole tiny models (float32) against themselves: incremental decoding, padding.
MODEL_TOL = 1e-5


def dictionary() -> Dictionary:
    return build.toy_dictionary(VOCAB)


def build_model(encoding: str, extra: Sequence[str] = (), arch: str = "transformer_tiny",
                config: Optional[dict] = None):
    """A tiny ``transformer_posenc`` model in eval mode, dropout 0, position parameters
    drawn from N(0, 1) so that position terms are large enough to matter in comparisons.
    Seeded: the same model whichever tests ran before in the process. ``config``: values
    set on the model's configuration after parsing, as the tasks set ``--rope-scaling``
    on a checkpoint's."""
    d = dictionary()
    torch.manual_seed(0)
    args = build.model_args(
        f"{arch}_{encoding}",
        ["--dropout", "0", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
         "--encoder-ffn-embed-dim", "48", "--decoder-ffn-embed-dim", "48", *extra])
    for name, value in (config or {}).items():
        setattr(args, name, value)
    model = build.build_from_args(args, d)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "pos_encodings" in name or "embed_positions" in name:
                p.normal_(0.0, 1.0)
    return model.eval(), d


def encoding_values(encoding: str, **overrides) -> dict:
    """``encoding``'s options at their defaults but ``overrides``, checked."""
    return option_values(get_encoding(encoding), overrides)


def build_attention(
    encoding: str, *, causal: bool, embed_dim: int = 8, num_heads: int = 2,
    max_positions: int = 12, rope_scaling=None, **flags,
) -> PositionalMultiheadAttention:
    """One position-aware self-attention layer with its own encoding, in float64;
    ``rope_scaling``: the structural argument the plugin's tasks set at translation."""
    torch.manual_seed(0)
    attn = PositionalMultiheadAttention(embed_dim, num_heads)
    enc = get_encoding(encoding).build(
        encoding_values(encoding, **flags), num_heads=num_heads, head_dim=embed_dim // num_heads,
        causal=causal, max_positions=max_positions, rope_scaling=rope_scaling,
    )
    with torch.no_grad():
        for p in enc.parameters():
            p.normal_(0.0, 1.0)
        for p in attn.parameters():  # projection biases start at 0: make them count
            p.normal_(0.0, 0.5)
    attn.attach(enc, PositionScope())
    attn.encoding_module = enc  # registered here so .double() converts it too
    return attn.double().eval()


def assert_kernels_agree(model, d: Dictionary, choose, reference: str, other: str,
                         tol: float, device: str = "cpu") -> None:
    """A whole model with two kernel choices (``choose(model, name)``): the same encoder
    and decoder outputs (real source positions), and incremental decoding (single-query
    steps) equals ``other``'s full forward."""
    from tests.support.batches import random_source  # it imports this module
    src, lengths = random_source(d)
    src, lengths = src.to(device), lengths.to(device)
    prev = torch.randint(d.nspecial, VOCAB, (3, 6), device=device)
    prev[:, 0] = d.eos()
    outputs = {}
    with torch.no_grad():
        for name in (reference, other):
            choose(model, name)
            enc_out = model.encoder(src, lengths)
            outputs[name] = (enc_out["encoder_out"][0], model.decoder(prev, enc_out)[0])
        real = src.ne(d.pad()).t()
        assert (outputs[reference][0][real] - outputs[other][0][real]).abs().max() < tol
        assert (outputs[reference][1] - outputs[other][1]).abs().max() < tol
        state: dict = {}
        for t in range(prev.size(1)):
            step = model.decoder(prev[:, : t + 1], enc_out, incremental_state=state)[0][:, -1]
            assert (step - outputs[other][1][:, t]).abs().max() < tol, t


def assert_same_outputs(model, saved: dict) -> None:
    """``model``'s outputs on ``saved["inputs"]`` (a batch of left-padded sources and
    right-padded targets) equal ``saved["encoder_out"]`` and ``saved["logits"]`` at every
    real position. Padded positions are compared too, except as queries: their outputs are
    never used (cross-attention and the loss skip them), and no encoding promises anything
    there."""
    inputs = saved["inputs"]
    with torch.no_grad():
        enc_out = model.encoder(inputs["src_tokens"], inputs["src_lengths"])
        logits = model.decoder(inputs["prev_output_tokens"], enc_out)[0]
    pad = dictionary().pad()
    src_real = inputs["src_tokens"].ne(pad).t()  # (T, B), as encoder_out
    tgt_real = inputs["prev_output_tokens"].ne(pad)  # (B, T), as the logits
    torch.testing.assert_close(enc_out["encoder_out"][0][src_real],
                               saved["encoder_out"][src_real], rtol=0, atol=2e-5)
    torch.testing.assert_close(logits[tgt_real], saved["logits"][tgt_real], rtol=0, atol=2e-5)
