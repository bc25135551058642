"""Whole tiny models: incremental decoding == full forward, beam search scores, padding.

The reference for every incremental result is the same model's full-sequence forward
(teacher forcing with the causal mask), the path used in training.
"""

from __future__ import annotations

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from fairseq_posenc.plugin.attention import PositionalMultiheadAttention
from fairseq_posenc.core.positions import real_positions
from tests.support.batches import random_source
from tests.support.counting import count_distance_tables
from tests.support.model_utils import ALL_ENCODINGS, ATTENTION_ENCODINGS, VOCAB, build_model
from tests.support.model_utils import MODEL_TOL as TOL

BEAM = 10
LENPEN = 0.6


def full_logits(model, prev, enc_out):
    return model.decoder(prev, enc_out)[0]


@pytest.mark.parametrize("encoding", ALL_ENCODINGS)
def test_incremental_equals_full_forward_with_beam_reordering(encoding):
    assert_incremental_equals_full(*build_model(encoding), steps=9)


@pytest.mark.slow  # 67 decoding steps per case
@pytest.mark.parametrize("encoding,flags", [
    ("xl", ["--xl-clamp-len", "2"]),  # a clip: the bias read by clipped distance
    ("xl", ["--xl-untie-r"]),
    ("huang4", ["--huang4-clip", "2"]),
    ("shaw", ["--shaw-clip", "2"]),  # steps past the clip read clipped rows
    ("shaw", ["--shaw-clip", "2", "--shaw-no-value"]),
    ("huang4", []),
    ("rope", []),
    ("xpos", ["--xpos-scale-base", "16"]),  # a decay that 67 steps show
    ("t5", []),
    ("kerple_power", []),
    ("sandwich", []),
    # L = 2 |l|, l ~ N(0, 1): most steps are normalised by their own position
    ("fire", ["--fire-init-l", "2"]),
    ("fire", ["--fire-init-l", "2", "--fire-shared"]),
    ("cope", ["--cope-npos", "4"]),  # contextual positions clamped at 3
    ("cope", ["--cope-shared"]),
])
def test_incremental_equals_full_forward_past_the_first_window(encoding, flags):
    """Decoding steps read content-free tables from windows that the context grows
    (64 positions at the first step, then twice what is needed and 64 more): 67 steps
    read each one past its first window."""
    assert_incremental_equals_full(*build_model(encoding, flags), steps=67)


@pytest.mark.parametrize("kind", ["linear", "ntk", "yarn", "llama3", "dynamic"])
@pytest.mark.parametrize("encoding", ["rope", "xpos"])
def test_incremental_equals_full_forward_with_rope_scaling(encoding, kind):
    """--rope-scaling is static (one set of frequencies, YaRN's temperature a constant;
    dynamic NTK's fixed per sentence by its length bound, here fairseq's default 200 for
    the decoder): keys cached at earlier steps stay valid."""
    config = {"rope_scaling": kind, "rope_scaling_factor": 4.0,
              "rope_scaling_original_len": None if kind in ("linear", "ntk") else 6}
    assert_incremental_equals_full(*build_model(encoding, config=config), steps=9)


@pytest.mark.parametrize("encoding", ["rope", "xpos"])
def test_incremental_equals_full_forward_with_rope_fraction(encoding):
    """p-RoPE: unrotated pairs (angle 0) in the step matrix and the full table alike."""
    assert_incremental_equals_full(*build_model(encoding, ["--rope-fraction", "0.25"]),
                                   steps=9)


def assert_incremental_equals_full(model, d, steps: int) -> None:
    bsz, beam = 2, 3
    src, lengths = random_source(d, bsz)
    src, lengths = src.repeat_interleave(beam, 0), lengths.repeat_interleave(beam, 0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        enc_out = model.encoder(src, lengths)
        prefix = torch.full((bsz * beam, 1), d.eos())
        state: dict = {}
        for t in range(steps):
            step = model.decoder(prefix, enc_out, incremental_state=state)[0][:, -1]
            full = full_logits(model, prefix, enc_out)[:, -1]
            assert (step - full).abs().max() <= TOL, f"step {t}"
            # Beam search keeps, for each sentence, some of its hypotheses in a new order.
            new_order = torch.cat([s * beam + torch.randint(0, beam, (beam,), generator=g)
                                   for s in range(bsz)])
            model.decoder.reorder_incremental_state_scripting(state, new_order)
            prefix = prefix[new_order]
            nxt = torch.randint(d.nspecial, VOCAB, (bsz * beam, 1), generator=g)
            prefix = torch.cat([prefix, nxt], 1)


@pytest.mark.parametrize("encoding", ALL_ENCODINGS)
def test_beam_search_scores_equal_full_forward_rescoring(encoding):
    model, d = build_model(encoding)
    src, lengths = random_source(d)
    generator = SequenceGenerator([model], d, beam_size=BEAM, len_penalty=LENPEN,
                                  max_len_a=0, max_len_b=12)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths}}
    with torch.no_grad():
        hypos = generator.generate([model], sample)
        enc_out = model.encoder(src, lengths)
        checked = 0
        for row, row_hypos in enumerate(hypos):
            assert len(row_hypos) == BEAM
            one = model.encoder.reorder_encoder_out(enc_out, torch.tensor([row]))
            for hypo in row_hypos:
                tokens = hypo["tokens"]
                prev = torch.cat([torch.tensor([d.eos()]), tokens[:-1]]).unsqueeze(0)
                lprobs = model.get_normalized_probs((full_logits(model, prev, one), None),
                                                    log_probs=True)
                positional = lprobs[0].gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
                assert torch.allclose(positional, hypo["positional_scores"], atol=1e-4)
                score = positional.sum() / len(tokens) ** LENPEN
                assert abs(float(score) - float(hypo["score"])) < 1e-4
                checked += 1
    assert checked == 3 * BEAM


