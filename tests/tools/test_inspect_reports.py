"""``posenc-inspect``: every encoding's checkpoint gives its report, and the numbers in
each JSON file are what the model's attention really adds.

Checkpoints: a tiny model per encoding (the legacy fixtures' flags: 16 wide, 4 heads, 24
positions), its position parameters and its attention's q/k projection biases drawn from
N(0, 1) so that every term is visible, saved in the layout of fairseq's
``Trainer.state_dict`` (``cfg.model`` = the parsed arguments); plus one checkpoint written
by a real ``fairseq-train`` run for the sentence options and the console script, and one
trained on data made by ``posenc-prepare-corpus`` (``DEST/bin``, ``DEST/bpe``), whose
sentence tokens must be the very tokens that tool wrote for the same raw sentence. Each
report is made once (module-scoped cache) and read by several tests.

The numeric checks never call the code under test: they run a layer's
``PositionalMultiheadAttention.forward`` (float64, explicit path with ``need_head_weights``)
with its q/k projection weights zeroed, so every token has the same query and key and the
content part of each logit is one constant; the logits are recovered from the returned
probabilities (``log p_ij - log p_i0``, which removes that constant and the softmax's
normaliser). What is left is what the layer's position terms add -- computed by the
attention's own kind dispatch, expansion and masking -- and it must equal the JSON.
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from fairseq import options
from fairseq.tasks.translation import TranslationTask

from cli_utils import (
    create_parallel_corpus,
    preprocess_translation_data,
    read_lines,
    run_script,
    train_translation_model,
    write_lines,
)
from fixtures.make_legacy_checkpoints import FLAGS
from model_utils import ALL_ENCODINGS, dictionary
from fairseq_posenc import corpus
from fairseq_posenc.context import PositionContext
from fairseq_posenc.inspection import cli
from fairseq_posenc.inspection.load import load_model
from fairseq_posenc.wmt.text import JOINER

#: Report name -> (encoding, extra flags): every encoding, and the variants whose term
#: has another kind (TUPE's reset: a pair bias; Shaw without values: a content bias) or
#: that add the segment term.
CASES: dict[str, tuple[str, list[str]]] = {
    **{name: (name, []) for name in ALL_ENCODINGS},
    "tupe_r_reset": ("tupe_r", ["--tupe-reset-first"]),
    "shaw_keys": ("shaw", ["--shaw-no-value"]),
    "segments": ("sinusoidal", ["--segment-attention", "--segment-separator", "w3"]),
}


def expected_keys(name: str) -> set[str]:
    """The pictures each report must contain, per stack."""
    encoding = CASES[name][0]
    per_stack = {
        "sinusoidal": ["sinusoidal-cosine"], "learned": ["learned-cosine"], "none": [],
        "t5": ["t5-bias"], "t5_nob": ["t5_nob-bias"], "diet_rel": ["diet_rel-bias"],
        "alibi": ["alibi-bias"], "huang1": ["huang1-factor"], "huang2": ["huang2-factor"],
        "at5": ["at5-bias", "at5-soft-bucket"], "at5_nob": ["at5_nob-bias",
                                                         "at5_nob-soft-bucket"],
        "huang3": ["huang3-gate"], "huang4": ["huang4-position-bias"],
        "shaw": ["shaw-position-bias", "shaw-vector-norms"], "xl": ["xl-position-bias"],
        "rope": ["rope-cosine", "rope-pairs"], "diet_abs": ["diet_abs-logits"],
        "diet_abs_lin": ["diet_abs_lin-logits"], "tupe_a": ["tupe_a-logits"],
        "tupe_r": ["tupe_r-logits", "t5-bias"],
    }[encoding]
    keys = {f"{stack}-{what}" for stack in ("encoder", "decoder") for what in per_stack}
    if encoding == "diet_abs_lin":  # a causal decoder cannot project: it is diet_abs
        keys = {k.replace("decoder-diet_abs_lin", "decoder-diet_abs") for k in keys}
    if name == "tupe_r_reset":  # one pair table: absolute, relative and reset together
        keys -= {"encoder-t5-bias", "decoder-t5-bias"}
    if name == "segments":
        keys.add("encoder-segments-logits")
    return keys


@dataclass
class Inspected:
    model: torch.nn.Module
    out: Path
    pictures: dict[str, dict]


def tiny_checkpoint(encoding: str, extra: list[str], path: Path) -> torch.nn.Module:
    torch.manual_seed(0)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "/nonexistent", "--task", "translation", "--arch", f"transformer_tiny_{encoding}",
        "--dropout", "0", *FLAGS, *extra])
    d = dictionary()
    # build_model adds config objects to the namespace it gets; fairseq saves the parsed one
    model = TranslationTask(args, d, d).build_model(copy.deepcopy(args))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if re.search(r"pos_encodings|embed_positions|segment_attention|"
                         r"self_attn\.[qk]_proj\.bias", name):
                p.normal_(0.0, 1.0)
    torch.save({"args": None, "cfg": {"model": args, "task": {
        "_name": "translation", "source_lang": "src", "target_lang": "tgt"}},
        "model": model.state_dict()}, path)
    return model.eval()


def read_pictures(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


@pytest.fixture(scope="module")
def inspected(tmp_path_factory):
    made: dict[str, Inspected] = {}

    def get(name: str) -> Inspected:
        if name not in made:
            root = tmp_path_factory.mktemp(name)
            encoding, extra = CASES[name]
            model = tiny_checkpoint(encoding, extra, root / "checkpoint_best.pt")
            assert cli.main([str(root / "checkpoint_best.pt"), "--out", str(root / "out")]) == 0
            made[name] = Inspected(model, root / "out", read_pictures(root / "out"))
        return made[name]

    return get


@pytest.mark.parametrize("name", list(CASES))
def test_every_encoding_writes_its_report(inspected, name):
    """PNGs with a JSON each, all shown by index.html; the expected pictures are there."""
    report = inspected(name)
    pngs = sorted(p.name for p in report.out.glob("*.png"))
    assert {Path(p).stem for p in pngs} == set(report.pictures) == expected_keys(name)
    html = (report.out / "index.html").read_text()
    for png in pngs:
        assert (report.out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"src='{png}'" in html
    if name == "none":
        assert "no position term" in html and not pngs


def split_key(key: str) -> tuple[str, str, str]:
    stack, term, what = key.split("-", 2)
    return stack, term, what


def layer_values(picture: dict, layer: int) -> torch.Tensor:
    """A picture's values for ``layer``: curves ``(series, x)``; heatmaps ``(H, rows,
    cols)`` (one entry when the panel stands for every head)."""
    panels = [p for p in picture["panels"] if layer in p["layers"]]
    if "series" in panels[0]:
        return torch.tensor(list(panels[0]["series"].values()), dtype=torch.float64)
    return torch.tensor([p["values"] for p in panels], dtype=torch.float64)


def as_matrix(picture: dict, layer: int, n: int) -> torch.Tensor:
    """``(H, n, n)`` logits: a distance curve read at ``j - i``, or the heatmap itself."""
    values = layer_values(picture, layer)
    if picture["kind"] == "heatmaps":
        return values
    r = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    # a causal stack's curve stops at j - i = 0; the keys after the query are masked
    return values[:, (r - picture["x"][0]).clamp(max=values.size(-1) - 1)]


def attention_logits(model, stack: str, layer: int, n: int, q_bias=None, k_bias=None,
                     keep_biases: bool = False, segment_ids=None) -> torch.Tensor:
    """``(H, n, k)``: the logits of the layer's own self-attention, from its probabilities,
    minus those of key 0, with q/k projection weights zeroed (see the module docstring).
    Biases: the given ones, the layer's own (``keep_biases``) or zero."""
    model = copy.deepcopy(model).double()
    module = getattr(model, stack)
    attn = module.layers[layer].self_attn
    with torch.no_grad():
        for proj, bias in ((attn.q_proj, q_bias), (attn.k_proj, k_bias)):
            proj.weight.zero_()
            if not keep_biases:
                proj.bias.copy_(torch.zeros_like(proj.bias) if bias is None else bias)
    x = torch.randn(n, 1, attn.embed_dim, dtype=torch.float64)
    mask = (torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
            if stack == "decoder" else None)
    with torch.no_grad(), module.pos_scope.open(PositionContext(segment_ids=segment_ids)):
        _, weights = attn(x, x, x, need_weights=True, need_head_weights=True, attn_mask=mask)
    logp = weights[:, 0].log()
    return logp - logp[..., :1]


