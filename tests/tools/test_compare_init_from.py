"""``posenc-compare --init-from CKPT`` (fairseq_posenc/tools/compare/init_from.py,
init_dictionaries.py): every row fine-tuned from one trained checkpoint converted to its
encoding.

Fast, without training: every refusal stops the command before anything is written (raw
data, --size, an architecture flag in --train-args, a checkpoint of another model, a row the
checkpoint does not convert to, dictionaries that differ, a rerun with another or a changed
checkpoint); each row's fairseq-train command is checked against fairseq's own parse of it
and the checkpoint's own arguments, the converted checkpoint of a run against the
checkpoint's tensors and the model that command builds, and the resume against fairseq's own
``checkpoint_utils.load_checkpoint``. The checkpoints are stock transformers (and one of the
plugin) saved by fairseq's trainer over the dictionaries of a prepared directory
(tests/support/conversion.py, tests/support/compare_reports.py).

Slow, end to end: a comparison of ``sinusoidal`` and ``rope`` fine-tuned from a stock
sinusoidal checkpoint, its report against the file's own SHA-256 and the checkpoint's own
record, the sinusoidal row's start against the checkpoint's tensors, fairseq's log of what
each run loaded, a raised ``--max-update`` that resumes each run from its own
``checkpoint_last.pt``, and a rerun with another checkpoint refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import tests.support.cli_utils as cu
from fairseq_posenc.plugin.checkpoint import load
from fairseq_posenc.plugin.model_flags import FINETUNE_RECIPE
from fairseq_posenc.tools.compare import cli, data, init_from, plan, settings as settings_mod
from fairseq_posenc.tools.compare.plan import Run
from fairseq_posenc.tools.compare.encoding_rows import parse_all
from tests.fixtures.make_record_checkpoints import write_checkpoint
from tests.support.compare_reports import write_prepared
from tests.support.conversion import SIZES, VARIANTS, write_language_model, write_stock
from tests.tools.test_compare import run_main

SRC, TGT = cu.SRC, cu.TGT
#: fairseq's dictionaries start with <s>, <pad>, </s> and <unk>, then the file's lines.
SPECIALS = 4


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A prepared directory (a word a token, one joined dictionary): 60 training pairs of
    3-12 words, 10 validation, 6 test."""
    rng = random.Random(7)
    splits = {}
    for split, n in (("train", 60), ("valid", 10), ("test", 6)):
        sources = [cu.random_sentence(rng) for _ in range(n)]
        splits[split] = (sources, [cu.translate(s) for s in sources])
    return write_prepared(tmp_path_factory.mktemp("init") / "prepared", splits)


@pytest.fixture(scope="module")
def checkpoints(prepared, tmp_path_factory) -> dict[str, Path]:
    """Checkpoints over the prepared directory's dictionaries, which their cfg.task.data
    names: stock pre-norm with shared embeddings (sinusoidal), stock learned positions, and
    the plugin's t5 with 16 buckets (not the default 32)."""
    root = tmp_path_factory.mktemp("checkpoints")
    over = {"data": prepared / "bin", "updates": 40}
    write_stock(root / "stock" / "checkpoint.pt", VARIANTS["pre-norm-shared"][0], **over)
    write_stock(root / "learned" / "checkpoint.pt", VARIANTS["learned-unscaled"][0], **over)
    write_checkpoint("transformer_posenc", ["--pos-encoding", "t5", "--t5-num-buckets", "16"],
                     root / "t5" / "checkpoint.pt", sizes=SIZES, **over)
    return {name: root / name / "checkpoint.pt" for name in ("stock", "learned", "t5")}


def base_args(out: Path, prepared: Path, checkpoint: Path, *extra: str) -> list[str]:
    return [str(out), "--data", str(prepared), "-s", SRC, "-t", TGT, "--max-update", "4",
            "--test", "test", "--cpu", "--workers", "1", "--init-from", str(checkpoint),
            *extra]