@pytest.mark.parametrize("encoding", ALL_ENCODINGS)
def test_encoder_padding_invariance(encoding):
    """A padded source (left or right) encodes like the same source alone."""
    model, d = build_model(encoding)
    src, lengths = random_source(d)
    with torch.no_grad():
        batch = model.encoder(src, lengths)["encoder_out"][0]
        for row in range(src.size(0)):
            real = src[row][src[row].ne(d.pad())].unsqueeze(0)
            alone = model.encoder(real, lengths[row : row + 1])["encoder_out"][0][:, 0]
            padded_rows = batch[:, row][src[row].ne(d.pad())]
            assert (alone - padded_rows).abs().max() < TOL
        # right padding: same real tokens, pads at the end
        right = torch.full_like(src, d.pad())
        for row in range(src.size(0)):
            real = src[row][src[row].ne(d.pad())]
            right[row, : len(real)] = real
        out_right = model.encoder(right, lengths)["encoder_out"][0]
        for row in range(src.size(0)):
            n = int(lengths[row])
            assert (out_right[:n, row] - batch[-n:, row]).abs().max() < TOL


@pytest.mark.parametrize("encoding", ALL_ENCODINGS)
def test_left_padded_target_trains_like_the_target_alone(encoding):
    """Teacher forcing in training mode, gradients on (learned biases take the explicit
    path on CPU): a left-padded target (``--left-pad-target``) decodes like the same target
    alone, and its first padding query, which the causal mask leaves no real key, gives
    finite outputs and gradients."""
    model, d = build_model(encoding)
    model.train()  # dropout is 0
    if model.decoder.pos_draw is not None:
        # SHAPE draws a shift per sequence in training: one shift for every sequence here,
        # so that a row and the same target alone have the same positions
        model.decoder.pos_draw = lambda padding: (
            real_positions(padding, padding.size(1)) + 7).masked_fill(padding, 0)
    src, lengths = random_source(d)
    enc_out = model.encoder(src, lengths)
    g = torch.Generator().manual_seed(2)
    prev = torch.randint(d.nspecial, VOCAB, (3, 6), generator=g)
    prev[:, 0] = d.eos()
    prev[0, :2] = d.pad()
    prev[0, 2] = d.eos()
    logits = full_logits(model, prev, enc_out)
    assert torch.isfinite(logits).all()
    logits.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with torch.no_grad():
        for row in range(3):
            real = prev[row][prev[row].ne(d.pad())].unsqueeze(0)
            row_enc = model.encoder.reorder_encoder_out(enc_out, torch.tensor([row]))
            alone = full_logits(model, real, row_enc)[0]
            assert (alone - logits[row, -real.size(1):]).abs().max() < TOL


@pytest.mark.parametrize("encoding", ALL_ENCODINGS)
def test_position_information_is_used(encoding):
    """Guards the tests above from being vacuous: permuting the source changes the
    encoding of its tokens, except without any position information."""
    model, d = build_model(encoding)
    src, lengths = random_source(d)
    src = src[2:]  # no padding
    perm = torch.tensor([3, 1, 0, 2, 5, 4, 6])
    with torch.no_grad():
        out = model.encoder(src, lengths[2:])["encoder_out"][0]
        out_perm = model.encoder(src[:, perm], lengths[2:])["encoder_out"][0]
    diff = (out[perm] - out_perm).abs().max()
    assert (diff < TOL) if encoding == "none" else (diff > 1e-3)


