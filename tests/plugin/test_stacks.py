"""An encoding per stack (``--encoder-pos-encoding``, ``--decoder-pos-encoding``): what each
stack is built with, incremental decoding against the full forward, the decoder's causal
mask with ``none``, the refusals, the checkpoint's tag and its saved arguments, and
``--rope-scaling`` on a pair. References: the modules each stack holds, the same model's
full forward, a prefix's outputs with and without a later token, the stand-alone models of
each encoding (parameters)."""

from __future__ import annotations

import argparse
import copy

import pytest
import torch

from fairseq_posenc.core.encodings.alibi import Alibi
from fairseq_posenc.core.encodings.t5 import T5
from fairseq_posenc.plugin import build
from fairseq_posenc.plugin.checkpoint import decode_tag
from fairseq_posenc.plugin.position_args import configure_positions
from fairseq_posenc.plugin.translation_scaling import set_on_model_config
from fairseq_posenc.core.rope_scaling import RopeScaling
from fairseq_posenc.tools.params import counts
from tests.core.attention.test_decoding import assert_incremental_equals_full
from tests.support.batches import random_source
from tests.support.model_utils import build_model

ARCH = "transformer_tiny_sinusoidal"


def pair(encoder: str, decoder: str, *flags: str) -> list[str]:
    return ["--encoder-pos-encoding", encoder, "--decoder-pos-encoding", decoder, *flags]


def built(encoder: str, decoder: str, *flags: str):
    return build_model("sinusoidal", pair(encoder, decoder, *flags))


def layer_encodings(stack) -> list[type]:
    return [type(m) for m in getattr(stack, "pos_encodings", [])]


def test_each_stack_gets_its_encoding():
    model, _ = built("t5", "alibi")
    assert layer_encodings(model.encoder) == [T5]
    assert layer_encodings(model.decoder) == [Alibi]
    assert model.encoder.embed_positions is None and model.decoder.embed_positions is None
    assert (model.args.encoder_pos_encoding, model.args.decoder_pos_encoding) == ("t5", "alibi")


@pytest.mark.parametrize("encoder,decoder,inputs", [
    ("none", "learned", ("NoneType", "LearnedPositionalEmbedding")),
    ("learned", "none", ("LearnedPositionalEmbedding", "NoneType")),
    ("t5", "sinusoidal", ("NoneType", "SinusoidalPositionalEmbedding")),
    ("sinusoidal", "rope", ("SinusoidalPositionalEmbedding", "NoneType")),
])
def test_input_level_encodings_pair_with_anything(encoder, decoder, inputs):
    """fairseq has one flag for both stacks' input positions: each stack is built with its
    own, and rebuilding from the saved arguments gives the same stacks (a checkpoint)."""
    model, _ = built(encoder, decoder)
    assert (type(model.encoder.embed_positions).__name__,
            type(model.decoder.embed_positions).__name__) == inputs
    saved = copy.deepcopy(model.args)  # what fairseq saves, then builds again on loading
    again = build.build_from_args(saved, build.toy_dictionary(40))
    again.load_state_dict(model.state_dict(), strict=True)


@pytest.mark.parametrize("encoding", ["path", "stickbreaking"])
def test_an_encoding_of_the_decoder_only(encoding):
    """``transformer_tiny_path``: ``sinusoidal`` in the encoder, its input positions on, the
    decoder's off; ``path`` asked of the encoder is refused with the flags to use."""
    model, _ = build_model(encoding)
    assert (model.args.encoder_pos_encoding, model.args.decoder_pos_encoding) == (
        "sinusoidal", encoding)
    assert layer_encodings(model.encoder) == []
    assert len(layer_encodings(model.decoder)) == 2  # one per layer
    assert type(model.encoder.embed_positions).__name__ == "SinusoidalPositionalEmbedding"
    assert model.decoder.embed_positions is None
    with pytest.raises(ValueError, match=f"--encoder-pos-encoding {encoding} .*is defined for "
                       f"causal attention only.*--decoder-pos-encoding {encoding}"):
        built(encoding, "t5")