def settings_of(args: list[str]) -> settings_mod.Settings:
    """The settings ``posenc-compare ARGS`` works with once it has read the checkpoint (the
    rows, which they do not hold, ``sinusoidal`` where ``ARGS`` name none)."""
    parsed = cli.parser().parse_args(args if "--encodings" in args
                                     else [*args, "--encodings", "sinusoidal"])
    settings = cli.settings_of(parsed, cli.parser())
    return dataclasses.replace(settings, init_from=init_from.read(parsed.init_from)[1])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- refused before anything is written -----------------------------------------------------


@pytest.mark.parametrize("case, extra, says", [
    ("stock", ["--encodings", "rope", "--size", "base"],
     "--size sets the architecture of a comparison from scratch, but --init-from fine-tunes "
     "the checkpoint's"),
    ("stock", ["--encodings", "rope", "--arch-prefix", "transformer_tiny"],
     "--arch-prefix sets the architecture of a comparison from scratch"),
    ("stock", ["--encodings", "rope", "--init-dict", "a", "b", "c"],
     "--init-dict takes the source's dictionary and the target's, or one joined dictionary"),
    ("missing", ["--encodings", "rope"], "checkpoint.pt: no such file"),
    ("language model", ["--encodings", "rope"],
     "is a checkpoint of fairseq's TransformerLanguageModel (--arch transformer_lm), not of "
     "its transformer translation model"),
    ("stock", ["--encodings", "rope", "--train-args=--encoder-layers 3 --dropout 0.2"],
     "--encoder-layers: every row's model is --init-from's, its architecture as the "
     "checkpoint has it"),
    ("learned", ["--encodings", "learned", "--train-args=--max-source-positions 32"],
     "--encodings learned: --init-from"),
    ("t5", ["--encodings", "t5", "t8=t5:--t5-num-buckets 8"], "--encodings t8: --init-from"),
])
def test_refused_before_anything_is_written(prepared, checkpoints, tmp_path, capsys, case,
                                            extra, says):
    if case == "language model":
        checkpoint = tmp_path / "lm" / "checkpoint.pt"
        checkpoint.parent.mkdir()
        write_language_model(checkpoint)
    else:
        checkpoint = checkpoints.get(case, tmp_path / "none" / "checkpoint.pt")
    out = tmp_path / "cmp"
    said = run_main(base_args(out, prepared, checkpoint, *extra), capsys)
    assert says in said
    if case == "learned":  # its table of 24 positions (tests/support/conversion.py's SIZES)
        assert "learned encoder positions are a table of 24" in said
    if case == "t5":  # a table of 2 heads by 16 buckets, which the row's 8 cannot take
        assert "rel_bias is [2, 16] in" in said and "but [2, 8] in the converted model" in said
    assert not out.exists()


def test_raw_text_and_a_stray_init_dict_are_refused(toy_corpus, checkpoints, tmp_path, capsys):
    out = tmp_path / "cmp"
    args = [str(out), "--data", str(toy_corpus), "-s", "en", "-t", "de", "--max-update", "4",
            "--cpu", "--encodings", "rope"]
    said = run_main(args + ["--init-from", str(checkpoints["stock"])], capsys)
    assert f"--data {toy_corpus} is raw text" in said
    assert "--init-from fine-tunes a model on data in its vocabulary" in said
    assert "--init-dict gives --init-from's dictionaries" in run_main(
        args + ["--init-dict", "dict.txt"], capsys)
    assert not out.exists()


# --- the dictionaries ------------------------------------------------------------------------


def test_a_dictionary_that_differs_is_named_at_its_first_differing_symbol(
        prepared, checkpoints, tmp_path, capsys):
    corpus = prepared / "bin" / f"dict.{SRC}.txt"
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    line = 5
    word, count = lines[line].split()
    changed = tmp_path / "dict.txt"
    changed.write_text("".join(lines[:line] + [f"{word}x {count}\n"] + lines[line + 1:]),
                       encoding="utf-8")
    out = tmp_path / "cmp"
    said = run_main(base_args(out, prepared, checkpoints["stock"], "--encodings", "rope",
                              "--init-dict", str(changed)), capsys)
    assert (f"its source dictionary and the corpus's differ first at symbol {line + SPECIALS}: "
            f"'{word}x' in {changed}, '{word}' in {corpus}") in said
    shorter = tmp_path / "short.txt"
    shorter.write_text("".join(lines[:-1]), encoding="utf-8")
    said = run_main(base_args(out, prepared, checkpoints["stock"], "--encodings", "rope",
                              "--init-dict", str(shorter)), capsys)
    assert (f"{shorter} holds {len(lines) - 1 + SPECIALS} types but the checkpoint's encoder "
            f"embeds {len(lines) + SPECIALS}: it is not the checkpoint's source dictionary"
            ) in said
    assert not out.exists()


