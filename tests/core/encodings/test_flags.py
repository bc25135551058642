"""The encodings' flags, generated from their specs, are the ones checkpoints and scripts
know: every option, dest, default, type, choice, metavar and help as the hand-written
definitions of commit a496576 had them (``fixtures/position_flags.json``, written by
``fixtures/make_flag_snapshot.py``), except the changes and additions listed here on
purpose (new flags, and the new encodings among ``--pos-encoding``'s choices)."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.fixtures.make_flag_snapshot import flag_table
from fairseq_posenc.core.encodings import ENCODINGS
from fairseq_posenc.core.encodings.options import Declared
from tests.support.model_utils import build_model

SNAPSHOT = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "position_flags.json"
#: dest -> (field, old, new): deliberate changes since the snapshot.
CHANGED = {
    # the old help repeated the prefix of the flag's name ("tupe: tupe_a, tupe_r: ...")
    "tupe_max_len": ("help", "tupe: tupe_a, tupe_r: ", "tupe_a, tupe_r: "),
}
#: Flags added since the snapshot (a new flag changes no old one's meaning).
ADDED = {"pos_kernels", "sandwich_dim", "fire_mlp_width", "fire_init_c", "fire_init_l",
         "fire_shared", "cope_npos", "cope_shared", "random_positions",
         "shape_max_shift", "rope_fraction", "encoder_pos_encoding",
         "decoder_pos_encoding", "path_forget_gate", "stickbreaking_attend_current",
         "stickbreaking_remainder"}
#: Values of --pos-encoding added since the snapshot (the old ones keep their meaning).
ADDED_ENCODINGS = {"kerple_log", "kerple_power", "sandwich", "fire", "cope", "shape",
                   "fox", "path", "stickbreaking"}


def test_flags_are_the_snapshot():
    old = json.loads(SNAPSHOT.read_text())["flags"]
    new = flag_table()
    assert ADDED <= {row["dest"] for row in new}
    new = [row for row in new if row["dest"] not in ADDED]
    # An encoding added since the snapshot is a new choice of --pos-encoding; the old
    # choices stay.
    assert new[0]["dest"] == old[0]["dest"] == "pos_encoding"
    assert set(new[0]["choices"]) == set(ENCODINGS)
    assert set(new[0]["choices"]) - set(old[0]["choices"]) <= ADDED_ENCODINGS
    assert set(old[0]["choices"]) <= set(new[0]["choices"])
    new[0] = {**new[0], "choices": old[0]["choices"]}
    assert [row["dest"] for row in new] == [row["dest"] for row in old]
    for before, now in zip(old, new):
        change = CHANGED.get(before["dest"])
        if change is not None:
            field, was, becomes = change
            assert before[field].startswith(was) and now[field].startswith(becomes)
            before = {**before, field: becomes + before[field][len(was):]}
        assert now == before


def test_every_encoding_declares_its_options_in_its_constructor():
    for name, cls in ENCODINGS.items():
        assert all(isinstance(option, Declared) for option in cls.options), name
        assert len({option.name for option in cls.options}) == len(cls.options), name


@pytest.mark.parametrize("option,value,message", [
    ("--diet-abs-rank", "0", "--diet-abs-rank must be a positive integer, got 0. Leave it "
                             "unset for the default."),
    ("--t5-num-buckets", "3", "--t5-num-buckets must be at least 4, got 3. T5 uses 32."),
    ("--diet-abs-lin-k", "-1", "--diet-abs-lin-k must be a positive integer, got -1. DIET "
                               "uses k = 32."),
    ("--num-segments", "0", "--num-segments must be a positive integer, got 0. Use the most "
                            "segments a source has."),
])
def test_a_bad_value_says_what_to_do(option, value, message):
    encoding = option.split("-")[2] if not option.startswith("--num") else "sinusoidal"
    encoding = {"diet": "diet_abs", "t5": "t5"}.get(encoding, encoding)
    if option.startswith("--diet-abs-lin"):
        encoding = "diet_abs_lin"
    extra = ["--segment-embedding"] if option == "--num-segments" else []
    with pytest.raises(ValueError) as error:
        build_model(encoding, [option, value, *extra])
    assert str(error.value) == message


@pytest.mark.parametrize("encoding,flags,owners", [
    ("t5", ["--sandwich-dim", "64"], "sandwich"),
    ("rope", ["--xpos-scale-base", "256"], "xpos"),
    ("tupe_a", ["--tupe-r-num-buckets", "8"], "tupe_r"),
    ("alibi", ["--fire-shared"], "fire"),
    ("sinusoidal", ["--shaw-clip", "8"], "shaw"),
])
def test_a_flag_of_another_encoding_is_an_error(encoding, flags, owners):
    """An encoding's flag given to another (with a value other than its default, the
    only way to tell once fairseq has filled the defaults) is refused before a model is
    built, naming the flag and its encodings; a flag two encodings share is each one's."""
    with pytest.raises(ValueError) as error:
        build_model(encoding, flags)
    assert str(error.value).startswith(
        f"{flags[0]} is a flag of --pos-encoding {owners}, not of --pos-encoding "
        f"{encoding}, which has no use for it: remove it")
    build_model(owners, flags)
    build_model("tupe_a", ["--tupe-max-len", "300"])  # tupe_a's and tupe_r's