def assert_logits(actual: torch.Tensor, expected: torch.Tensor, causal: bool) -> None:
    expected = expected - expected[..., :1]
    if causal:  # keys after the query are masked: compare j <= i
        keep = torch.ones(actual.shape[-2:], dtype=torch.bool).tril()
        actual, expected = actual[..., keep], expected.expand_as(actual)[..., keep]
    # float32 JSON against a float64 forward: TUPE's logits reach ~100
    torch.testing.assert_close(actual, expected.expand_as(actual), rtol=2e-6, atol=2e-5)


ADDITIVE = {"bias", "logits", "position-bias"}
#: The segment term needs segment ids: test_segment_term_equals_what_the_attention_adds.
ATTENTION_CASES = [name for name, (enc, _) in CASES.items()
                   if enc not in ("sinusoidal", "learned", "none")]


@pytest.mark.parametrize("name", ATTENTION_CASES)
def test_json_equals_what_the_attention_adds(inspected, name):
    """For every layer of both stacks, the JSON's position terms (summed where a layer has
    several, as TUPE-R) equal the logits the layer's forward adds; multiplicative terms
    are checked with a constant q.k (Huang 1-2: q.k = 1, so the logit is the factor) or
    all-ones q, k (Huang 3: d_h x mean gate; RoPE: d_h x mean cosine)."""
    report = inspected(name)
    head_dim = 4  # 16 wide, 4 heads
    ones = torch.ones(16, dtype=torch.float64)
    unscaled = ones * math.sqrt(head_dim)  # the attention scales q by 1/sqrt(d_h)
    checked = 0
    for stack in ("encoder", "decoder"):
        for layer in range(2):
            pics = {key: p for key, p in report.pictures.items() if key.startswith(stack)
                    and any(layer in panel["layers"] for panel in p["panels"])}
            by_what = {split_key(key)[2]: p for key, p in pics.items()}
            additive = [p for key, p in pics.items() if split_key(key)[2] in ADDITIVE]
            if additive:
                n = 24
                keep = any(p["term"] in ("shaw", "huang4") for p in additive)
                actual = attention_logits(report.model, stack, layer, n, keep_biases=keep)
                if "diet_abs_lin" in {p["term"] for p in additive}:
                    n = actual.size(-1)  # projected keys: (H, 24, k)
                expected = sum(as_matrix(p, layer, 24)[..., :n] for p in additive)
                assert_logits(actual, expected, stack == "decoder")
                checked += 1
            if "factor" in by_what:
                q = ones / math.sqrt(head_dim)  # scaled q = ones / d_h: q.k = 1
                actual = attention_logits(report.model, stack, layer, 24, q, ones)
                assert_logits(actual, as_matrix(by_what["factor"], layer, 24),
                              stack == "decoder")
                checked += 1
            for what in ("gate", "cosine"):  # Huang 3, RoPE
                if what in by_what and by_what[what]["term"] in ("huang3", "rope"):
                    actual = attention_logits(report.model, stack, layer, 24, unscaled, ones)
                    assert_logits(actual, head_dim * as_matrix(by_what[what], layer, 24),
                                  stack == "decoder")
                    checked += 1
    assert checked >= 2