def test_without_dictionaries_the_embedding_sizes_are_compared_and_said_so(
        prepared, checkpoints, tmp_path, capsys):
    # the checkpoint moved to a directory of its own, its cfg.task.data a path gone
    alone = tmp_path / "alone"
    alone.mkdir()
    moved = alone / "model.pt"
    state = load(checkpoints["stock"])
    state["cfg"]["task"]["data"] = str(tmp_path / "gone")
    torch.save(state, moved)
    types = len((prepared / "bin" / f"dict.{SRC}.txt").read_text().splitlines()) + SPECIALS
    said = run_main(base_args(tmp_path / "cmp", prepared, moved, "--encodings", "rope",
                              "--report-only"), capsys)
    assert (f"--init-from {moved} holds no dictionary and none was found" in said
            and f"only the embedding sizes were compared ({types} source and {types} target "
                "types" in said)
    assert "has no comparison to report on" in said  # every check passed before it
    for lang in (SRC, TGT):  # dictionaries beside it, as fairseq's released models come
        shutil.copy(prepared / "bin" / f"dict.{lang}.txt", alone)
    said = run_main(base_args(tmp_path / "cmp", prepared, moved, "--encodings", "rope",
                              "--report-only"), capsys)
    assert (f"the checkpoint's dictionaries ({alone / f'dict.{SRC}.txt'}, "
            f"{alone / f'dict.{TGT}.txt'}) and the corpus's are the same") in said
    other = tmp_path / "toy.pt"  # a toy dictionary of its own, no data
    write_stock(other)
    said = run_main(base_args(tmp_path / "cmp", prepared, other, "--encodings", "rope"), capsys)
    embeds = load(other)["model"]["encoder.embed_tokens.weight"].shape[0]
    assert (f"its encoder embeds {embeds} types, but the corpus's source dictionary "
            f"{prepared / 'bin' / f'dict.{SRC}.txt'} holds {types}") in said
    assert not (tmp_path / "cmp").exists()


def test_a_rerun_with_another_or_a_changed_checkpoint_is_refused(prepared, checkpoints,
                                                                 tmp_path, capsys):
    out = tmp_path / "cmp"
    first = tmp_path / "a" / "checkpoint.pt"
    first.parent.mkdir()
    shutil.copy(checkpoints["stock"], first)
    settings_mod.write(out / "settings.json",
                       settings_of(base_args(out, prepared, first, "--encodings", "rope")))
    before = sha256(first)
    said = run_main(base_args(out, prepared, checkpoints["stock"], "--encodings", "rope"),
                    capsys)
    assert "holds a comparison with other settings" in said
    assert (f"init_from: {first} (sha256 {before[:12]}..., sinusoidal, 40 updates) before, "
            f"{checkpoints['stock']} (sha256 {before[:12]}...") in said
    write_stock(first, VARIANTS["pre-norm-shared"][0], data=prepared / "bin", updates=41)
    said = run_main(base_args(out, prepared, first, "--encodings", "rope"), capsys)
    assert (f"init_from: {first} (sha256 {before[:12]}..., sinusoidal, 40 updates) before, "
            f"{first} (sha256 {sha256(first)[:12]}..., sinusoidal, 41 updates) now") in said
    scratch = [a for a in base_args(out, prepared, first, "--encodings", "rope")
               if a not in ("--init-from", str(first))]
    assert "40 updates) before, none (from scratch) now" in run_main(scratch, capsys)
    assert not (out / "runs").exists()


# --- each row's command and its converted checkpoint ----------------------------------------


