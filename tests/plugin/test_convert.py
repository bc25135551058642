"""A checkpoint converted to other position encodings (``plugin/convert.py``): what it
copies, adds and drops, what the converted checkpoint records, and the flags that build its
model again.

Sources are stock fairseq transformers (and plugin models) saved by fairseq's own trainer as
``fairseq-train`` saves them (tests/support/conversion.py), with random weights, some made
into what older fairseq wrote (arguments as ``args``, old tensor names, buffers fairseq 0.12
no longer keeps), and one under an architecture fairseq does not register. References:
the stock model's own outputs (a conversion to the encoding the checkpoint has computes
exactly the same), the source file's tensors (copied bit for bit) and its SHA-256 computed
here, the parameter names each encoding's paper gives its terms (T5's one bias table per
stack), and the model that fairseq's own parser and build make of the flags the conversion
writes out, which must load the converted weights strictly and compute the same.
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

import pytest
import torch

from fairseq_posenc.plugin import encoding_record
from fairseq_posenc.plugin.build import build_model, toy_dictionary
from fairseq_posenc.plugin.checkpoint import decode_tag, load
from fairseq_posenc.plugin.convert import convert, save
from tests.fixtures.make_record_checkpoints import outputs, write_checkpoint
from tests.support.conversion import SIZES, VARIANTS, renamed, write_stock
from tests.support.model_utils import VOCAB

#: Each stock variant's flags and encoding, and one with no input positions at all.
STOCK = {**VARIANTS, "no-positions": (["--no-token-positional-embeddings"], "none")}


def loaded(path: Path) -> torch.nn.Module:
    """The model of ``path`` as ``fairseq-generate`` loads it, in eval mode."""
    from fairseq import checkpoint_utils
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    d = toy_dictionary(VOCAB)
    [model], _ = checkpoint_utils.load_model_ensemble(
        [str(path)], task=TranslationTask(TranslationConfig(), d, d))
    return model.eval()


def assert_exactly(model: torch.nn.Module, saved: dict) -> None:
    """``model``'s outputs on ``saved``'s batch equal ``saved``'s, bit for bit, at every real
    position (padded queries' outputs are never read)."""
    got = outputs(model)
    pad = toy_dictionary(VOCAB).pad()
    src_real = saved["inputs"]["src_tokens"].ne(pad).t()
    tgt_real = saved["inputs"]["prev_output_tokens"].ne(pad)
    assert torch.equal(got["encoder_out"][src_real], saved["encoder_out"][src_real])
    assert torch.equal(got["logits"][tgt_real], saved["logits"][tgt_real])


@pytest.mark.parametrize("variant", sorted(STOCK))
def test_a_stock_checkpoint_converted_to_its_own_encoding_computes_exactly_the_same(
        tmp_path, variant):
    flags, encoding = STOCK[variant]
    stock = write_stock(tmp_path / "stock.pt", flags)
    conversion = convert(tmp_path / "stock.pt", ["--pos-encoding", encoding])
    save(conversion, tmp_path / "out.pt")
    assert_exactly(loaded(tmp_path / "out.pt"), outputs(stock))
    report = conversion.report
    assert (report.new, report.dropped) == ([], [])
    source = load(tmp_path / "stock.pt")["model"]
    written = load(tmp_path / "out.pt")["model"]
    assert sorted(e.name for e in report.copied) == sorted(source)
    assert all(torch.equal(written[name], source[name]) for name in source)
    assert decode_tag(written["_extra_state"]) == encoding


def test_the_converted_checkpoint_records_its_encodings_and_where_it_came_from(tmp_path):
    write_checkpoint("transformer", [], tmp_path / "stock.pt", updates=300, sizes=SIZES)
    conversion = convert(tmp_path / "stock.pt", ["--pos-encoding", "rope"], seed=7)
    save(conversion, tmp_path / "out.pt")
    state, source = load(tmp_path / "out.pt"), load(tmp_path / "stock.pt")
    model = state["cfg"]["model"]
    assert (model.arch, model.pos_encoding, model.encoder_pos_encoding,
            model.decoder_pos_encoding) == ("transformer_posenc", "rope", "rope", "rope")
    digest = hashlib.sha256((tmp_path / "stock.pt").read_bytes()).hexdigest()
    assert encoding_record.converted_from(model) == {
        "path": str((tmp_path / "stock.pt").resolve()), "sha256": digest,
        "model": "transformer", "architecture": "transformer", "encoding": "sinusoidal",
        "updates": 300, "seed": 7}
    # fairseq's layout: no optimizer state, no updates, the source's task and settings
    assert state.get("last_optimizer_state") is None and state["args"] is None
    assert [h["num_updates"] for h in state["optimizer_history"]] == [0]
    assert state["cfg"]["task"] == source["cfg"]["task"]
    assert state["cfg"]["common"] == source["cfg"]["common"]
    assert state["extra_state"]["train_iterator"]["epoch"] == 1
    assert encoding_record.converted_from(source["cfg"]["model"]) is None


def test_an_attention_encoding_drops_input_positions_and_adds_its_own_tables(tmp_path):
    write_stock(tmp_path / "stock.pt", VARIANTS["learned-unscaled"][0])
    report = convert(tmp_path / "stock.pt", ["--pos-encoding", "t5"]).report
    # T5 (Raffel et al. 2020, sec. 2.1): one bias table per stack, heads x buckets
    assert [(e.name, e.shape, e.kind) for e in report.new] == [
        ("encoder.pos_encodings.0.rel_bias", (2, 32), "parameter"),
        ("decoder.pos_encodings.0.rel_bias", (2, 32), "parameter")]
    assert all("fairseq-train --seed 1" in e.note for e in report.new)
    # fairseq's learned tables: max positions + padding_idx + 1 rows
    assert [(e.name, e.shape) for e in report.dropped] == [
        ("encoder.embed_positions.weight", (26, 16)), ("decoder.embed_positions.weight", (26, 16))]
    assert all("t5 turns them off (--keep-input-positions keeps them)" in e.note
               for e in report.dropped)
    kept = convert(tmp_path / "stock.pt", ["--pos-encoding", "t5", "--keep-input-positions"])
    assert kept.report.dropped == []
    assert {"encoder.embed_positions.weight", "decoder.embed_positions.weight"} <= {
        e.name for e in kept.report.copied}


def test_new_parameters_start_as_training_with_the_seed_starts_them(tmp_path):
    write_stock(tmp_path / "stock.pt")

    def tables(seed=None):
        conversion = convert(tmp_path / "stock.pt", ["--pos-encoding", "diet_rel"], seed=seed)
        return conversion.report.seed, {e.name: conversion.state["model"][e.name]
                                        for e in conversion.report.new}

    seed, first = tables()
    assert seed == 1  # the checkpoint's (fairseq-train's default)
    _, again = tables(1)
    _, other = tables(2)
    assert first and all(torch.equal(first[name], again[name]) for name in first)
    assert not any(torch.equal(first[name], other[name]) for name in first)


def test_a_stack_not_named_keeps_its_encoding(tmp_path):
    stock = write_stock(tmp_path / "stock.pt", VARIANTS["learned-unscaled"][0])
    conversion = convert(tmp_path / "stock.pt", ["--decoder-pos-encoding", "alibi"])
    assert conversion.report.encoding == "learned/alibi"
    assert [e.name for e in conversion.report.dropped] == ["decoder.embed_positions.weight"]
    assert conversion.flags[:4] == ["--encoder-pos-encoding", "learned",
                                    "--decoder-pos-encoding", "alibi"]
    save(conversion, tmp_path / "out.pt")
    model = loaded(tmp_path / "out.pt")
    # the encoder is the stock one: the same encoder outputs, bit for bit
    saved = outputs(stock)
    real = saved["inputs"]["src_tokens"].ne(toy_dictionary(VOCAB).pad()).t()
    assert torch.equal(outputs(model)["encoder_out"][real], saved["encoder_out"][real])


def test_a_plugin_checkpoint_converts_and_keeps_the_options_its_encoding_shares(tmp_path):
    write_checkpoint("transformer_tiny_t5", ["--t5-num-buckets", "8"], tmp_path / "t5.pt")
    again = convert(tmp_path / "t5.pt", ["--pos-encoding", "t5"])
    assert again.args.t5_num_buckets == 8 and again.report.new == []
    assert "--t5-num-buckets" in again.flags
    to_alibi = convert(tmp_path / "t5.pt", ["--pos-encoding", "alibi"])
    assert to_alibi.args.t5_num_buckets == 32  # an option of no encoding it has: the default
    assert [(e.name, e.note) for e in to_alibi.report.dropped] == [
        (f"{stack}.pos_encodings.0.rel_bias",
         f"the {stack}'s t5 encoding: the converted {stack} has alibi") for stack in
        ("encoder", "decoder")]
    assert to_alibi.report.source["model"] == "transformer_posenc"


def test_an_architecture_fairseq_does_not_register_converts_by_its_layout(tmp_path):
    """IndicTrans2's transformer_18_18 and NLLB's transformer_24_24 are fairseq transformers
    whose architectures fairseq 0.12 does not register."""
    stock = write_stock(tmp_path / "stock.pt", VARIANTS["pre-norm-shared"][0])
    renamed(tmp_path / "stock.pt", tmp_path / "indic.pt", "transformer_18_18")
    conversion = convert(tmp_path / "indic.pt", ["--pos-encoding", "sinusoidal"])
    assert conversion.report.source["architecture"] == "transformer_18_18"
    save(conversion, tmp_path / "out.pt")
    assert_exactly(loaded(tmp_path / "out.pt"), outputs(stock))


@pytest.mark.parametrize("variant, encoding", [
    ("post-norm", "rope"), ("pre-norm-shared", "t5"), ("learned-unscaled", "alibi"),
    ("learned-unscaled", "learned")])
def test_the_flags_written_out_build_the_converted_model(tmp_path, variant, encoding):
    write_stock(tmp_path / "stock.pt", VARIANTS[variant][0])
    conversion = convert(tmp_path / "stock.pt", ["--pos-encoding", encoding])
    save(conversion, tmp_path / "out.pt")
    # fairseq's parse of --arch transformer_posenc and the flags, and its build
    torch.manual_seed(3)
    model = build_model("transformer_posenc", conversion.flags, toy_dictionary(VOCAB)).eval()
    model.load_state_dict(load(tmp_path / "out.pt")["model"], strict=True)
    assert_exactly(model, outputs(loaded(tmp_path / "out.pt")))


def test_flags_that_follow_from_others_are_not_written(tmp_path):
    write_stock(tmp_path / "stock.pt")
    flags = convert(tmp_path / "stock.pt", ["--pos-encoding", "rope"]).flags
    # the decoder's width and FFN follow from the encoder's, the output's from the decoder's
    assert flags == ["--pos-encoding", "rope", "--dropout", "0.0", "--encoder-embed-dim", "16",
                     "--encoder-ffn-embed-dim", "24", "--encoder-layers", "2",
                     "--encoder-attention-heads", "2", "--max-source-positions", "24",
                     "--decoder-layers", "2", "--decoder-attention-heads", "2",
                     "--max-target-positions", "24"]
    # sharing every embedding shares the decoder's output too: that flag is not written
    write_stock(tmp_path / "shared.pt", VARIANTS["pre-norm-shared"][0])
    flags = convert(tmp_path / "shared.pt", ["--pos-encoding", "rope"]).flags
    assert "--share-all-embeddings" in flags and "--share-decoder-input-output-embed" not in flags


def test_the_fine_tuning_command(tmp_path):
    write_stock(tmp_path / "stock.pt")
    conversion = convert(tmp_path / "stock.pt", ["--pos-encoding", "alibi"])
    words = shlex.split(conversion.finetune_command(tmp_path / "out.pt"))
    plugin = Path(encoding_record.__file__).resolve().parents[1]
    # the data directory the checkpoint records (none here: fairseq's parse of no data)
    assert words[:4] == ["fairseq-train", "/nonexistent", "--user-dir", str(plugin)]
    assert words[4:8] == ["--task", "translation", "--arch", "transformer_posenc"]
    assert words[8:8 + len(conversion.flags)] == conversion.flags
    assert words[-2:] == ["--finetune-from-model", str(tmp_path / "out.pt")]
    recipe = words[8 + len(conversion.flags):-2]
    assert recipe[recipe.index("--lr") + 1] == "1e-4"
    assert recipe[recipe.index("--adam-betas") + 1] == "(0.9, 0.98)"


def test_a_checkpoint_of_fairseq_before_0_10_converts(tmp_path):
    """Checkpoints written before fairseq 0.10 (the WMT19 models among them) hold their
    arguments as ``args``, not ``cfg``; the converted one holds fairseq 0.12's ``cfg``."""
    stock = write_stock(tmp_path / "stock.pt", VARIANTS["pre-norm-shared"][0])
    state = load(tmp_path / "stock.pt")
    state["args"], state["cfg"] = state["cfg"]["model"], None
    torch.save(state, tmp_path / "old.pt")
    conversion = convert(tmp_path / "old.pt", ["--pos-encoding", "sinusoidal"])
    save(conversion, tmp_path / "out.pt")
    written = load(tmp_path / "out.pt")
    assert written["args"] is None
    assert written["cfg"]["task"]["_name"] == "translation"
    assert written["cfg"]["model"].arch == "transformer_posenc"
    assert_exactly(loaded(tmp_path / "out.pt"), outputs(stock))


def test_the_buffers_of_older_fairseq_are_dropped_as_fairseq_drops_them(tmp_path):
    """fairseq before 0.10 saved the sinusoidal table's ``_float_tensor`` (and older still
    its ``weights``); fairseq 0.12's module drops both on load."""
    stock = write_stock(tmp_path / "stock.pt")
    state = load(tmp_path / "stock.pt")
    for stack in ("encoder", "decoder"):
        state["model"][f"{stack}.embed_positions._float_tensor"] = torch.FloatTensor(1)
    torch.save(state, tmp_path / "old.pt")
    conversion = convert(tmp_path / "old.pt", ["--pos-encoding", "sinusoidal"])
    assert [e.name for e in conversion.report.dropped] == [
        "encoder.embed_positions._float_tensor", "decoder.embed_positions._float_tensor"]
    assert all("fairseq 0.12 drops on every load" in e.note for e in conversion.report.dropped)
    save(conversion, tmp_path / "out.pt")
    assert_exactly(loaded(tmp_path / "out.pt"), outputs(stock))


def test_old_names_are_upgraded_as_fairseq_upgrades_them_on_load(tmp_path):
    """Checkpoints of fairseq from before 2019 hold one ``in_proj_weight`` per attention
    (queries, keys and values stacked) and numbered layer norms; fairseq renames them on
    every load, and so does the conversion."""
    stock = write_stock(tmp_path / "stock.pt")
    state = load(tmp_path / "stock.pt")
    weights = state["model"]
    for prefix in [k[: -len(".q_proj.weight")] for k in list(weights)
                   if k.endswith(".q_proj.weight")]:
        for part in ("weight", "bias"):
            weights[f"{prefix}.in_proj_{part}"] = torch.cat(
                [weights.pop(f"{prefix}.{p}_proj.{part}") for p in ("q", "k", "v")])
    for layer in range(2):
        for old, new in (("0", "self_attn_layer_norm"), ("1", "final_layer_norm")):
            for part in ("weight", "bias"):
                weights[f"encoder.layers.{layer}.layer_norms.{old}.{part}"] = weights.pop(
                    f"encoder.layers.{layer}.{new}.{part}")
    torch.save(state, tmp_path / "old.pt")
    conversion = convert(tmp_path / "old.pt", ["--pos-encoding", "sinusoidal"])
    assert (conversion.report.new, conversion.report.dropped) == ([], [])
    save(conversion, tmp_path / "out.pt")
    assert_exactly(loaded(tmp_path / "out.pt"), outputs(stock))
