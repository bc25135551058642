"""What ``plugin/convert.py`` refuses to convert, each in one line that says what is wrong
and what to do, before anything is written.

The checkpoints refused are real ones: models of fairseq's other families (BART, an LSTM,
the alignment transformer, a language model, each built by fairseq and saved by its
trainer), a stock transformer cut short as a killed copy leaves it, files that are no
checkpoint, and options that do not fit the checkpoint's tables (fairseq's learned table
holds ``--max-source-positions`` + 2 rows).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from fairseq_posenc.plugin.checkpoint import load
from fairseq_posenc.plugin.convert import ConversionError, check_output, convert
from tests.fixtures.make_record_checkpoints import write_checkpoint
from tests.support.conversion import VARIANTS, renamed, write_language_model, write_stock

#: Sizes of the other families' models: one layer per stack, 16 wide.
ONE_LAYER = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
             "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
             "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
             "--encoder-layers", "1", "--decoder-layers", "1"]
LSTM = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-hidden-size",
        "16", "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16"]


class NotFairseqs:
    """An object of other code, which a checkpoint must not make loading run."""


def refusal(path: Path, flags: list[str], match: str) -> str:
    with pytest.raises(ConversionError) as caught:
        convert(path, flags)
    message = str(caught.value)
    assert "\n" not in message
    assert re.search(match, message), message
    return message


@pytest.mark.parametrize("arch, sizes, model", [
    ("bart_base", ONE_LAYER, "BARTModel"), ("lstm", LSTM, "LSTMModel"),
    ("transformer_align", ONE_LAYER, "TransformerAlignModel")])
def test_another_model_of_fairseq_is_refused_by_name(tmp_path, arch, sizes, model):
    write_checkpoint(arch, [], tmp_path / "other.pt", sizes=sizes)
    refusal(tmp_path / "other.pt", ["--pos-encoding", "rope"],
            f"a checkpoint of fairseq's {model} \\(--arch {arch}\\), not of its transformer "
            "translation model; posenc-convert converts checkpoints of fairseq's transformer")


def test_a_language_model_is_refused_registered_or_not(tmp_path):
    write_language_model(tmp_path / "lm.pt")
    refusal(tmp_path / "lm.pt", ["--pos-encoding", "rope"],
            "fairseq's TransformerLanguageModel \\(--arch transformer_lm\\)")
    # under an architecture no one registers, its state dict gives it away: no encoder
    renamed(tmp_path / "lm.pt", tmp_path / "lm_other.pt", "my_lm")
    refusal(tmp_path / "lm_other.pt", ["--pos-encoding", "rope"],
            "is no transformer translation model: it has no an? encoder token embedding "
            r"\(encoder.embed_tokens.weight; --arch my_lm\)")


def test_a_missing_file_a_directory_and_a_damaged_file_are_refused(tmp_path):
    refusal(tmp_path / "none.pt", ["--pos-encoding", "rope"], "none.pt: no such file")
    refusal(tmp_path, ["--pos-encoding", "rope"], "is not a file; give a checkpoint file")
    write_stock(tmp_path / "stock.pt")
    whole = (tmp_path / "stock.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(whole[: len(whole) // 2])  # a copy killed half way
    refusal(tmp_path / "cut.pt", ["--pos-encoding", "rope"],
            "cut.pt is damaged: torch cannot read it .*copy it again")
    (tmp_path / "text.pt").write_text("not a checkpoint\n")
    refusal(tmp_path / "text.pt", ["--pos-encoding", "rope"],
            "text.pt is not a checkpoint: torch.save writes a zip archive")


def test_a_file_that_would_run_code_or_holds_no_model_is_refused(tmp_path):
    torch.save({"model": {}, "extra": NotFairseqs()}, tmp_path / "code.pt")
    refusal(tmp_path / "code.pt", ["--pos-encoding", "rope"],
            "holds tests.plugin.test_convert_refusals.NotFairseqs, which loading with "
            "weights_only refuses")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "tensors.pt")
    refusal(tmp_path / "tensors.pt", ["--pos-encoding", "rope"],
            "is not a fairseq checkpoint: it holds no model state")
    torch.save({"model": {"encoder.x": torch.zeros(2)}}, tmp_path / "no_args.pt")
    refusal(tmp_path / "no_args.pt", ["--pos-encoding", "rope"],
            "holds no model arguments \\(neither 'args' nor 'cfg.model'\\)")


def test_arguments_that_disagree_with_the_weights_are_refused(tmp_path):
    write_stock(tmp_path / "stock.pt")
    state = load(tmp_path / "stock.pt")
    state["cfg"]["model"].encoder_learned_pos = True
    torch.save(state, tmp_path / "wrong.pt")
    refusal(tmp_path / "wrong.pt", ["--pos-encoding", "rope"],
            "the encoder has a learned table of positions, but its state dict lacks "
            "encoder.embed_positions.weight")


def test_weights_beyond_or_short_of_a_transformer_are_refused(tmp_path):
    """NLLB's mixture of experts holds its experts beside its layers: no tensor may be
    dropped, or start afresh, but those of positions."""
    write_stock(tmp_path / "stock.pt")
    state = load(tmp_path / "stock.pt")
    state["model"]["encoder.layers.1.moe_layer.experts.0.fc1.weight"] = torch.zeros(24, 16)
    torch.save(state, tmp_path / "moe.pt")
    refusal(tmp_path / "moe.pt", ["--pos-encoding", "rope"],
            "holds encoder.layers.1.moe_layer.experts.0.fc1.weight, which a transformer of its "
            "arguments has no place for \\(1 such tensors\\): it is no plain transformer")
    state = load(tmp_path / "stock.pt")
    del state["model"]["decoder.layers.1.fc1.weight"]
    torch.save(state, tmp_path / "short.pt")
    refusal(tmp_path / "short.pt", ["--pos-encoding", "rope"],
            "lacks decoder.layers.1.fc1.weight, which a transformer of its arguments has")


def test_a_learned_table_cannot_change_its_length(tmp_path):
    write_stock(tmp_path / "stock.pt", VARIANTS["learned-unscaled"][0])
    refusal(tmp_path / "stock.pt", ["--pos-encoding", "learned", "--max-source-positions", "48"],
            "learned encoder positions are a table of 24 \\(encoder.embed_positions.weight\\), "
            "but the converted model's --max-source-positions 48 asks for 48: .*keep "
            "--max-source-positions 24")
    # with the table dropped, the length is the user's to choose
    longer = convert(tmp_path / "stock.pt", ["--pos-encoding", "rope",
                                             "--max-source-positions", "48"])
    assert longer.args.max_source_positions == 48


def test_an_absolute_table_shorter_than_the_models_sequences_is_refused(tmp_path):
    write_stock(tmp_path / "stock.pt")
    refusal(tmp_path / "stock.pt", ["--pos-encoding", "diet_abs", "--diet-abs-max-len", "8"],
            "--diet-abs-max-len 8 is shorter than the converted model's --max-source-positions "
            "24 \\(the checkpoint's\\): .*give --diet-abs-max-len 24 or more, or leave it unset")
    convert(tmp_path / "stock.pt", ["--pos-encoding", "diet_abs"])  # its default: 24


def test_an_option_that_changes_a_copied_tensor_is_refused(tmp_path):
    write_checkpoint("transformer_tiny_t5", [], tmp_path / "t5.pt")
    refusal(tmp_path / "t5.pt", ["--pos-encoding", "t5", "--t5-num-buckets", "16"],
            r"encoder.pos_encodings.0.rel_bias is \[4, 32\] in .* but \[4, 16\] in the "
            "converted model: an option of t5 differs from the checkpoint's")


@pytest.mark.parametrize("flags, match", [
    ([], "name the encoding to convert to: --pos-encoding NAME"),
    (["--pos-encoding", "foo"], "argument --pos-encoding: invalid choice: 'foo'.*'rope'"),
    (["--pos-encoding", "rope", "--lr", "1"], "unrecognized arguments: --lr 1; posenc-convert "
                                              "takes fairseq-train's position flags"),
    (["--pos-encoding", "rope", "--t5-num-buckets", "8"],
     "--t5-num-buckets is a flag of --pos-encoding t5, not of --pos-encoding rope"),
    (["--pos-encoding", "shaw", "--shaw-clip", "0"], "--shaw-clip must be a positive integer"),
    (["--pos-encoding", "rope", "--max-target-positions", "0"],
     "--max-target-positions must be a positive integer"),
])
def test_flags_that_make_no_model_are_refused(tmp_path, flags, match):
    write_stock(tmp_path / "stock.pt")
    refusal(tmp_path / "stock.pt", flags, match)


def test_keeping_input_positions_that_are_not_there_is_refused(tmp_path):
    write_stock(tmp_path / "stock.pt", ["--no-token-positional-embeddings"])
    refusal(tmp_path / "stock.pt", ["--pos-encoding", "rope", "--keep-input-positions"],
            "--keep-input-positions: .*stock.pt's encoder has no input positions to keep; "
            "drop the flag")


def test_an_output_that_exists_or_is_the_input_is_refused(tmp_path):
    write_stock(tmp_path / "stock.pt")
    (tmp_path / "out.pt").write_text("kept")
    with pytest.raises(ConversionError, match="out.pt exists: give another path, or --force"):
        check_output(tmp_path / "stock.pt", tmp_path / "out.pt")
    check_output(tmp_path / "stock.pt", tmp_path / "out.pt", force=True)
    with pytest.raises(ConversionError, match="is the checkpoint to convert"):
        check_output(tmp_path / "stock.pt", tmp_path / "stock.pt", force=True)
    with pytest.raises(ConversionError, match="is a directory: give the converted"):
        check_output(tmp_path / "stock.pt", tmp_path, force=True)
    assert (tmp_path / "out.pt").read_text() == "kept"