def test_each_row_trains_the_checkpoints_model_with_its_encoding_and_the_recipe(
        prepared, checkpoints, tmp_path, capsys):
    from fairseq import options

    out = tmp_path / "cmp"
    extra = ("--encodings", "rope", "t5/alibi", "--train-args=--dropout 0.2 --lr 5e-5")
    args = base_args(out, prepared, checkpoints["stock"], *extra)
    settings = settings_of(args)
    corpus = data.open_prepared(prepared, settings, None)
    rope, pair = parse_all(["rope", "t5/alibi"])
    command = plan.train_args(settings, corpus, Run(rope, 2), out)
    at = command.index(FINETUNE_RECIPE[0])
    assert tuple(command[at:at + len(FINETUNE_RECIPE)]) == FINETUNE_RECIPE  # the recipe, whole
    assert command[command.index("--finetune-from-model") + 1] == str(
        out / "runs" / "rope" / "seed2" / "init.pt")
    parsed = options.parse_args_and_arch(options.get_training_parser(), command)
    assert (parsed.arch, parsed.pos_encoding, parsed.seed) == ("transformer_posenc", "rope", 2)
    assert (parsed.lr, parsed.dropout) == ([5e-5], 0.2)  # --train-args after the recipe
    # the model is the checkpoint's, as its own arguments record it
    theirs = load(checkpoints["stock"])["cfg"]["model"]
    for name in ("encoder_embed_dim", "decoder_embed_dim", "encoder_ffn_embed_dim",
                 "decoder_ffn_embed_dim", "encoder_layers", "decoder_layers",
                 "encoder_attention_heads", "decoder_attention_heads",
                 "encoder_normalize_before", "decoder_normalize_before",
                 "share_all_embeddings", "layernorm_embedding", "max_source_positions",
                 "max_target_positions"):
        assert getattr(parsed, name) == getattr(theirs, name), name
    paired = options.parse_args_and_arch(options.get_training_parser(), plan.train_args(
        settings, corpus, Run(pair, 1), out))
    assert (paired.encoder_pos_encoding, paired.decoder_pos_encoding) == ("t5", "alibi")
    # every check passes (--dropout and --lr are the fine-tuning's to set)
    assert "has no comparison to report on" in run_main(args + ["--report-only"], capsys)


def test_parameters_are_counted_of_the_checkpoints_model(prepared, checkpoints, tmp_path):
    out = tmp_path / "cmp"
    settings = settings_of(base_args(out, prepared, checkpoints["stock"]))
    corpus = data.open_prepared(prepared, settings, None)
    counts = plan.parameter_counts(settings, corpus, ["sinusoidal", "rope"], out / "params.json")
    tensors = load(checkpoints["stock"])["model"]
    unique = {t.data_ptr(): t.numel() for name, t in tensors.items()
              if t.is_floating_point() and not name.endswith("version")}
    assert counts == {"sinusoidal": sum(unique.values()), "rope": sum(unique.values())}


def test_a_run_starts_from_the_checkpoint_converted_to_its_row_with_its_seed(
        prepared, checkpoints, tmp_path):
    from fairseq import options
    from fairseq.tasks.translation import TranslationTask

    said: list[str] = []

    def start(checkpoint: Path, row: str, seed: int) -> tuple[Path, list[str]]:
        out = tmp_path / checkpoint.parent.name  # a comparison per checkpoint
        settings = settings_of(base_args(out, prepared, checkpoint))
        run = Run(parse_all([row])[0], seed)
        init_from.start_run(settings.init_from, plan.model_flags(settings, run.encoding), seed,
                            run.init_checkpoint(out), run.save_dir(out), said.append)
        corpus = data.open_prepared(prepared, settings, None)
        return run.init_checkpoint(out), plan.train_args(settings, corpus, run, out)

    stock = load(checkpoints["stock"])["model"]
    converted, _ = start(checkpoints["stock"], "sinusoidal", 1)
    state = load(converted)
    assert all(torch.equal(state["model"][name], t) for name, t in stock.items())
    record = state["cfg"]["model"].pos_converted_from
    assert (record["sha256"], record["seed"]) == (sha256(checkpoints["stock"]), 1)
    # a new parameter starts as the run's seed has it; the copied ones are the checkpoint's
    tables = []
    for seed in (1, 2):
        path, command = start(checkpoints["stock"], "t5", seed)
        tensors = load(path)["model"]
        tables.append(tensors["encoder.pos_encodings.0.rel_bias"])
        assert torch.equal(tensors["encoder.layers.0.fc1.weight"],
                           stock["encoder.layers.0.fc1.weight"])
    assert not torch.equal(*tables)
    # the model of the run's own command takes the conversion, strictly: a plugin t5
    # checkpoint's 16 buckets carried over into the t5 row
    path, command = start(checkpoints["t5"], "t5", 1)
    args = options.parse_args_and_arch(options.get_training_parser(), command)
    assert args.t5_num_buckets == 16
    d = TranslationTask.load_dictionary(str(prepared / "bin" / f"dict.{SRC}.txt"))
    model = TranslationTask(args, d, d).build_model(args)
    model.load_state_dict(load(path)["model"], strict=True)
    # a run that resumes (its checkpoint_last.pt) is converted for no more
    out, run = tmp_path / "stock", Run(parse_all(["rope"])[0], 1)
    run.save_dir(out).mkdir(parents=True)
    (run.save_dir(out) / "checkpoint_last.pt").write_bytes(b"")
    said.clear()
    start(checkpoints["stock"], "rope", 1)
    assert not run.init_checkpoint(out).exists() and not said


