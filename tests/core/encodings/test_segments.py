"""Segment attention (DIET eq. (1)-(3), ``E_S``) and the BERT-style segment embedding."""

from __future__ import annotations

import math

import pytest
import torch

import tests.support.cli_utils as cu
from fairseq_posenc.core.encodings import PositionContext, PositionScope
from fairseq_posenc.core.segments import SegmentAttention, segment_ids
from tests.support.model_utils import build_attention, build_model
from tests.support.naive import naive_attention

TOL = 1e-9
SEP = "w5"  # a symbol of the tests' dictionary (model_utils.dictionary)


def test_segment_ids_count_separators_before_each_token():
    sep, pad = 9, 1
    tokens = torch.tensor([[pad, pad, 4, 9, 5, 6, 9, 7, 2],
                           [4, 5, 6, 7, 8, 4, 5, 6, 2]])
    # A separator closes its sentence: it belongs to the segment before it.
    expected = [[0, 0, 0, 0, 1, 1, 1, 2, 2],
                [0, 0, 0, 0, 0, 0, 0, 0, 0]]
    assert segment_ids(tokens, sep, 3).tolist() == expected
    with pytest.raises(ValueError, match="a source has 3 segments .* --num-segments is 2; "
                                         "raise --num-segments"):
        segment_ids(tokens, sep, 2)


@pytest.mark.parametrize("encoding,flags,position_term", [
    ("none", {}, None),
    ("diet_rel", {"diet_rel_max_len": 4}, "diet_rel"),
])
def test_segment_attention_with_any_encoding(encoding, flags, position_term):
    """e_ij = q_i.k_j/sqrt(d) [+ R[r]] + S[h][seg(i), seg(j)], element by element."""
    if encoding == "none":
        attn = build_attention("diet_rel", causal=False, **flags)
        attn.attach(None, PositionScope())
    else:
        attn = build_attention(encoding, causal=False, **flags)
    segments = SegmentAttention(attn.num_heads, 3).double()
    with torch.no_grad():
        segments.seg_bias.normal_(0.0, 1.0)
    attn.attach(None if encoding == "none" else attn.encoding, attn.scope, [segments])
    T, B = 6, 2
    x = torch.randn(T, B, attn.embed_dim, dtype=torch.float64)
    ids = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 1, 2]])
    pad = torch.zeros(B, T, dtype=torch.bool)
    with attn.scope.open(PositionContext(segment_ids=ids)):
        out, _ = attn(x, x, x, key_padding_mask=pad, need_weights=False)

    def term(b, h, i, j, q):
        value = float(segments.seg_bias[h, ids[b, i], ids[b, j]])
        if position_term == "diet_rel":  # R[h][clip(j - i, -3, 3)], table over -3..3
            value += float(attn.encoding.rel_bias[h, max(-3, min(3, j - i)) + 3])
        return value

    ref = naive_attention(attn, x, False, term)
    assert (out - ref).abs().max() < TOL


def _model(encoding, extra=()):
    return build_model(encoding, ["--segment-separator", SEP, "--num-segments", "3", *extra])


def test_segment_attention_per_layer_and_used():
    model, d = _model("diet_rel", ["--segment-attention"])
    layers = [layer.self_attn for layer in model.encoder.layers]
    assert [a.position_terms()[-1] for a in layers] == list(model.encoder.segment_attention)
    assert model.encoder.segment_attention[0] is not model.encoder.segment_attention[1]
    assert all(not isinstance(term, SegmentAttention) for layer in model.decoder.layers
               for term in layer.self_attn.position_terms())
    model, d = _model("diet_rel", ["--segment-attention", "--encoder-layers", "1"])
    sep = d.index(SEP)
    src = torch.tensor([[12, 13, sep, 14, 15, d.eos()]])
    with torch.no_grad():
        before = model.encoder(src, torch.tensor([6]))["encoder_out"][0]
        model.encoder.segment_attention[0].seg_bias[:, 0, 1] += 3.0  # segment 0 -> 1 only
        after = model.encoder(src, torch.tensor([6]))["encoder_out"][0]
    assert (after[:3] - before[:3]).abs().max() > 1e-3  # queries in segment 0 changed
    assert (after[3:] - before[3:]).abs().max() < 1e-6  # the others did not