@pytest.mark.parametrize("encoding,flags,tables_per_stack", [
    ("t5", [], 1),
    ("diet_rel", ["--diet-rel-sharing", "layer"], 1),
    ("diet_rel", [], 2),  # one per layer (tiny models have 2)
    ("alibi", [], 1),
    ("t5_nob", [], 1),
    ("kerple_log", [], 1),
    ("kerple_power", [], 1),
    ("sandwich", [], 1),
])
def test_content_free_bias_computed_once_per_forward(encoding, flags, tables_per_stack, monkeypatch):
    model, d = build_model(encoding, flags)
    assert len(model.encoder.pos_encodings) == tables_per_stack
    calls = count_distance_tables(model, monkeypatch)
    src, lengths = random_source(d)
    prev = torch.full((3, 5), d.eos())
    with torch.no_grad():
        enc_out = model.encoder(src, lengths)
        model.decoder(prev, enc_out)
    assert len(calls) == 2 * tables_per_stack  # encoder + decoder, not once per layer


def test_incremental_decoding_slices_a_cached_table(monkeypatch):
    model, d = build_model("t5")
    calls = count_distance_tables(model, monkeypatch)
    src, lengths = random_source(d)
    with torch.no_grad():
        enc_out = model.encoder(src, lengths)
        calls.clear()
        prefix = torch.full((3, 1), d.eos())
        state: dict = {}
        for _ in range(40):
            model.decoder(prefix, enc_out, incremental_state=state)
            prefix = torch.cat([prefix, torch.full((3, 1), 5)], 1)
    assert len(calls) <= 3, calls  # grown geometrically, not rebuilt at each of 40 steps


@pytest.mark.parametrize("encoding", ATTENTION_ENCODINGS)
def test_training_mode_uses_the_position_aware_path(encoding):
    """stock fairseq's fused training path would ignore the encoding: train == eval."""
    model, d = build_model(encoding)
    src, lengths = random_source(d)
    with torch.no_grad():
        eval_out = model.encoder(src, lengths)["encoder_out"][0]
        model.train()  # dropout is 0
        train_out = model.encoder(src, lengths)["encoder_out"][0]
    assert (eval_out - train_out).abs().max() < TOL


def test_diet_abs_product_once_per_forward_and_window(monkeypatch):
    """P_Q P_K^T (the only 3-D matmul of a diet_abs model: attention's are 4-D) is computed
    once per stack and forward with layer sharing, and a few times over 40 decoding steps."""
    model, d = build_model("diet_abs")
    products = []
    matmul = torch.matmul

    def counting(a, b, *args, **kwargs):
        if a.dim() == 3:  # (H, n, d_p) @ (H, d_p, n)
            products.append(a.shape)
        return matmul(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "matmul", counting)
    src, lengths = random_source(d)
    with torch.no_grad():
        enc_out = model.encoder(src, lengths)
        model.decoder(torch.full((3, 5), d.eos()), enc_out)
        assert len(products) == 2  # encoder + decoder, not once per layer
        products.clear()
        prefix = torch.full((3, 1), d.eos())
        state: dict = {}
        for _ in range(40):
            model.decoder(prefix, enc_out, incremental_state=state)
            prefix = torch.cat([prefix, torch.full((3, 1), 5)], 1)
    assert len(products) <= 3, products


@pytest.mark.parametrize("encoding,flags,first_only", [
    ("diet_rel", ["--pos-layers", "first"], True),
    ("t5_nob", [], True),  # AT5's MT setting is its default
    ("t5_nob", ["--pos-layers", "all"], False),
])
def test_pos_layers_places_the_encoding(encoding, flags, first_only):
    model, _ = build_model(encoding, flags)
    for stack in (model.encoder, model.decoder):
        terms = [layer.self_attn.encoding for layer in stack.layers]
        assert terms[0] is not None
        assert (terms[1] is None) == first_only


@pytest.mark.parametrize("encoding", ATTENTION_ENCODINGS)
def test_step_path_and_general_path_both_equal_full_forward(encoding, monkeypatch):
    """Beam search's steps (one query, no padding, no weights asked) take the attention's
    step path; the general path, which steps with padding or weights take, is checked
    against the full forward here by sending every step through it."""
    model, d = build_model(encoding)
    taken = []
    step = PositionalMultiheadAttention._decode_step

    def counted(self, *args):
        taken.append(self)
        return step(self, *args)

    monkeypatch.setattr(PositionalMultiheadAttention, "_decode_step", counted)
    assert_incremental_equals_full(model, d, steps=9)
    assert set(taken) == {layer.self_attn for layer in model.decoder.layers}

    def general(self, query, saved, *rest):
        return self.attend(query, None, None, saved, need_weights=True)[0]

    monkeypatch.setattr(PositionalMultiheadAttention, "_decode_step", general)
    assert_incremental_equals_full(model, d, steps=9)
