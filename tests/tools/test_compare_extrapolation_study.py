"""posenc-compare's extrapolation study: ``--train-max-len N`` (fairseq_posenc/tools/compare/
extrapolation_study.py) and inference-time variants (fairseq_posenc/tools/compare/variants.py).

References: the lengths of a made-up test set counted into the relative bins by hand (with
sentences exactly at N, 1.5N, 2N and 3N), sacreBLEU's own corpus scores of the sentences
each hand-counted bin holds, the training pairs a plain loop over the raw text keeps, and,
end to end, the count of skipped pairs that fairseq's own training log prints.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import sacrebleu

import tests.support.cli_utils as cu
from tests.support.compare_reports import fake_result, write_prepared
from fairseq_posenc.tools.compare import cli, extrapolation_study, summary, variants
from fairseq_posenc.tools.compare import report as report_mod
from fairseq_posenc.tools.compare import settings as settings_mod
from fairseq_posenc.tools.compare.plan import Run

ROOT = Path(__file__).resolve().parents[2]
SRC, TGT = cu.SRC, cu.TGT

#: The test split's sources, in words; fairseq counts each word a token, plus </s>.
TEST_WORDS = [1, 5, 9, 10, 13, 14, 15, 19, 20, 25, 29, 30, 40, 60]
#: Hand count of the test sentences (their ids) in each relative bin.
BY_HAND = {
    # N = 10: (0, 10], (10, 15], (15, 20], (20, 30], (30, inf) of tokens 2 6 10 11 14 15 16
    # 20 21 26 30 31 41 61
    10: [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9, 10], [11, 12, 13]],
    # N = 7: (0, 7], (7, 10.5], (10.5, 14], (14, 21], (21, inf)
    7: [[0, 1], [2], [3, 4], [5, 6, 7, 8], [9, 10, 11, 12, 13]],
}
TRAIN_PAIRS = 1200


def _sentence(rng: random.Random, words: int) -> list[str]:
    return [rng.choice(cu.SRC_WORDS) for _ in range(words)]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A prepared directory as posenc-prepare-corpus leaves one (bin/, bpe/bpe.json, raw/,
    prepared.json), a word a token: 1,200 training pairs of 2-30 source words whose
    targets have up to 4 words more, and the test set of TEST_WORDS."""
    rng = random.Random(5)
    sources = {
        "train": [_sentence(rng, rng.randint(2, 30)) for _ in range(TRAIN_PAIRS)],
        "valid": [_sentence(rng, rng.randint(3, 12)) for _ in range(20)],
        "test": [_sentence(rng, n) for n in TEST_WORDS],
    }
    splits = {split: (s, [cu.translate(x) + ["T0"] * (rng.randint(0, 4) if split == "train"
                                                       else 0) for x in s])
              for split, s in sources.items()}
    return write_prepared(tmp_path_factory.mktemp("extrapolation") / "prepared", splits)


def kept_by_loop(raw: Path, n: int) -> tuple[int, int, int]:
    """Pairs with both sides at most ``n`` tokens (words + </s>): kept, dropped, and the
    longest kept source."""
    src = [len(line.split()) + 1 for line in cu.read_lines(raw / f"train.{SRC}")]
    tgt = [len(line.split()) + 1 for line in cu.read_lines(raw / f"train.{TGT}")]
    kept = [s for s, t in zip(src, tgt) if s <= n and t <= n]
    return len(kept), len(src) - len(kept), max(kept, default=0)


def corpus_of(prepared: Path):
    from fairseq_posenc.tools.compare import data

    args = cli.parser().parse_args(base_args(prepared.parent / "unused", prepared))
    return data.open_prepared(prepared, cli.settings_of(args, cli.parser()), None)


def base_args(out: Path, data: Path, *extra: str) -> list[str]:
    return [str(out), "--data", str(data), "-s", SRC, "-t", TGT, "--encodings", "sinusoidal",
            "rope", "--max-update", "12", "--test", "test", "--cpu", *extra]