@pytest.mark.parametrize("encoding", ["sinusoidal", "diet_abs", "rope"])
@pytest.mark.parametrize("flag", ["--segment-attention", "--segment-embedding"])
def test_segments_are_padding_invariant(encoding, flag):
    model, d = _model(encoding, [flag])
    sep = d.index(SEP)
    src = torch.tensor([[12, 13, sep, 14, sep, 15, d.eos()]])
    padded = torch.cat([torch.full((1, 3), d.pad()), src], 1)
    with torch.no_grad():
        alone = model.encoder(src, torch.tensor([7]))["encoder_out"][0]
        batch = model.encoder(torch.cat([padded, torch.cat([src, src[:, :3]], 1)]),
                              torch.tensor([7, 10]))["encoder_out"][0]
    assert (batch[3:, 0] - alone[:, 0]).abs().max() < 1e-5


def test_segment_embedding_is_added_like_a_token_embedding():
    model, d = _model("sinusoidal", ["--segment-embedding"])
    encoder = model.encoder
    sep = d.index(SEP)
    src = torch.tensor([[12, sep, 14, sep, 15, d.eos()]])
    seg = torch.tensor([[0, 0, 1, 1, 2, 2]])
    with torch.no_grad(), encoder.pos_scope.open(PositionContext(segment_ids=seg)):
        x, _ = encoder.forward_embedding(src)
        tokens = encoder.embed_tokens.weight[src[0]] + encoder.segment_embed.weight[seg[0]]
        expected = math.sqrt(32) * tokens + encoder.embed_positions(src)[0]
    assert (x[0] - expected).abs().max() < 1e-5


def test_separator_missing_from_dictionary():
    with pytest.raises(ValueError, match=r"--segment-separator '<sep>' is not in the source "
                                         "dictionary"):
        build_model("diet_rel", ["--segment-attention"])


def test_too_many_segments_in_a_source():
    model, d = _model("diet_rel", ["--segment-attention"])
    sep = d.index(SEP)
    src = torch.tensor([[12, sep, 13, sep, 14, sep, 15, d.eos()]])
    with pytest.raises(ValueError, match="a source has 4 segments"):
        model.encoder(src, torch.tensor([8]))


@pytest.fixture
def _one_torch_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.mark.slow  # fairseq-train and -generate
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning",
                            "ignore::DeprecationWarning")
def test_cli_two_sentence_sources(tmp_path, _one_torch_thread):
    """fairseq-train / fairseq-generate on sources of two sentences joined by <sep>."""
    single, raw, bin_ = tmp_path / "single", tmp_path / "raw", tmp_path / "bin"
    cu.create_parallel_corpus(single, num_train=200, num_valid=20, num_test=13)
    raw.mkdir()
    for split in ("train", "valid", "test"):
        for lang in (cu.SRC, cu.TGT):
            lines = cu.read_lines(single / f"{split}.{lang}")
            pairs = [f"{a} <sep> {b}" for a, b in zip(lines, lines[1:] + lines[:1])]
            cu.write_lines(raw / f"{split}.{lang}", pairs)
    cu.preprocess_translation_data(raw, bin_)
    save_dir = tmp_path / "ckpt"
    cu.train_translation_model(bin_, save_dir, "transformer_tiny_diet_rel", max_update=3,
                               extra_flags=["--segment-attention", "--segment-embedding"])
    out = cu.generate_main(bin_, save_dir / "checkpoint_last.pt")
    assert sorted(cu.hypotheses(out, "H")) == list(range(13)), out[-2000:]
