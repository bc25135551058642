"""An encoding per stack through the real command lines: ``fairseq-train --arch
transformer_tiny_sinusoidal --encoder-pos-encoding t5 --decoder-pos-encoding alibi`` trains,
its checkpoint records both encodings and no third (not the architecture's ``sinusoidal``),
and ``fairseq-generate`` (beam 10, in-process, as its command line runs) and
``posenc-inspect`` read it with no flag of the encodings; the same checkpoint with the record
of 37dc297 (``pos_encoding`` 'sinusoidal' beside the two) translates the same. References:
the toy corpus's sentence count (a hypothesis for every source), the checkpoint's saved
arguments and tag, fairseq-generate's output of the checkpoint as written."""

from __future__ import annotations

import json

import pytest
import torch

import tests.support.cli_utils as cu
from fairseq_posenc.plugin.checkpoint import decode_tag, load

pytestmark = [
    pytest.mark.slow,  # fairseq-train, fairseq-generate
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

NUM_TEST = 12
PAIR = ["--encoder-pos-encoding", "t5", "--decoder-pos-encoding", "alibi"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("stacks")
    cu.create_parallel_corpus(root / "raw", num_train=120, num_valid=10, num_test=NUM_TEST)
    cu.preprocess_translation_data(root / "raw", root / "bin")
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cu.train_translation_model(root / "bin", root / "pair", "transformer_tiny_sinusoidal",
                                   max_update=20, extra_flags=["--disable-validation", *PAIR])
    finally:
        torch.set_num_threads(saved)
    return root


def test_the_checkpoint_records_both_encodings_and_no_third(root):
    state = load(root / "pair" / "checkpoint_last.pt")
    model = state["cfg"]["model"]
    assert (model.pos_encoding, model.encoder_pos_encoding, model.decoder_pos_encoding) == (
        None, "t5", "alibi")
    assert decode_tag(state["model"]["_extra_state"]) == "t5/alibi"
    assert any(k.startswith("encoder.pos_encodings.0.") for k in state["model"])


def test_fairseq_generate_translates_it_with_beam_10(root):
    flags = cu.generate_flags(root / "bin", root / "pair" / "checkpoint_last.pt")
    assert flags[flags.index("--beam") + 1] == "10" and "--encoder-pos-encoding" not in flags
    output = cu.generate_main(root / "bin", root / "pair" / "checkpoint_last.pt")
    assert sorted(cu.hypotheses(output)) == list(range(NUM_TEST))


def test_the_record_37dc297_wrote_translates_the_same(root, tmp_path):
    state = load(root / "pair" / "checkpoint_last.pt")
    state["cfg"]["model"].pos_encoding = "sinusoidal"  # the architecture's, used by neither
    earlier = tmp_path / "checkpoint_last.pt"
    torch.save(state, earlier)
    output = cu.generate_main(root / "bin", earlier)
    assert cu.hypotheses(output) == cu.hypotheses(
        cu.generate_main(root / "bin", root / "pair" / "checkpoint_last.pt"))


def test_posenc_inspect_names_both(root):
    from fairseq_posenc.tools.inspection import cli

    out = root / "inspect"
    assert cli.main([str(root / "pair" / "checkpoint_last.pt"), "--out", str(out)]) == 0
    assert "--encoder-pos-encoding t5 --decoder-pos-encoding alibi" in (
        out / "index.html").read_text()
    assert json.loads(next(out.glob("*.json")).read_text())  # pictures written