def test_a_run_that_starts_after_its_checkpoint_changed_stops(prepared, checkpoints, tmp_path):
    checkpoint = tmp_path / "checkpoint.pt"
    shutil.copy(checkpoints["stock"], checkpoint)
    out = tmp_path / "cmp"
    settings = settings_of(base_args(out, prepared, checkpoint))
    recorded = sha256(checkpoint)
    write_stock(checkpoint, data=prepared / "bin", updates=41)  # a SLURM job queued meanwhile
    run = Run(parse_all(["rope"])[0], 1)
    with pytest.raises(SystemExit) as stop:
        init_from.start_run(settings.init_from, plan.model_flags(settings, run.encoding), 1,
                            run.init_checkpoint(out), run.save_dir(out), lambda _: None)
    assert (f"--init-from {checkpoint} has changed since the comparison recorded it (sha256 "
            f"{recorded} then, {sha256(checkpoint)} now)") in str(stop.value.code)
    assert not run.init_checkpoint(out).exists()


class RecordingTrainer:
    """What fairseq's ``checkpoint_utils.load_checkpoint`` asks of a trainer, recording the
    checkpoint it loads and whether it resets the optimizer, schedule and meters."""

    checkpoint_suffix = ""

    def __init__(self):
        self.loaded: list[tuple] = []

    def load_checkpoint(self, path, reset_optimizer, reset_lr_scheduler, optimizer_overrides,
                        reset_meters=False):
        self.loaded.append((path, reset_optimizer, reset_lr_scheduler, reset_meters))
        return None

    def get_train_iterator(self, epoch, load_dataset=True, **kwargs):
        return SimpleNamespace(epoch=epoch)

    def lr_step(self, epoch):
        pass


def test_fairseq_resumes_a_run_from_its_checkpoint_last_not_from_the_conversion(
        prepared, checkpoints, tmp_path):
    from fairseq import checkpoint_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    out = tmp_path / "cmp"
    settings = settings_of(base_args(out, prepared, checkpoints["stock"]))
    run = Run(parse_all(["rope"])[0], 1)
    command = plan.train_args(settings, data.open_prepared(prepared, settings, None), run, out)
    cfg = convert_namespace_to_omegaconf(
        options.parse_args_and_arch(options.get_training_parser(), command))
    run.save_dir(out).mkdir(parents=True)
    run.init_checkpoint(out).write_bytes(b"")
    started = RecordingTrainer()
    checkpoint_utils.load_checkpoint(cfg.checkpoint, started)
    assert started.loaded == [(str(run.init_checkpoint(out)), True, True, True)]
    (run.save_dir(out) / "checkpoint_last.pt").write_bytes(b"")
    resumed = RecordingTrainer()
    checkpoint_utils.load_checkpoint(cfg.checkpoint, resumed)
    assert resumed.loaded == [(str(run.save_dir(out) / "checkpoint_last.pt"), False, False,
                               False)]


# --- end to end --------------------------------------------------------------------------------