def run_main(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(args)
    assert stop.value.code != 0
    return str(stop.value.code) + capsys.readouterr().err


# --- the bins -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", sorted(BY_HAND))
def test_relative_bins_hold_the_sentences_a_hand_count_puts_there(n):
    tokens = [w + 1 for w in TEST_WORDS]
    bins = extrapolation_study.relative_bins(n)
    members = [[i for i, t in enumerate(tokens) if low < t <= high] for low, high in bins]
    assert members == BY_HAND[n]
    assert extrapolation_study.relative_labels() == [[0, 1], [1, 1.5], [1.5, 2], [2, 3], [3, None]]
    with pytest.raises(ValueError, match="at least 2"):
        extrapolation_study.relative_bins(1)


def test_each_bin_is_scored_as_sacrebleu_scores_its_sentences(prepared, tmp_path):
    refs = cu.read_lines(prepared / "raw" / f"test.{TGT}")
    sources = cu.read_lines(prepared / "raw" / f"test.{SRC}")
    hyps = {1: [("T1 T2 T3" if i % 3 == 0 else r) for i, r in enumerate(refs)],
            2: [(r if i % 2 else " ".join(r.split()[:2])) for i, r in enumerate(refs)]}
    hyps[1][13] = ""  # seed 1 did not translate the longest source
    results = {}
    for seed, lines in hyps.items():
        path = tmp_path / f"hyp{seed}"
        cu.write_lines(path, lines)
        results[seed] = {"hypotheses": str(path), "untranslated": [13] if seed == 1 else []}
    corpus = SimpleNamespace(source_lang=SRC, target_lang=TGT)
    got = extrapolation_study.entries(results, sources, refs, [w + 1 for w in TEST_WORDS],
                                      corpus, 10)
    assert [e["n"] for e in got] == [len(ids) for ids in BY_HAND[10]]
    assert [e["untranslated"] for e in got] == [0, 0, 0, 0, 1]
    assert got[-1]["bin"] == [3, None] and got[-1]["tokens"] == [30, None]
    for entry, ids in zip(got, BY_HAND[10]):
        bleu, chrf = [], []
        for seed, lines in hyps.items():
            kept = [i for i in ids if not (seed == 1 and i == 13)]
            h, r = [lines[i] for i in kept], [[refs[i] for i in kept]]
            bleu.append(sacrebleu.corpus_bleu(h, r).score)
            chrf.append(sacrebleu.corpus_chrf(h, r).score)
        assert entry["bleu_seeds"] == pytest.approx(bleu, abs=0.006)
        assert entry["chrf_seeds"] == pytest.approx(chrf, abs=0.006)
        assert entry["bleu"] == pytest.approx(sum(bleu) / 2, abs=0.011)
        assert entry["chrf"] == pytest.approx(sum(chrf) / 2, abs=0.011)


# --- kept and dropped ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [8, 20, 40])
def test_kept_and_dropped_pairs_are_what_a_plain_loop_counts(prepared, n):
    limit = extrapolation_study.train_limit(corpus_of(prepared), n)
    kept, dropped, longest_source = kept_by_loop(prepared / "raw", n)
    assert (limit.kept, limit.dropped, limit.longest_source) == (kept, dropped, longest_source)
    assert limit.to_json() == {"n": n, "kept": kept, "dropped": dropped}


def test_a_limit_that_keeps_fewer_than_1000_pairs_stops_before_anything(prepared, tmp_path,
                                                                         capsys):
    out = tmp_path / "cmp"
    kept, _, _ = kept_by_loop(prepared / "raw", 12)
    enough = next(n for n in range(2, 100) if kept_by_loop(prepared / "raw", n)[0] >= 1000)
    assert kept < 1000 <= TRAIN_PAIRS
    says = run_main(base_args(out, prepared, "--train-max-len", "12"), capsys)
    assert f"--train-max-len 12 keeps {kept:,} of the 1,200 training pairs" in says
    assert f"at least 1,000 are needed: raise it to {enough} or more" in says
    assert not out.exists()
    assert "at least 2" in run_main(base_args(out, prepared, "--train-max-len", "1"), capsys)


def test_a_changed_limit_is_a_settings_difference(prepared, tmp_path, capsys):
    out = tmp_path / "cmp"
    parsed = cli.parser().parse_args(base_args(out, prepared, "--train-max-len", "30"))
    settings_mod.write(out / "settings.json", cli.settings_of(parsed, cli.parser()))
    says = run_main(base_args(out, prepared, "--train-max-len", "32"), capsys)
    assert "train_max_len: 30 before, 32 now" in says and not (out / "runs").exists()
    # a settings.json written before --train-max-len existed reads as no limit
    old = json.loads((out / "settings.json").read_text())
    del old["train_max_len"]
    (out / "settings.json").write_text(json.dumps(old))
    assert settings_mod.read(out / "settings.json").train_max_len is None


# --- variants -----------------------------------------------------------------------------


def test_variant_names():
    flags = "--rope-scaling yarn --rope-scaling-factor 4"
    assert variants.parse(f"rope:{flags}") == variants.Variant(
        "rope+yarn-4", "rope", ("--rope-scaling", "yarn", "--rope-scaling-factor", "4"))
    assert variants.parse(f"y4=rope:{flags}").name == "y4"
    assert variants.parse(f"y4=rope:{flags}").test_dir("test") == "test@y4"
    for bad in ("rope", "rope:", f":{flags}", f"a/b=rope:{flags}"):
        with pytest.raises(ValueError, match="--variants"):
            variants.parse(bad)


YARN = "--rope-scaling yarn --rope-scaling-factor 4"


@pytest.mark.parametrize("extra, says", [
    (["--variants", f"alibi:{YARN}"], "alibi is not among --encodings sinusoidal rope"),
    (["--variants", f"sinusoidal:{YARN}", "--train-max-len", "30"],
     "--pos-encoding rope or xpos, and this one has --pos-encoding sinusoidal"),
    (["--variants", f"rope:{YARN}"], "--rope-scaling yarn needs the training length"),
    (["--variants", "rope:--rope-scaling linear"], "needs --rope-scaling-factor"),
    (["--variants", "rope:--rope-scaling-factr 2"], "unrecognized arguments"),
    (["--variants", "rope:--diet-abs-max-len 8"], "a flag of --pos-encoding diet_abs"),
    (["--variants", "rope:--rope-base 100"], "a training flag of --pos-encoding rope"),
    (["--variants", "rope:--gen-subset valid"], "posenc-compare sets it"),
    (["--variants", f"rope={'rope'}:{YARN}"], "the name is taken"),
    (["--variants", f"x=rope:{YARN}", f"x=rope:{YARN} --rope-scaling-original-len 9"],
     "the name is taken"),
])
def test_bad_variants_stop_before_anything(prepared, tmp_path, capsys, extra, says):
    out = tmp_path / "cmp"
    assert says in run_main(base_args(out, prepared, *extra), capsys)
    assert not out.exists()


# --- report.json and the report -----------------------------------------------------------


def test_report_json_and_the_plot(prepared, tmp_path):
    out, n = tmp_path / "cmp", 30
    args = cli.parser().parse_args(base_args(out, prepared, "--train-max-len", str(n)))
    settings = cli.settings_of(args, cli.parser())
    corpus = corpus_of(prepared)
    refs = cu.read_lines(prepared / "raw" / f"test.{TGT}")
    variant = variants.parse(f"rope:{YARN}")
    rng = random.Random(2)
    hyps = {}
    for seed in (1, 2):
        for row in ("sinusoidal", "rope", variant.name):
            hyps[row, seed] = [" ".join(w for w in r.split() if rng.random() < 0.8)
                               for r in refs]
            run = Run("rope" if row == variant.name else row, seed)
            fake_result(out, run, "test" if row != variant.name else "test@" + variant.name,
                        refs, hyps[row, seed], variant.flags if row == variant.name else ())
    limit = extrapolation_study.train_limit(corpus, n)
    built = summary.build(out, settings, corpus, ["sinusoidal", "rope"], 2, "sinusoidal",
                          ((0, 20), (20, float("inf"))), {"sinusoidal": 10, "rope": 10},
                          limit=limit, variants=[variant])
    kept, dropped, longest = kept_by_loop(prepared / "raw", n)
    assert built["train_max_len"] == {"n": n, "kept": kept, "dropped": dropped}
    assert built["train_max_source_tokens"] == longest
    assert built["variants"] == [{"name": "rope+yarn-4", "encoding": "rope",
                                  "flags": ["--rope-scaling", "yarn", "--rope-scaling-factor",
                                            "4"]}]
    rows = {r["encoding"]: r for r in built["summary"]}
    assert list(rows) == ["sinusoidal", "rope", "rope+yarn-4"]
    assert rows["rope+yarn-4"]["variant"] == built["variants"][0]
    assert rows["rope+yarn-4"]["n"] == 2 and rows["rope+yarn-4"]["p_value"] is not None
    # N = 30: tokens 2 .. 30 in (0, 30], 31 and 41 in (30, 45], 61 in (60, 90]
    by_hand = [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [11, 12], [], [13], []]
    for name, row in rows.items():
        assert [e["bin"] for e in row["extrapolation"]] == [[0, 1], [1, 1.5], [1.5, 2], [2, 3],
                                                            [3, None]]
        assert [e["n"] for e in row["extrapolation"]] == [len(ids) for ids in by_hand]
        assert all(e["few"] for e in row["extrapolation"])  # 14 sentences in all
        for entry, ids in zip(row["extrapolation"], by_hand):
            if not ids:
                assert entry["bleu"] is None and entry["bleu_seeds"] == [None, None]
                continue
            per_seed = [sacrebleu.corpus_bleu([hyps[name, s][i] for i in ids],
                                              [[refs[i] for i in ids]]).score for s in (1, 2)]
            assert entry["bleu"] == pytest.approx(sum(per_seed) / 2, abs=0.011)
    # a variant's translation with other flags is not its result
    assert variant.result(Run("rope", 1), out, "test") is not None
    assert variants.parse("rope:--rope-scaling yarn --rope-scaling-factor 2").result(
        Run("rope", 1), out, "test") is None

    report_mod.write(built, out, {})
    assert (out / "report" / "extrapolation-test.png").stat().st_size > 10_000
    md = (out / "report.md").read_text()
    assert f"By source length relative to the training limit N = {n}" in md
    assert "| (0, 1] n=11 few | (1, 1.5] n=2 few |" in md
    assert f"{kept:,} of {TRAIN_PAIRS:,} training pairs kept, {dropped:,} dropped" in md
    assert "`rope+yarn-4` = `rope` with `--rope-scaling yarn --rope-scaling-factor 4`" in md
    assert "![test: BLEU and chrF by source length over N](report/extrapolation-test.png)" in md
    page = (out / "report" / "index.html").read_text()
    assert page.count('src="data:image/png;base64,') == 3  # lengths, extrapolation_study, loss

    # without --train-max-len: no relative bins
    plain = summary.build(out, cli.settings_of(cli.parser().parse_args(
        base_args(out, prepared)), cli.parser()), corpus, ["sinusoidal", "rope"], 2,
        "sinusoidal", ((0, 20), (20, float("inf"))), {"sinusoidal": 10, "rope": 10})
    assert plain["train_max_len"] is None and plain["variants"] == []
    assert all(r["extrapolation"] is None for r in plain["summary"])


# --- end to end ---------------------------------------------------------------------------


@pytest.mark.slow  # a comparison end to end: data, training, translation with a variant
def test_a_comparison_with_a_limit_and_a_rope_variant(tmp_path):
    """Its rows: rope, and a labelled pair with an option of rope (compare/encoding_rows.py:
    t5 in the encoder, rope with base 100 in the decoder; one row for both kinds, CI's time), each
    trained and reported under its label; the rerun's variant is the pair's (its decoder's
    rotation scaled)."""
    raw, out, n = tmp_path / "raw", tmp_path / "cmp", 54
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_toy_corpus.py"), "--out",
                    str(raw), "--seed", "3", "--train", "1300", "--valid", "20", "--test",
                    "10", "--test-long", "4", "--long-min-len", "40", "--long-max-len", "50"],
                   check=True, capture_output=True)
    command = [sys.executable, "-m", "fairseq_posenc.tools.compare", str(out), "--data", str(raw),
               "-s", "en", "-t", "de", "--encodings", "rope",
               "tr=t5/rope:--rope-base 100", "--max-update", "6",
               "--test", "test", "test_long", "--cpu", "--bpe-merges", "100",
               "--workers", "1", "--train-max-len", str(n),
               "--variants", "rope:--rope-scaling yarn --rope-scaling-factor 4"]
    done = subprocess.run(command, capture_output=True, text=True, env=cu.subprocess_env(),
                          timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads((out / "report.json").read_text())

    # kept and dropped: the pairs fairseq's own size filter skipped, as its log says
    log = (out / "runs" / "rope" / "seed1" / "train.log").read_text()
    skipped = re.search(r"([\d,]+) samples have invalid sizes and will be skipped", log)
    assert skipped, "fairseq skipped no training pair"
    assert report["train_max_len"] == {"n": n, "kept": 1300 - int(skipped.group(1).replace(
        ",", "")), "dropped": int(skipped.group(1).replace(",", ""))}
    assert "'_name': 'translation_extrapolation'" in log and f"'train_max_len': {n}" in log

    rows = {(r["split"], r["encoding"]): r for r in report["summary"]}
    labels = ("rope", "tr", "rope+yarn-4")
    assert set(rows) == {(s, e) for s in ("test", "test_long") for e in labels}
    for row in rows.values():
        assert [e["bin"] for e in row["extrapolation"]] == [[0, 1], [1, 1.5], [1.5, 2], [2, 3],
                                                            [3, None]]
        assert sum(e["n"] for e in row["extrapolation"]) == row["sentences"]
    variant = rows["test_long", "rope+yarn-4"]
    assert variant["n"] == 1 and variant["p_value"] is not None
    generated = out / "runs" / "rope" / "seed1" / "tests" / "test_long@rope+yarn-4"
    assert (f"--rope-scaling yarn: training length {n}, the checkpoint's --train-max-len"
            in (generated / "generate.log").read_text())
    assert json.loads((generated / "result.json").read_text())["flags"] == [
        "--rope-scaling", "yarn", "--rope-scaling-factor", "4"]
    for split in ("test", "test_long"):
        assert (out / "report" / f"extrapolation-{split}.png").is_file()
    assert "report: relative length bins scored in" in done.stderr
    assert "report: extrapolation plots drawn in" in done.stderr

    # the rows: what each trained (fairseq's log of its arguments), recorded and reported
    assert report["rows"] == {
        "rope": {"encoder": "rope", "decoder": "rope", "flags": []},
        "tr": {"encoder": "t5", "decoder": "rope", "flags": ["--rope-base", "100"]}}
    pair_log = (out / "runs" / "tr" / "seed1" / "train.log").read_text()
    assert all(f in pair_log for f in ("arch='transformer_tiny_t5'", "encoder_pos_encoding='t5'",
                                       "decoder_pos_encoding='rope'", "rope_base=100.0"))
    # parameters: T5's table (heads x buckets) in the encoder alone; rope has none
    assert rows["test", "tr"]["params_added"] == 4 * 32
    assert ("`tr`: t5 (encoder) / rope (decoder), `--rope-base 100`"
            in (out / "report.md").read_text())

    # a variant added on a rerun, of the pair: only its translations are made
    before = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*") if p.is_file()}
    again = subprocess.run([*command,
                            "ntk2=tr:--rope-scaling ntk --rope-scaling-factor 2"],
                           capture_output=True, text=True, env=cu.subprocess_env(), timeout=600)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "rope seed 1: finished before, kept" in again.stderr
    assert {p: p.stat().st_mtime_ns for p in before} == before
    new = {p.parent.name for p in (out / "runs").rglob("result.json") if p not in before}
    assert new == {"test@ntk2", "test_long@ntk2"}
    report = json.loads((out / "report.json").read_text())
    assert [r["encoding"] for r in report["summary"] if r["split"] == "test"] == [
        "rope", "tr", "rope+yarn-4", "ntk2"]
    assert {p.parent.parent.parent.parent.name for p in (out / "runs").rglob("result.json")
            if p.parent.name == "test@ntk2"} == {"tr"}
