"""A checkpoint's record of its position encodings (``plugin/encoding_record.py``): what a
checkpoint written now holds, and that checkpoints of the earlier records load and
translate as they did.

Checkpoints are written by fairseq's own ``Trainer.save_checkpoint``, as ``fairseq-train``
saves them (``tests/fixtures/make_record_checkpoints.py``), and read back as
``fairseq-generate`` reads them (``checkpoint_utils.load_model_ensemble``). References: the
encoding tag that the weights carry (the stacks the model built, not the record), the
outputs of the model that wrote the file, and for the earlier records files written by the
code of their commits with that code's outputs on a fixed batch
(``tests/fixtures/records/``; a pair as 37dc297 wrote it, with ``pos_encoding`` beside the
stacks' two). A converted checkpoint's record of its source: tests/plugin/test_convert.py;
here, that the record takes every key it names or none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fairseq_posenc.core.rope_scaling import RopeScaling
from fairseq_posenc.plugin.build import toy_dictionary
from fairseq_posenc.plugin.checkpoint import decode_tag, load
from fairseq_posenc.plugin.translation_scaling import set_on_model_config
from tests.fixtures.make_record_checkpoints import WRITTEN, outputs, write_checkpoint
from tests.support.model_utils import VOCAB, assert_same_outputs

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"
ENTRIES = ("pos_encoding", "encoder_pos_encoding", "decoder_pos_encoding")


def loaded(path: Path) -> torch.nn.Module:
    """The model of ``path`` as ``fairseq-generate`` loads it, in eval mode."""
    from fairseq import checkpoint_utils
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    d = toy_dictionary(VOCAB)
    task = TranslationTask(TranslationConfig(), d, d)
    [model], _ = checkpoint_utils.load_model_ensemble([str(path)], task=task)
    return model.eval()


def recorded(path: Path) -> tuple:
    model = load(path)["cfg"]["model"]
    return tuple(getattr(model, entry, "absent") for entry in ENTRIES)


@pytest.mark.parametrize("arch, flags, record", [
    ("transformer_tiny_sinusoidal", ["--encoder-pos-encoding", "t5",
                                     "--decoder-pos-encoding", "alibi"], (None, "t5", "alibi")),
    ("transformer_posenc_tiny", ["--encoder-pos-encoding", "rope"],
     (None, "rope", "sinusoidal")),
    ("transformer_tiny_t5", [], ("t5", "t5", "t5")),
    ("transformer_posenc_tiny", [], ("sinusoidal", "sinusoidal", "sinusoidal")),
    # both stacks other than the architecture's encoding: loads as what it is
    ("transformer_tiny_t5", ["--encoder-pos-encoding", "alibi", "--decoder-pos-encoding",
                             "alibi"], ("alibi", "alibi", "alibi")),
])
def test_a_checkpoint_records_each_stack_and_a_shared_encoding_only_where_one_is(
        tmp_path, arch, flags, record):
    path = tmp_path / "checkpoint_last.pt"
    model = write_checkpoint(arch, flags, path)
    encoder, decoder = record[1:]
    tag = encoder if encoder == decoder else f"{encoder}/{decoder}"
    assert decode_tag(load(path)["model"]["_extra_state"]) == tag
    assert recorded(path) == record
    # read back as fairseq-generate reads it: the same model, whose tag is the weights'
    again = loaded(path)
    assert decode_tag(again.get_extra_state()) == tag
    assert_same_outputs(again, outputs(model))


@pytest.mark.parametrize("name, record, tag", [
    ("t5_alone", ("t5", "absent", "absent"), "t5"),
    ("pair_three_entries", ("sinusoidal", "t5", "alibi"), "t5/alibi"),
])
def test_a_checkpoint_of_an_earlier_record_translates_as_it_did(name, record, tag):
    from fairseq_posenc.tools.inspection.load import load_model

    path = RECORDS / f"{name}.pt"
    saved = torch.load(RECORDS / f"{name}.outputs.pt", weights_only=True)
    assert (saved["arch"], saved["flags"]) == WRITTEN[name]
    assert recorded(path) == record
    model = loaded(path)
    assert decode_tag(model.get_extra_state()) == tag
    assert_same_outputs(model, saved)
    assert load_model(path).encoding == tag  # posenc-inspect reads it too
    # --rope-scaling's check reads the stacks' encodings: neither rotates here
    cfg = load(path)["cfg"]["model"]
    encoder, _, decoder = tag.partition("/")
    trained = (f"--encoder-pos-encoding {encoder} --decoder-pos-encoding {decoder}" if decoder
               else f"--pos-encoding {encoder}")
    with pytest.raises(ValueError, match=f"this one has {trained}; drop"):
        set_on_model_config(RopeScaling("linear", 2.0), cfg)


def test_every_record_file_is_tested():
    assert sorted(p.name for p in RECORDS.iterdir()) == sorted(
        f"{name}{suffix}" for name in WRITTEN for suffix in (".pt", ".outputs.pt"))


def test_a_record_of_a_conversion_holds_every_key_it_names():
    from argparse import Namespace

    from fairseq_posenc.plugin import encoding_record

    args = Namespace()
    with pytest.raises(ValueError, match="a conversion's record holds path, sha256, model, "
                                         "architecture, encoding, updates, seed, not path"):
        encoding_record.write_conversion(args, {"path": "in.pt"})
    assert encoding_record.converted_from(args) is None
