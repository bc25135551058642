"""``posenc-inspect`` on checkpoints that ``fairseq-train`` wrote: a sentence's attention
maps, BPE codes, the console script, errors; and a model trained on data made by
``posenc-prepare-corpus`` (``DEST/bin``, ``DEST/bpe``), whose sentence tokens must be the
very tokens that tool wrote for the same raw sentence. Each training runs once (module-scoped
fixtures) and is read by several tests. The per-encoding reports:
``test_inspect_reports.py``.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch
from fairseq import options
from fairseq.tasks.translation import TranslationTask

from fairseq_posenc.tools import corpus
from fairseq_posenc.tools.inspection import cli
from fairseq_posenc.tools.inspection.load import load_model
from fairseq_posenc.tools.textprep.text import JOINER
from tests.fixtures.make_legacy_checkpoints import FLAGS
from tests.support.cli_utils import (
    create_parallel_corpus,
    preprocess_translation_data,
    read_lines,
    run_script,
    train_translation_model,
    write_lines,
)
from tests.support.inspection import layer_values, read_pictures, tiny_checkpoint
from tests.support.model_utils import dictionary

pytestmark = pytest.mark.slow  # fairseq-train, posenc-prepare-corpus, the console script


# -- a checkpoint from fairseq-train: sentences, the console script, errors ------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model trained by fairseq-train in this process. Its checkpoint_last.pt is read:
    fairseq writes checkpoint_best.pt only for a validation loss better than any earlier
    training in the process has seen (it keeps the best on the function)."""
    root = tmp_path_factory.mktemp("trained")
    create_parallel_corpus(root / "raw", num_train=40, num_valid=8, num_test=8)
    preprocess_translation_data(root / "raw", root / "bin")
    train_translation_model(root / "bin", root / "ckpt", "transformer_tiny_t5",
                            max_update=2, extra_flags=FLAGS)
    return root


def test_sentence_attention_maps(trained, tmp_path):
    """Per layer and head the probabilities over the sentence's tokens; layer 1's equal
    the first encoder layer's own attention on the embedded sentence."""
    out = tmp_path / "out"
    cli.main([str(trained / "ckpt" / "checkpoint_last.pt"), "--out", str(out),
              "--data", str(trained / "bin"), "--sentence", "s1 s2 s3"])
    picture = read_pictures(out)["encoder-attention"]
    assert picture["row_labels"] == ["s1", "s2", "s3", "</s>"]
    assert len(picture["panels"]) == 2 * 4
    loaded = load_model(trained / "ckpt" / "checkpoint_last.pt", trained / "bin")
    encoder = loaded.model.encoder
    tokens = loaded.source_dictionary.encode_line("s1 s2 s3", add_if_not_exist=False)[None]
    with torch.no_grad(), encoder.pos_scope.open():
        x = encoder.forward_embedding(tokens.long())[0].transpose(0, 1)
        _, weights = encoder.layers[0].self_attn(x, x, x, need_head_weights=True)
    torch.testing.assert_close(layer_values(picture, 0), weights[:, 0].double(),
                               rtol=0, atol=1e-6)


