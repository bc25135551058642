"""Bad input gets a clear error that says what to do."""

from __future__ import annotations

import pytest
import torch

from fairseq_posenc.core.encodings import get_encoding
from tests.support.model_utils import build_model


def test_unknown_encoding_names_the_choices():
    with pytest.raises(ValueError, match="unknown --pos-encoding 'foo'.*diet_rel.*t5"):
        get_encoding("foo")


@pytest.mark.parametrize("flag,value,message", [
    ("--shaw-clip", "0", "--shaw-clip must be a positive integer"),
    ("--shaw-clip", "-3", "--shaw-clip must be a positive integer"),
])
def test_non_positive_clip_distance(flag, value, message):
    with pytest.raises(ValueError, match=message):
        build_model("shaw", [flag, value])


def test_t5_bucket_arguments_are_checked():
    with pytest.raises(ValueError, match="--t5-num-buckets must be"):
        build_model("t5", ["--t5-num-buckets", "0"])


def test_source_longer_than_learned_positions():
    model, d = build_model("learned", ["--max-source-positions", "8", "--max-target-positions", "8"])
    src = torch.randint(d.nspecial, 30, (1, 12))
    with pytest.raises(ValueError, match="has 12 tokens, but --pos-encoding learned has "
                                         r"positions for only 8 \(--max-source-positions\)"):
        model.encoder(src, torch.tensor([12]))
    # padding does not count: 8 real tokens in a row of 12 are fine
    src[0, :4] = d.pad()
    model.encoder(src, torch.tensor([8]))


def test_target_longer_than_learned_positions():
    model, d = build_model("learned", ["--max-source-positions", "8", "--max-target-positions", "8"])
    src = torch.randint(d.nspecial, 30, (1, 5))
    enc = model.encoder(src, torch.tensor([5]))
    with pytest.raises(ValueError, match="target sequence has 9 tokens.*--max-target-positions"):
        model.decoder(torch.randint(d.nspecial, 30, (1, 9)), enc)


def test_checkpoint_from_another_encoding():
    t5, _ = build_model("t5")
    diet, _ = build_model("diet_rel")
    with pytest.raises(ValueError, match="trained with --pos-encoding t5, but the model "
                                         "being built uses --pos-encoding diet_rel"):
        diet.load_state_dict(t5.state_dict())
    # input encodings have no parameters to tell them apart: the tag still does
    sinusoidal, _ = build_model("sinusoidal")
    none, _ = build_model("none")
    state = sinusoidal.state_dict()
    state.pop("encoder.embed_positions._float_tensor", None)
    state.pop("decoder.embed_positions._float_tensor", None)
    with pytest.raises(ValueError, match="trained with --pos-encoding sinusoidal"):
        none.load_state_dict(state)


def test_checkpoint_of_another_model():
    model, _ = build_model("t5")
    state = model.state_dict()
    del state["_extra_state"]
    with pytest.raises(ValueError, match="not written by fairseq-posenc"):
        model.load_state_dict(state)


def test_state_dict_round_trip():
    model, _ = build_model("shaw")
    other, _ = build_model("shaw")
    other.load_state_dict(model.state_dict())
    for (name, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert torch.equal(a, b), name


def test_architecture_and_flag_disagree():
    with pytest.raises(ValueError, match="--arch transformer_tiny_t5 is the t5 model but "
                                         "--pos-encoding shaw was given"):
        build_model("t5", ["--pos-encoding", "shaw"])


def test_input_flags_conflicting_with_encoding():
    with pytest.raises(ValueError, match="choose the input encoding with --pos-encoding"):
        build_model("sinusoidal", ["--encoder-learned-pos"])


@pytest.mark.parametrize("encoding", ["diet_abs", "diet_abs_lin"])
def test_source_longer_than_diet_abs_table(encoding):
    flag = f"--{encoding.replace('_', '-')}-max-len"
    model, d = build_model(encoding, [flag, "6"])
    src = torch.randint(d.nspecial, 30, (1, 9))
    with pytest.raises(ValueError, match=f"has 9 tokens, but --pos-encoding {encoding} has "
                                         rf"positions for only 6 \({flag}\)"):
        model.encoder(src, torch.tensor([9]))


@pytest.mark.parametrize("flag", ["--diet-abs-rank", "--diet-abs-lin-rank", "--diet-abs-lin-k"])
def test_non_positive_diet_abs_rank(flag):
    encoding = "diet_abs_lin" if "lin" in flag else "diet_abs"
    with pytest.raises(ValueError, match=f"{flag} must be a positive integer"):
        build_model(encoding, [flag, "0"])