@pytest.mark.slow  # two fine-tunings of a tiny model, translated and inspected; then resumed
def test_a_comparison_fine_tuned_from_a_stock_checkpoint(tmp_path):
    from fairseq_posenc.tools import corpus

    raw, prepared, out = tmp_path / "raw", tmp_path / "prepared", tmp_path / "cmp"
    # short sentences: a model that never ends a sentence translates at most 47 tokens
    subprocess.run([sys.executable, str(cu.REPO_ROOT / "scripts" / "make_toy_corpus.py"),
                    "--out", str(raw), "--seed", "3", "--train", "200", "--valid", "10",
                    "--test", "6", "--max-len", "8"], check=True, capture_output=True)
    assert corpus.main([str(raw), "-s", "en", "-t", "de", "--dest", str(prepared), "--test",
                        "test", "--bpe-merges", "100", "--workers", "1"]) == 0
    checkpoint = tmp_path / "stock" / "checkpoint.pt"
    lengths = ["--max-source-positions", "48", "--max-target-positions", "48"]
    write_stock(checkpoint, sizes=[*SIZES[:-4], *lengths], data=prepared / "bin",
                langs=("en", "de"), updates=40)

    def compare(*extra: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "fairseq_posenc.tools.compare", str(out), "--data",
             str(prepared), "-s", "en", "-t", "de", "--encodings", "sinusoidal", "rope",
             "--test", "test", "--cpu", "--workers", "1", *extra],
            capture_output=True, text=True, env=cu.subprocess_env(), timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]

    compare("--init-from", str(checkpoint), "--max-update", "4")
    report = json.loads((out / "report.json").read_text())
    assert report["init_from"] | {"model_flags": None} == {
        "path": str(checkpoint), "sha256": sha256(checkpoint), "model": "transformer",
        "architecture": "transformer", "encoding": "sinusoidal", "updates": 40,
        "model_flags": None}
    said = (f"Fine-tuned from `{checkpoint}` (sha256 `{sha256(checkpoint)}`): fairseq's "
            "transformer, `--arch transformer`, encoding `sinusoidal`, trained for 40 updates")
    assert said in (out / "report.md").read_text()
    page = (out / "report" / "index.html").read_text()
    assert said.replace("`", "") in html.unescape(re.sub(r"<[^>]+>", "", page))
    stock = load(checkpoint)["model"]
    inits = {}
    for row in ("sinusoidal", "rope"):
        run = out / "runs" / row / "seed1"
        # fairseq's own word: the run loaded its conversion, and counted its own updates
        assert (f"loading pretrained model from {run / 'init.pt'}"
                in (run / "train.log").read_text())
        assert json.loads((run / "trained.json").read_text())["last_update"] == 4
        inits[row] = sha256(run / "init.pt")
        converted = load(run / "init.pt")["model"]  # every row starts from the checkpoint
        assert all(torch.equal(converted[name], t) for name, t in stock.items())
        assert (run / "inspect" / "index.html").exists()

    # a raised --max-update continues each run from its own checkpoint_last.pt
    compare("--init-from", str(checkpoint), "--max-update", "6")
    for row in ("sinusoidal", "rope"):
        run = out / "runs" / row / "seed1"
        log = (run / "train.log").read_text()
        assert re.search(rf"Loaded checkpoint {re.escape(str(run))}/checkpoints/"
                         r"checkpoint_last\.pt \(epoch \d+ @ 4 updates\)", log)
        assert "loading pretrained model" not in log
        assert json.loads((run / "trained.json").read_text())["last_update"] == 6
        assert sha256(run / "init.pt") == inits[row]  # not converted again

    # another checkpoint: refused, nothing changed
    other = tmp_path / "other.pt"
    shutil.copy(checkpoint, other)
    with pytest.raises(SystemExit) as refused:
        cli.main([str(out), "--data", str(prepared), "-s", "en", "-t", "de", "--encodings",
                  "sinusoidal", "rope", "--test", "test", "--cpu", "--init-from", str(other),
                  "--max-update", "6"])
    assert (f"init_from: {checkpoint} (sha256 {sha256(checkpoint)[:12]}..., sinusoidal, 40 "
            f"updates) before, {other} (sha256") in str(refused.value.code)
    assert json.loads((out / "report.json").read_text())["init_from"]["path"] == str(checkpoint)