def test_path_logits_on_a_sentence(trained, tmp_path):
    """PaTH (``transformer_tiny_path``, trained as the fixture's model): per decoder layer
    and head, the softmax of the picture's PaTH logits is the layer's own attention on the
    sentence read as the decoder's input (``</s> s1 s2 s3``); the report notes that PaTH
    has no content-free picture."""
    root = tmp_path / "path"
    train_translation_model(trained / "bin", root / "ckpt", "transformer_tiny_path",
                            max_update=2, extra_flags=FLAGS)
    checkpoint, out = root / "ckpt" / "checkpoint_last.pt", tmp_path / "out"
    assert cli.main([str(checkpoint), "--out", str(out), "--data", str(trained / "bin"),
                     "--sentence", "s1 s2 s3"]) == 0
    picture = read_pictures(out)["decoder-path-logits"]
    assert picture["row_labels"] == ["</s>", "s1", "s2", "s3"]
    assert "reads its transforms from the tokens" in (out / "index.html").read_text()
    model = load_model(checkpoint, trained / "bin").model
    target = model.decoder.dictionary
    prev = torch.tensor([[target.eos()] + [target.index(t) for t in ("s1", "s2", "s3")]])
    source = torch.tensor([[target.index(t) for t in ("s1", "s2", "s3")] + [target.eos()]])
    captured = {}
    layers = model.decoder.layers

    def keep(index):
        def hook(module, args, kwargs):
            captured[index] = kwargs["query"]
        return hook

    hooks = [layer.self_attn.register_forward_pre_hook(keep(i), with_kwargs=True)
             for i, layer in enumerate(layers)]
    with torch.no_grad():
        model.decoder(prev, encoder_out=model.encoder(source, torch.tensor([4])))
    for hook in hooks:
        hook.remove()
    future = torch.full((4, 4), float("-inf")).triu(1)
    for index, layer in enumerate(layers):
        x = captured[index]
        with torch.no_grad(), model.decoder.pos_scope.open():
            _, weights = layer.self_attn(x, x, x, attn_mask=future, need_head_weights=True)
        panels = [p for p in picture["panels"] if p["layers"] == [index]]
        assert len(panels) == 2 * layer.self_attn.num_heads  # PaTH, then q.k, per head
        for head in range(layer.self_attn.num_heads):
            logits = torch.tensor(panels[2 * head]["values"]) + future
            torch.testing.assert_close(torch.softmax(logits, dim=-1), weights[head, 0],
                                       rtol=0, atol=1e-5)


def test_bpe_codes_are_applied(trained, tmp_path):
    codes = tmp_path / "codes"
    codes.write_text("#version: 0.2\ns 1</w>\n", encoding="utf-8")
    out = tmp_path / "out"
    cli.main([str(trained / "ckpt" / "checkpoint_last.pt"), "--out", str(out),
              "--data", str(trained / "bin"), "--sentence", "s1 s12", "--bpe-codes", str(codes)])
    assert read_pictures(out)["encoder-attention"]["row_labels"] == [
        "s1", "s@@", "1@@", "2", "</s>"]


def test_console_script(trained, tmp_path):
    result = run_script("posenc-inspect", [
        trained / "ckpt" / "checkpoint_last.pt", "--out", tmp_path / "out", "--data",
        trained / "bin", "--sentence", "s3 s4", "--max-distance", "8"])
    assert result.returncode == 0, result.stderr[-2000:]
    html = (tmp_path / "out" / "index.html").read_text()
    for png in ("encoder-t5-bias.png", "decoder-t5-bias.png", "encoder-attention.png"):
        assert f"src='{png}'" in html
    assert read_pictures(tmp_path / "out")["encoder-t5-bias"]["x"] == list(range(-8, 9))


def stock_checkpoint(path: Path) -> None:
    """A checkpoint of fairseq's own ``transformer``: not a fairseq-posenc model."""
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "/nonexistent", "--task", "translation", "--arch", "transformer", *FLAGS,
        "--encoder-layers", "1", "--decoder-layers", "1"])
    d = dictionary()
    model = TranslationTask(args, d, d).build_model(copy.deepcopy(args))
    torch.save({"args": None, "cfg": {"model": args}, "model": model.state_dict()}, path)


