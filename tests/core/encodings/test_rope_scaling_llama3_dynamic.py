"""``--rope-scaling llama3`` and ``dynamic`` (``fairseq_posenc/core/rope_scaling.py``)
against Hugging Face transformers' documented formulas written out in float64 pair by
pair: Llama 3.1's wavelength bands ``lambda > L / l`` (``theta / s``), ``lambda < L / h``
(``theta``) and the smooth mix between; dynamic NTK's base ``b (s n / L - (s - 1))^(d /
(d - 2))`` for ``n > L``, RoPE's for ``n <= L``. Then the length bound per sentence that the
plugin gives dynamic NTK (the encoder's real tokens, the generator's bound for the decoder)
and the flags' checks."""

from __future__ import annotations

import argparse
import math

import pytest
import torch

from fairseq_posenc.core.encodings.rope import Rope
from fairseq_posenc.core.rope_scaling import RopeScaling
from fairseq_posenc.plugin.extrapolation import (TranslationExtrapolationConfig,
                                                 TranslationExtrapolationTask)
from fairseq_posenc.plugin.rope_lengths import DecodeBound, decoder_lengths
from tests.support.batches import random_source
from tests.support.model_utils import MODEL_TOL, build_model, dictionary


def llama3(low=None, high=None) -> dict:
    """Llama 3's options as :class:`RopeScaling` takes them (None: not given)."""
    return {"rope_scaling_low_freq_factor": low, "rope_scaling_high_freq_factor": high}