def test_an_unchanged_pair_is_the_one_encoding_model():
    """``--encoder-pos-encoding t5 --decoder-pos-encoding t5`` is transformer_tiny_t5."""
    one, _ = build_model("t5")
    both, _ = built("t5", "t5")
    assert list(one.state_dict()) == list(both.state_dict())
    assert decode_tag(one.state_dict()["_extra_state"]) == "t5"
    for a, b in zip(one.state_dict().values(), both.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("encoder,decoder", [
    ("t5", "alibi"), ("none", "rope"), ("learned", "t5")])
def test_incremental_decoding_equals_the_full_forward(encoder, decoder):
    assert_incremental_equals_full(*built(encoder, decoder), steps=9)


@pytest.mark.parametrize("encoder", ["t5", "rope", "sinusoidal"])
def test_a_decoder_without_positions_keeps_its_causal_mask(encoder):
    """A later target token changes no earlier output of a ``none`` decoder."""
    model, d = built(encoder, "none")
    src, lengths = random_source(d, 2)
    g = torch.Generator().manual_seed(3)
    prev = torch.randint(d.nspecial, 40, (2, 7), generator=g)
    changed = prev.clone()
    changed[:, 4:] = torch.randint(d.nspecial, 40, (2, 3), generator=g)
    assert not torch.equal(prev[:, 4:], changed[:, 4:])
    with torch.no_grad():
        enc = model.encoder(src, lengths)
        a, b = model.decoder(prev, enc)[0], model.decoder(changed, enc)[0]
    assert (a[:, :4] - b[:, :4]).abs().max() <= 1e-5
    assert (a[:, 4:] - b[:, 4:]).abs().max() > 1e-3  # the later positions do change


def test_the_checkpoint_tag_names_both_and_a_mismatch_names_both():
    model, _ = built("t5", "alibi")
    assert decode_tag(model.state_dict()["_extra_state"]) == "t5/alibi"
    other, _ = built("alibi", "t5")
    with pytest.raises(ValueError, match="--encoder-pos-encoding t5 --decoder-pos-encoding "
                                         "alibi, but the model being built uses "
                                         "--encoder-pos-encoding alibi"):
        other.load_state_dict(model.state_dict())


def refusal(*flags: str) -> str:
    with pytest.raises(ValueError) as info:
        configure_positions(build.model_args(ARCH, flags))
    return str(info.value)


def test_options_of_an_encoding_in_either_stack_apply_others_are_refused():
    args = build.model_args(ARCH, pair("alibi", "t5", "--t5-num-buckets", "8"))
    configure_positions(args)  # the decoder's encoding's option
    model = build.build_from_args(args, build.toy_dictionary(40))
    assert model.decoder.pos_encodings[0].num_buckets == 8
    message = refusal(*pair("t5", "alibi", "--shaw-clip", "4"))
    assert message.startswith("--shaw-clip is a flag of --pos-encoding shaw, not of the "
                              "stacks' encodings (t5 and alibi), neither of which")


def test_random_positions_are_checked_per_stack():
    assert refusal(*pair("t5", "none", "--random-positions", "64")) == (
        "--random-positions cannot apply to --decoder-pos-encoding none (the decoder): the "
        "model has no positions to draw.")
    assert "--max-target-positions" in refusal(
        *pair("t5", "learned", "--random-positions", "2000"))  # the decoder's table: 1024
    configure_positions(build.model_args(ARCH, pair("t5", "alibi", "--random-positions", "64")))


def test_fairseq_input_flags_against_a_stack_s_input_encoding():
    message = refusal(*pair("sinusoidal", "t5", "--encoder-learned-pos"))
    assert message.startswith("--pos-encoding sinusoidal (the encoder) conflicts with")
    configure_positions(build.model_args(ARCH, pair("t5", "learned", "--decoder-learned-pos")))


def test_rope_scaling_needs_a_rotation_in_some_stack():
    scaling = RopeScaling("linear", 4.0, None)
    cfg = build.model_args(ARCH, pair("t5", "rope"))
    set_on_model_config(scaling, cfg)
    assert cfg.rope_scaling == "linear"
    with pytest.raises(ValueError, match="this one has --encoder-pos-encoding t5 "
                                         "--decoder-pos-encoding alibi"):
        set_on_model_config(scaling, build.model_args(ARCH, pair("t5", "alibi")))
    model, _ = build_model("sinusoidal", pair("t5", "rope"),
                           config={"rope_scaling": "linear", "rope_scaling_factor": 4.0})
    assert model.decoder.pos_encodings[0].scaling == scaling
    assert_incremental_equals_full(model, build.toy_dictionary(40), steps=5)


def test_parameters_of_a_pair_are_its_stacks():
    """A pair's parameters over sinusoidal are the encoder's of its encoder's model and the
    decoder's of its decoder's (tiny: the same heads and layers in both stacks)."""
    vocab = 40
    pair_total, base = counts(ARCH, pair("t5", "learned"), vocab)
    t5, _ = counts("transformer_tiny_t5", [], vocab)
    learned, _ = counts("transformer_tiny_learned", [], vocab)
    model = build.build_model(ARCH, pair("t5", "learned"), build.toy_dictionary(vocab))
    encoder_t5 = sum(p.numel() for p in model.encoder.pos_encodings.parameters())
    decoder_learned = model.decoder.embed_positions.weight.numel()
    assert pair_total - base == encoder_t5 + decoder_learned
    assert t5 - base == 2 * encoder_t5 and learned - base == 2 * decoder_learned
    assert isinstance(build.model_args(ARCH, pair("t5", "learned")), argparse.Namespace)


def test_posenc_params_names_both_encodings(capsys):
    from fairseq_posenc.tools.params import main

    assert main(["--arch", ARCH, "--vocab", "40", *pair("t5", "learned")]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"{ARCH} (encoder t5, decoder learned)\tparameters ")