def test_segment_term_equals_what_the_attention_adds(inspected):
    """S[l,h][seg(i), seg(j)] from the JSON's K x K tables against the layer's forward on
    a source with two segments."""
    report = inspected("segments")
    ids = torch.tensor([[0, 0, 0, 1, 1]])
    for layer in range(2):
        table = layer_values(report.pictures["encoder-segments-logits"], layer)  # H, K, K
        expected = table[:, ids[0][:, None], ids[0][None, :]]
        actual = attention_logits(report.model, "encoder", layer, 5, segment_ids=ids)
        assert_logits(actual, expected, causal=False)


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
def test_input_embeddings_cosine(inspected, name):
    """The encoder's own forward_embedding minus its token part is the position embedding
    it adds; its cosine similarities are the JSON's."""
    report = inspected(name)
    encoder = report.model.encoder
    tokens = torch.full((1, 24), 5)
    with torch.no_grad():
        x, token_part = encoder.forward_embedding(tokens)
    positions = (x - token_part)[0].double()
    unit = positions / positions.norm(dim=-1, keepdim=True)
    panel, = report.pictures[f"encoder-{name}-cosine"]["panels"]  # the input: no layer
    torch.testing.assert_close(torch.tensor(panel["values"], dtype=torch.float64),
                               unit @ unit.t(), rtol=0, atol=1e-5)


def test_shaw_vector_norms_and_rope_pairs(inspected):
    """Shaw's norms are those of the parameters at clip(j - i); RoPE's per-pair table is
    cos((j - i) theta_p) with theta_p = 10000^(-2p/d_h), the paper's formula."""
    shaw = inspected("shaw")
    picture = shaw.pictures["encoder-shaw-vector-norms"]
    r = torch.tensor(picture["x"]).clamp(-16, 16) + 16
    for layer in range(2):
        term = shaw.model.encoder.layers[layer].self_attn.encoding
        expected = torch.stack([term.rel_key.norm(dim=-1)[r], term.rel_value.norm(dim=-1)[r]])
        torch.testing.assert_close(layer_values(picture, layer), expected.double(),
                                   rtol=0, atol=1e-6)
    pairs = inspected("rope").pictures["encoder-rope-pairs"]
    distance = torch.tensor([int(c) for c in pairs["col_labels"]], dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(0, 4, 2, dtype=torch.float64) / 4)
    torch.testing.assert_close(layer_values(pairs, 0)[0],
                               torch.cos(theta[:, None] * distance), rtol=0, atol=1e-6)


def test_at5_soft_buckets(inspected):
    """f = 1 - exp(-relu(slope) |r| / L) from the parameters (eqs. 17, 19)."""
    report = inspected("at5")
    picture = report.pictures["encoder-at5-soft-bucket"]
    term = report.model.encoder.layers[0].self_attn.encoding
    r = torch.tensor(picture["x"], dtype=torch.float64)
    slope = torch.where(r > 0, torch.relu(term.alpha.double())[:, None],
                        torch.relu(term.beta.double())[:, None]) / term.max_len
    torch.testing.assert_close(layer_values(picture, 0), 1 - torch.exp(-slope * r.abs()),
                               rtol=0, atol=1e-6)


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