def hf_llama3(d: int, base: float, s: float, length: int, low: float = 1.0,
              high: float = 4.0) -> list[float]:
    """``_compute_llama3_parameters`` as documented, one pair at a time."""
    out = []
    for i in range(d // 2):
        theta = base ** (-2 * i / d)
        wavelen = 2 * math.pi / theta
        if wavelen > length / low:
            out.append(theta / s)
        elif wavelen < length / high:
            out.append(theta)
        else:
            smooth = (length / wavelen - low) / (high - low)
            out.append((1 - smooth) * theta / s + smooth * theta)
    return out


def hf_dynamic(d: int, base: float, s: float, length: int, n: int) -> list[float]:
    """``_compute_dynamic_ntk_parameters`` for a sequence of length ``n``."""
    if n > length:
        base = base * ((s * n / length) - (s - 1)) ** (d / (d - 2))
    return [base ** (-2 * i / d) for i in range(d // 2)]


@pytest.mark.parametrize("d,s,length,low,high", [
    (64, 4.0, 512, 1.0, 4.0), (32, 8.0, 8192, 1.0, 4.0), (16, 2.0, 100, 0.5, 8.0),
    (128, 4.0, 2048, 2.0, 3.0)])
def test_llama3_frequencies_pair_by_pair(d, s, length, low, high):
    scaling = RopeScaling("llama3", s, length, llama3(low, high))
    got = scaling.frequencies(d, 10000.0).tolist()
    want = hf_llama3(d, 10000.0, s, length, low, high)
    assert max(abs(g - w) / w for g, w in zip(got, want)) < 1e-14
    theta = [10000.0 ** (-2 * i / d) for i in range(d // 2)]
    kept = [i for i in range(d // 2) if want[i] == theta[i]]
    divided = [i for i in range(d // 2) if want[i] == theta[i] / s]
    assert kept and divided and scaling.logit_scale == 1.0


@pytest.mark.parametrize("band", ["low", "high"])
def test_llama3_band_boundaries(band):
    """A training length that puts pair 3's wavelength exactly on a band's edge: ``L / l``
    interpolates it fully (``theta / s``), ``L / h`` keeps it (the mix is continuous)."""
    d, s, low, high = 16, 4.0, 1.0, 4.0
    theta = 10000.0 ** (-6 / d)
    wavelen = 2 * math.pi / theta
    length = wavelen * (low if band == "low" else high)
    got = float(RopeScaling("llama3", s, round(length)).frequencies(d, 10000.0)[3])
    want = hf_llama3(d, 10000.0, s, round(length))[3]
    assert got == pytest.approx(want, rel=1e-14)
    edge = theta / s if band == "low" else theta
    assert got == pytest.approx(edge, rel=0.02)  # round(L) moves it by under 1 token


@pytest.mark.parametrize("d,s,length", [(64, 4.0, 512), (32, 2.0, 8), (12, 8.0, 30)])
def test_dynamic_frequencies_per_length_bound(d, s, length):
    scaling = RopeScaling("dynamic", s, length)
    ns = [1, length - 1, length, length + 1, 3 * length, 17 * length]
    got = scaling.dynamic_frequencies(d, 10000.0, torch.tensor(ns))
    for row, n in zip(got.tolist(), ns):
        want = hf_dynamic(d, 10000.0, s, length, n)
        assert max(abs(g - w) / w for g, w in zip(row, want)) < 1e-13, n
    plain = Rope(head_dim=d).theta
    assert torch.equal(scaling.frequencies(d, 10000.0), plain)
    assert torch.allclose(got[:3], plain.expand(3, -1), rtol=1e-15, atol=0)  # n <= L


DYNAMIC = {"rope_scaling": "dynamic", "rope_scaling_factor": 4.0,
           "rope_scaling_original_len": 5}


@pytest.mark.parametrize("encoding", ["rope", "xpos"])
def test_dynamic_encoder_reads_each_sentences_own_length(encoding):
    """Sentences of 4 and 7 real tokens, L = 5: each encoded alone and left-padded beside
    the other gives the same output (per sentence, not per batch); the 4-token one is the
    unscaled model's, the 7-token one is not."""
    model, d = build_model(encoding, config=DYNAMIC)
    plain, _ = build_model(encoding)
    src, _ = random_source(d, bsz=2, length=7)
    src[0, :3] = d.pad()
    src[1, :] = src[1].clamp(min=d.nspecial)
    src[1, -1] = d.eos()
    lengths = src.ne(d.pad()).sum(1)
    with torch.no_grad():
        batch = model.encoder(src, lengths)["encoder_out"][0]
        alone = [model.encoder(src[b:b + 1, -n:], lengths[b:b + 1])["encoder_out"][0]
                 for b, n in ((0, 4), (1, 7))]
        unscaled = [plain.encoder(src[b:b + 1, -n:], lengths[b:b + 1])["encoder_out"][0]
                    for b, n in ((0, 4), (1, 7))]
    assert (batch[3:, 0] - alone[0][:, 0]).abs().max() < MODEL_TOL
    assert (batch[:, 1] - alone[1][:, 0]).abs().max() < MODEL_TOL
    assert (alone[0] - unscaled[0]).abs().max() < MODEL_TOL
    assert (alone[1] - unscaled[1]).abs().max() > 1e-3


def test_the_decoders_bound_is_the_generators_per_sentence():
    """min(int(a n_src + b), max_len - 1) + 1 (the leading </s> and max_len tokens)."""
    decoder = argparse.Namespace(args=argparse.Namespace(rope_scaling="dynamic"),
                                 max_positions=lambda: 64)
    n_src = [3, 8, 20, 40]
    encoder_out = {"src_lengths": [torch.tensor(n_src).reshape(-1, 1)]}
    for bound, want in (
            (DecodeBound(), [min(200, 63) + 1] * 4),
            (DecodeBound(1.0, -1), [n for n in n_src]),
            (DecodeBound(1.5, 2, max_len=40), [min(int(1.5 * n + 2), 39) + 1 for n in n_src]),
            (DecodeBound(match_source_len=True), [n + 1 for n in n_src])):
        decoder.rope_decode_bound = bound
        assert decoder_lengths(decoder, encoder_out).tolist() == want, bound
    decoder.args.rope_scaling = "yarn"
    assert decoder_lengths(decoder, encoder_out) is None


def test_the_task_gives_the_generators_settings_to_the_decoder():
    d = dictionary()
    task = TranslationExtrapolationTask(TranslationExtrapolationConfig(
        data="/nonexistent", rope_scaling="dynamic", rope_scaling_factor=4.0,
        rope_scaling_original_len=5), d, d)
    model, _ = build_model("rope", config=DYNAMIC)
    task.build_generator([model], argparse.Namespace(beam=2, max_len_a=1.5, max_len_b=3))
    assert model.decoder.rope_decode_bound == DecodeBound(1.5, 3, 1024, False)


@pytest.mark.parametrize("args,message", [
    (("yarn", 2.0, 8, llama3(1.0)), "--rope-scaling-low-freq-factor are read by "
                                    "--rope-scaling llama3 only"),
    (("dynamic", 2.0, 8, llama3(None, 4.0)), "--rope-scaling-high-freq-factor are read by"),
    (("llama3", 2.0, 8, llama3(4.0, 4.0)), "needs 0 < --rope-scaling-low-freq-factor < "
                                           "--rope-scaling-high-freq-factor .* got 4.0 and 4.0"),
    (("llama3", 2.0, 8, llama3(0.0)), "got 0.0 and 4.0"),
    (("dynamic", 2.0, 0), "--rope-scaling-original-len must be a positive number"),
])
def test_bad_values_name_the_flags(args, message):
    with pytest.raises(ValueError, match=message):
        RopeScaling(*args)


@pytest.mark.parametrize("kind", ["llama3", "dynamic"])
def test_the_training_length_is_needed(kind):
    with pytest.raises(ValueError, match=f"--rope-scaling {kind} needs the training length"):
        RopeScaling(kind, 2.0).frequencies(8, 10000.0)


@pytest.mark.parametrize("fields,message", [
    ({"rope_scaling": "ntk", "rope_scaling_factor": 2.0, "rope_scaling_low_freq_factor": 1.0},
     "--rope-scaling-low-freq-factor are read by --rope-scaling llama3 only"),
    ({"rope_scaling_high_freq_factor": 4.0}, "--rope-scaling-high-freq-factor go with"),
])
def test_the_task_refuses_llama3_factors_elsewhere_before_reading_anything(fields, message):
    with pytest.raises(ValueError, match=message):
        TranslationExtrapolationTask.setup_task(
            TranslationExtrapolationConfig(data="/nonexistent", **fields))