@pytest.mark.parametrize("problem, message", [
    ("missing", "no checkpoint file"),
    ("garbage", "not a fairseq checkpoint"),
    ("stock", "not a fairseq-posenc"),
    ("sentence without data", "pass --data DIR"),
    ("data without dictionary", "dict.src.txt"),
    ("two preparations", "--tokenized and --bpe-codes are two ways to prepare the sentence"),
    ("vocabulary without codes", "--bpe-vocab goes with --bpe-codes"),
])
def test_bad_input_is_a_clear_error(trained, tmp_path, problem, message):
    checkpoint = trained / "ckpt" / "checkpoint_last.pt"
    extra: list[str] = []
    if problem == "missing":
        checkpoint = tmp_path / "nothing.pt"
    elif problem == "garbage":
        checkpoint = tmp_path / "notes.pt"
        checkpoint.write_text("not a checkpoint")
    elif problem == "stock":
        checkpoint = tmp_path / "stock.pt"
        stock_checkpoint(checkpoint)
    elif problem == "sentence without data":
        # its saved arguments name /nonexistent as the training data
        checkpoint = tmp_path / "tiny.pt"
        tiny_checkpoint("t5", [], checkpoint)
        extra = ["--sentence", "s1 s2"]
        message += ", the fairseq-preprocess (data-bin) directory the model was trained on"
        message += " (it holds dict.SRC.txt) (the checkpoint records /nonexistent, which"
    elif problem == "two preparations":
        extra = ["--sentence", "s1", "--tokenized", "--bpe-codes", str(tmp_path / "codes")]
    elif problem == "vocabulary without codes":
        extra = ["--sentence", "s1", "--bpe-vocab", str(tmp_path / "vocab")]
    else:
        extra = ["--sentence", "s1 s2", "--data", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_info:
        cli.main([str(checkpoint), "--out", str(tmp_path / "out"), *extra])
    assert message in str(exit_info.value)
    assert str(exit_info.value).startswith("posenc-inspect: error:")


# -- data made by posenc-prepare-corpus: the sentence as the data was made -------------

#: Raw English-German pairs with punctuation that Moses splits off (so the data has
#: joiner-marked tokens); the training sentences repeat so that BPE learns whole words.
PAIRS = {
    "train": [("The old dog, which sleeps, runs.", "Der alte Hund, der schläft, läuft."),
              ("The cat sees the dog.", "Die Katze sieht den Hund."),
              ("A big house (very old) is red!", "Ein großes Haus (sehr alt) ist rot!"),
              ("The dog runs home.", "Der Hund läuft nach Hause.")] * 5,
    "valid": [("The cat runs.", "Die Katze läuft.")],
    "test": [("The old cat, which sees the dog, runs.", "Die alte Katze, die den Hund "
              "sieht, läuft."), ("A red house!", "Ein rotes Haus!")],
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """``posenc-prepare-corpus RAW --dest DEST`` and a model trained on ``DEST/bin``."""
    root = tmp_path_factory.mktemp("prepared")
    (root / "raw").mkdir()
    for split, pairs in PAIRS.items():
        write_lines(root / "raw" / f"{split}.en", [en for en, _ in pairs])
        write_lines(root / "raw" / f"{split}.de", [de for _, de in pairs])
    assert corpus.main([str(root / "raw"), "-s", "en", "-t", "de", "--dest",
                        str(root / "data"), "--bpe-merges", "200", "--workers", "1"]) == 0
    train_translation_model(root / "data" / "bin", root / "ckpt", "transformer_tiny_t5",
                            max_update=2, extra_flags=[*FLAGS, "--source-lang", "en",
                                                       "--target-lang", "de"])
    return root


def sentence_tokens(out: Path) -> list[str]:
    return read_pictures(out)["encoder-attention"]["row_labels"][:-1]  # without </s>


def test_sentence_is_prepared_as_the_corpus_was(prepared, tmp_path, capsys):
    """A raw test sentence becomes the tokens posenc-prepare-corpus wrote for it
    (``DEST/bpe/test.en``), with ``--bpe-dir`` or found beside ``--data``, and with
    ``--data`` itself taken from the checkpoint."""
    checkpoint = prepared / "ckpt" / "checkpoint_last.pt"
    data, bpe = prepared / "data" / "bin", prepared / "data" / "bpe"
    raw = read_lines(prepared / "raw" / "test.en")[0]
    expected = read_lines(bpe / "test.en")[0].split()
    assert JOINER + "." in expected and JOINER + "," in expected  # joiner-marked tokens
    runs = {"--bpe-dir": ["--data", str(data), "--bpe-dir", str(bpe)],
            "found": ["--data", str(data)], "recorded": []}
    for name, flags in runs.items():
        out = tmp_path / name
        assert cli.main([str(checkpoint), "--out", str(out), "--sentence", raw, *flags]) == 0
        printed = capsys.readouterr().out
        assert sentence_tokens(out) == expected, name
        found = f"preparing the sentence as the data was, with {bpe} (found beside {data}; "
        assert (found in printed) == (name != "--bpe-dir"), printed
        assert ("(the training data the checkpoint records)" in printed) == (name == "recorded")
    # every token is in the dictionary: none became <unk>
    assert "<unk>" not in expected and "become <unk>" not in capsys.readouterr().err


def test_console_script_finds_the_preparation(prepared, tmp_path):
    raw = read_lines(prepared / "raw" / "test.en")[1]
    result = run_script("posenc-inspect", [
        prepared / "ckpt" / "checkpoint_last.pt", "--out", tmp_path / "out", "--sentence", raw])
    assert result.returncode == 0, result.stderr[-2000:]
    assert sentence_tokens(tmp_path / "out") == read_lines(
        prepared / "data" / "bpe" / "test.en")[1].split()
    assert f"with {prepared / 'data' / 'bpe'} (found beside" in result.stdout


def refusal(argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    text = str(exit_info.value)
    assert text.startswith("posenc-inspect: error:")
    return text


def test_preparations_that_are_not_the_datas_are_refused(prepared, tmp_path):
    checkpoint = str(prepared / "ckpt" / "checkpoint_last.pt")
    data, bpe = prepared / "data" / "bin", prepared / "data" / "bpe"
    base = [checkpoint, "--out", str(tmp_path / "out"), "--sentence", "The dog runs."]
    # subword-nmt codes of the data: plain tokens, not the joiner-marked ones
    text = refusal([*base, "--data", str(data), "--bpe-codes", str(bpe / "codes")])
    assert f"Pass --bpe-dir {bpe} instead of --bpe-codes" in text
    assert f"{data} was made by posenc-prepare-corpus or posenc-prepare-wmt" in text
    # a bpe/ directory of other languages
    other = tmp_path / "other-bpe"
    shutil.copytree(bpe, other)
    settings = json.loads((other / "bpe.json").read_text())
    (other / "bpe.json").write_text(json.dumps({**settings, "langs": ["fr", "de"]}))
    text = refusal([*base, "--data", str(data), "--bpe-dir", str(other)])
    assert (f"--bpe-dir {other} prepares fr, de (its bpe.json), not the source language en: "
            f"pass --bpe-dir the bpe/ directory of this model's data ({bpe})") in text
    # the data moved without its bpe/ directory: the joiners in the dictionary tell
    moved = tmp_path / "moved" / "bin"
    shutil.copytree(data, moved)
    text = refusal([*base, "--data", str(moved)])
    assert f"the source dictionary {moved / 'dict.en.txt'} has joiner-marked tokens" in text
    assert "Pass --bpe-dir DIR, the bpe/ directory of that output, or --tokenized" in text
    text = refusal([*base, "--data", str(moved), "--bpe-codes", str(bpe / "codes")])
    assert "Pass --bpe-dir DIR, the bpe/ directory of that output, instead of --bpe-codes" in text
    assert not (tmp_path / "out").exists()  # refused before any picture


def test_subword_dictionary_without_bpe_is_refused(trained, tmp_path):
    """Data with subword units (``@@``) and no BPE flag: the sentence would be whole words
    the model never saw as such. The dictionary keeps its size, so the model builds."""
    data = tmp_path / "bin"
    shutil.copytree(trained / "bin", data)
    lines = (data / "dict.src.txt").read_text().splitlines()
    lines = [line.replace("s1 ", "s@@ ", 1) if line.startswith("s1 ") else line
             for line in lines]
    (data / "dict.src.txt").write_text("\n".join(lines) + "\n")
    text = refusal([str(trained / "ckpt" / "checkpoint_last.pt"), "--out", str(tmp_path / "o"),
                    "--data", str(data), "--sentence", "s2 s3"])
    assert f"the source dictionary {data / 'dict.src.txt'} holds subword units (1 of " in text
    assert "Pass --bpe-codes FILE" in text and "--tokenized" in text
    # with --tokenized the sentence is taken as it is
    assert cli.main([str(trained / "ckpt" / "checkpoint_last.pt"), "--out", str(tmp_path / "o"),
                     "--data", str(data), "--sentence", "s@@ 2 s3", "--tokenized"]) == 0
    assert sentence_tokens(tmp_path / "o") == ["s@@", "2", "s3"]
