"""examples/wmt/reproduce.py: the papers' recipes, scoring, tables, and the smoke mode that
runs the whole chain (prepare, train, translate, score, tabulate) offline on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fairseq_posenc.tools.wmt import evaluate, execute, paper_tables, recipes, reproduce
from fairseq_posenc.tools.wmt import runs as wmt_runs

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def flag(args, name):
    return args[args.index(name) + 1]


@pytest.mark.parametrize("gpus,max_tokens,freq", [(1, 4096, 7), (8, 4096, 1), (4, 3125, 2)])
def test_update_freq_reaches_the_papers_batch(gpus, max_tokens, freq):
    scale = wmt_runs.Scale(gpus=gpus, max_tokens=max_tokens)
    assert wmt_runs.update_freq(recipes.AT5, scale) == freq  # 25000 tokens per update
    assert freq * gpus * max_tokens >= 25000 > (freq - 1) * gpus * max_tokens


def test_training_flags_follow_each_paper():
    [run] = wmt_runs.select("at5", "T5", "2016")
    args = wmt_runs.train_args(run, Path("D"), Path("W"), wmt_runs.Scale(gpus=2))
    assert flag(args, "--arch") == "transformer_wmt_en_de_t5"
    assert {"--encoder-normalize-before", "--decoder-normalize-before"} <= set(args)
    assert flag(args, "--max-source-positions") == flag(args, "--max-target-positions") == "256"
    assert (flag(args, "--t5-num-buckets"), flag(args, "--pos-layers")) == ("64", "first")
    assert (flag(args, "--label-smoothing"), flag(args, "--distributed-world-size")) == ("0.1", "2")
    assert args[0] == str(Path("D") / "wmt17_en_de" / "bin")

    [run] = wmt_runs.select("diet", "DIET-REL", "CS-EN")
    args = wmt_runs.train_args(run, Path("D"), Path("W"), wmt_runs.Scale())
    assert (flag(args, "--source-lang"), flag(args, "--target-lang")) == ("cs", "en")
    assert flag(args, "--max-update") == "250000" and "--save-interval-updates" not in args

    [run] = wmt_runs.select("chen2021a", "sinusoidal", "EN-DE")  # averages the last 5
    args = wmt_runs.train_args(run, Path("D"), Path("W"), wmt_runs.Scale())
    assert flag(args, "--keep-interval-updates") == "5"


@pytest.mark.parametrize("gpus", [1, 8])
def test_world_size_is_the_one_the_update_frequency_was_computed_for(gpus):
    """Without --distributed-world-size fairseq trains on every visible GPU: with --gpus 1
    on an 8-GPU node that is 8 x 4096 x 7 tokens per update instead of the paper's 25k."""
    [run] = wmt_runs.select("at5", "T5", "2016")
    scale = wmt_runs.Scale(gpus=gpus)
    args = wmt_runs.train_args(run, Path("D"), Path("W"), scale)
    world = int(flag(args, "--distributed-world-size"))
    assert world == gpus
    assert world * scale.max_tokens * int(flag(args, "--update-freq")) < 2 * 25000


def test_at5_evaluates_the_checkpoint_best_on_its_validation_set(tmp_path):
    """AT5 validates on newstest2014 (the wmt17 dataset's valid split): the checkpoint
    chosen on it, fairseq's checkpoint_best.pt, not the last one."""
    [run] = wmt_runs.select("at5", "AT5", "2015")
    save = run.save_dir(tmp_path)
    save.mkdir(parents=True)
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        (save / name).write_bytes(b"")
    assert execute.final_checkpoint(run, tmp_path) == save / "checkpoint_best.pt"
    [run] = wmt_runs.select("diet", "DIET-REL", "EN-DE")  # DIET: the last one
    save = run.save_dir(tmp_path)
    save.mkdir(parents=True)
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        (save / name).write_bytes(b"")
    assert execute.final_checkpoint(run, tmp_path) == save / "checkpoint_last.pt"


def test_tensor2tensor_papers_train_with_its_transformer_base():
    """Chen 2021a and DIET ran tensor2tensor's transformer_base (v3): pre-norm, 8000 warmup
    updates to 9.88e-4, Adam beta2 0.997, attention and ReLU dropout 0.1."""
    for paper, row, column in (("chen2021a", "REL-SCALAR", "EN-DE"), ("diet", "Shaw", "EN-CS")):
        [run] = wmt_runs.select(paper, row, column)
        args = wmt_runs.train_args(run, Path("D"), Path("W"), wmt_runs.Scale())
        assert {"--encoder-normalize-before", "--decoder-normalize-before"} <= set(args)
        assert (flag(args, "--warmup-updates"), flag(args, "--lr")) == ("8000", "9.88e-4")
        assert abs(2.0 * 512 ** -0.5 * 8000 ** -0.5 - float(flag(args, "--lr"))) < 1e-6
        assert flag(args, "--adam-betas") == "(0.9, 0.997)"
        assert flag(args, "--attention-dropout") == flag(args, "--activation-dropout") == "0.1"
    [run] = wmt_runs.select("at5", "AT5", "2015")  # THUMT: not stated, Vaswani's base
    args = wmt_runs.train_args(run, Path("D"), Path("W"), wmt_runs.Scale())
    assert (flag(args, "--warmup-updates"), flag(args, "--adam-betas")) == ("4000", "(0.9, 0.98)")


def test_alternative_schedule_for_chen2021a_only():
    [run] = wmt_runs.select("chen2021a", "REL-SCALAR", "EN-DE", alternative_schedule=True)
    args = wmt_runs.train_args(run, Path("D"), Path("W"), wmt_runs.Scale())
    assert flag(args, "--max-update") == "250000" and "--keep-interval-updates" not in args
    with pytest.raises(SystemExit, match="states its training length"):
        wmt_runs.select("diet", alternative_schedule=True)


def test_papers_decode_with_gnmts_length_penalty():
    """tensor2tensor (Chen 2021a, DIET) and THUMT (AT5) normalize by ((5 + L) / 6)^alpha:
    fairseq-generate runs the translation_gnmt task; the table says so."""
    for paper in ("chen2021a", "diet", "at5"):
        run = wmt_runs.select(paper)[0]
        args = wmt_runs.generate_args(run, Path("D"), Path("c.pt"), "test", Path("R"),
                                       "subword-nmt")
        assert flag(args, "--task") == "translation_gnmt" and flag(args, "--lenpen") == "0.6"
    assert "Decoding: beam 10, GNMT length penalty ((5 + L) / 6)^0.6." in paper_tables.table(
        Path("/nonexistent"), ["diet"])


def test_table_lists_every_setting_that_differs_from_the_paper(tmp_path):
    text = paper_tables.table(tmp_path, ["chen2021a", "at5"])
    for paper in (recipes.CHEN2021A, recipes.AT5):
        for difference in paper.differences:
            assert f"- {difference}" in text
    assert "--alternative-schedule" in text


def test_seeds_train_apart_and_the_table_shows_mean_and_deviation(tmp_path):
    """AT5 reports mean +- standard deviation over runs: --seeds N trains seeds 1..N of
    every cell (seed 1 where it always was) and the table aggregates them."""
    runs = wmt_runs.select("at5", "AT5", "2015", seeds=3)
    assert [r.seed for r in runs] == [1, 2, 3] and len(wmt_runs.trainings(runs)) == 3
    args = wmt_runs.train_args(runs[1], Path("D"), Path("W"), wmt_runs.Scale())
    assert flag(args, "--seed") == "2" and flag(args, "--save-dir").endswith("en-de.seed2")
    assert runs[0].result_path(tmp_path).name == "newstest2015.json"
    for run, bleu in zip(runs, (29.0, 30.0, 31.0)):
        evaluate.write_json(run.result_path(tmp_path), {"bleu": bleu, "signature": "s"})
    text = paper_tables.table(tmp_path, ["at5"])
    assert "| AT5 (`at5`) | 28.34 / - / - | 30.18 / 30.00 ± 1.00 (n=3) / -0.18 |" in text


def test_at5_years_share_one_training():
    runs = wmt_runs.select("at5")
    assert len(runs) == 16 and len(wmt_runs.trainings(runs)) == 4


def test_generation_translates_everything_with_the_papers_beam():
    [run] = wmt_runs.select("diet", "Vaswani", "EN-DE")
    args = wmt_runs.generate_args(run, Path("D"), Path("c.pt"), "test1", Path("R"), "subword-nmt")
    assert (flag(args, "--beam"), flag(args, "--lenpen")) == ("10", "0.6")
    assert flag(args, "--required-batch-size-multiple") == "1" and "--remove-bpe" in args


def test_smoke_caps_outputs_unless_the_decoders_table_caps_them_tighter():
    """The smoke mode's untrained models never end a sentence: its scale caps their
    outputs (fairseq's argparse reads the last of a repeated flag); a decoder's shorter
    table keeps its own cap; the papers' decoding has none."""
    from fairseq_posenc.plugin.extrapolation import LengthLimits, Untranslatable

    def max_len_b(scale, target_positions=None):
        limits = None if target_positions is None else Untranslatable(
            LengthLimits(256, target_positions, "--src-flag", "--tgt-flag"), frozenset())
        args = wmt_runs.generate_args(run, Path("D"), Path("c.pt"), "test1", Path("R"),
                                      "subword-nmt", limits, scale)
        values = [args[i + 1] for i, a in enumerate(args) if a == "--max-len-b"]
        return values[-1] if values else None

    [run] = wmt_runs.select("diet", "Vaswani", "EN-DE")
    smoke = wmt_runs.Scale(max_output=64)
    assert max_len_b(wmt_runs.Scale()) is None
    assert max_len_b(smoke) == "64"
    assert max_len_b(smoke, target_positions=64) == "63"  # the table's cap, tighter
    assert max_len_b(smoke, target_positions=100) == "64"
    assert max_len_b(wmt_runs.Scale(), target_positions=100) == "99"


def test_missing_hypotheses_are_an_error(tmp_path):
    out = tmp_path / "generate-test.txt"
    out.write_text("S-0\ta\nH-0\t-0.1\tx y\nH-2\t-0.3\tz\n")
    with pytest.raises(SystemExit, match="2 hypotheses for 3 test sentences"):
        evaluate.hypotheses(out, 3)
    out.write_text("H-1\t-0.2\tsecond\nS-0\ta\nH-0\t-0.1\tfirst\n")
    assert evaluate.hypotheses(out, 2) == ["first", "second"]  # sorted by id


@pytest.mark.slow  # two interpreters importing fairseq
def test_the_demo_reads_hypotheses_the_same_way(tmp_path):
    """scripts/demo.sh collects hypotheses with ``python -m fairseq_posenc.tools.hypotheses``: the
    same lines in the same order, and the same error for a missing one."""
    import subprocess
    import sys

    out = tmp_path / "generate.log"
    out.write_text("H-1\t-0.2\tsecond\nS-0\ta\nH-0\t-0.1\tfirst\n")
    done = subprocess.run([sys.executable, "-m", "fairseq_posenc.tools.hypotheses", str(out),
                           "--expected", "2"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "first\nsecond\n"
    done = subprocess.run([sys.executable, "-m", "fairseq_posenc.tools.hypotheses", str(out),
                           "--expected", "3"], capture_output=True, text=True)
    assert done.returncode == 1 and "2 hypotheses for 3 test sentences" in done.stderr


def test_metrics_as_each_paper_reports_them():
    hyps, refs = ["The cat sat on the mat ."], ["the cat sat on the mat."]
    cased, sig_cased = evaluate.score(hyps, refs, "cased", "en")
    uncased, sig_uncased = evaluate.score(hyps, refs, "uncased", "en")
    assert uncased.score > cased.score and "case:lc" in sig_uncased and "case:mixed" in sig_cased
    # Chen 2021a's uncased BLEU is tensor2tensor's t2t-bleu: international tokenization,
    # which splits punctuation off numbers ("1,5%" -> "1,5 %") where 13a does not
    assert "tok:intl" in sig_uncased and "tok:13a" in sig_cased
    t2t, _ = evaluate.score(["Es stieg um 1,5 %."], ["Es stieg um 1,5%."], "uncased", "de")
    assert t2t.score == pytest.approx(100.0)
    # tokenized BLEU: Moses tokens on both sides, no further tokenization (multi-bleu.perl)
    tok, sig_tok = evaluate.score(["Das ist gut, oder?"], ["Das ist gut , oder ?"],
                                   "tokenized", "de")
    assert tok.score == pytest.approx(100.0) and "tok:none" in sig_tok


def test_table_prints_paper_ours_and_difference(tmp_path):
    [run] = wmt_runs.select("diet", "DIET-REL", "EN-CS")
    evaluate.write_json(run.result_path(tmp_path), {"bleu": 19.0, "signature": "nrefs:1|x"})
    text = paper_tables.table(tmp_path, ["diet"])
    assert "| DIET-REL (`diet_rel`) | 39.47 / - / - | 38.49 / - / - | 18.68 / 19.00 / +0.32 |" in text
    assert "sacreBLEU: `nrefs:1|x`" in text


def test_table_says_which_training_corpora_each_cell_used(tmp_path):
    """Chen 2021a's EN-CS (tensor2tensor's translate_encs_wmt32k) trained with CzEng 1.6:
    a run without it is marked as not comparable; DIET's corpora are the paper's list."""
    [run] = wmt_runs.select("chen2021a", "REL-SCALAR", "EN-CS")
    evaluate.write_json(run.result_path(tmp_path), {
        "bleu": 20.0, "signature": "s", "train_corpora": ["europarl_v7", "commoncrawl", "nc_v13"]})
    text = paper_tables.table(tmp_path, ["chen2021a"])
    assert ("EN-CS training data: the paper's europarl_v7, commoncrawl, nc_v13, czeng_1.6; "
            "ours europarl_v7, commoncrawl, nc_v13 -- different data: not comparable") in text
    [run] = wmt_runs.select("diet", "DIET-REL", "CS-EN")
    evaluate.write_json(run.result_path(tmp_path), {
        "bleu": 20.0, "signature": "s", "train_corpora": ["europarl_v7", "commoncrawl", "nc_v13"]})
    text = paper_tables.table(tmp_path, ["diet"])
    assert "CS-EN training data: the paper's europarl_v7, commoncrawl, nc_v13; ours " in text
    assert "not comparable" not in text


def test_average_checkpoints(tmp_path):
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"c{i}.pt")
        torch.save({"model": {"w": torch.full((2,), float(i)), "n": torch.tensor([i])},
                    "extra": i}, paths[-1])
    out = execute.average_checkpoints(paths, tmp_path / "avg.pt")
    state = torch.load(out)
    assert state["model"]["w"].tolist() == [1.0, 1.0]
    assert state["model"]["n"].tolist() == [2] and state["extra"] == 2  # non-float: last


@pytest.mark.slow  # the whole chain: prepare, train, translate, score, tabulate
def test_smoke_mode_runs_every_table(tmp_path):
    """prepare (offline archives) -> train a tiny model per table row and dataset direction
    -> fairseq-generate every test set -> sacreBLEU -> the three tables."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        text = reproduce.smoke(tmp_path, list(recipes.PAPERS))
    finally:
        torch.set_num_threads(saved)
    for paper in recipes.PAPERS.values():
        assert paper.title in text
        for row in paper.rows:
            for col in paper.columns:
                result = json.loads(wmt_runs.Run(paper, row, col).result_path(tmp_path)
                                    .read_text())
                assert 0.0 <= result["bleu"] <= 100.0 and result["sentences"] > 0
                assert result["signature"].startswith("nrefs:1|")
                # the checkpoint each paper evaluates: AT5 the best on its validation
                # set, DIET the last; Chen 2021a averages interval checkpoints, which 2
                # updates that each end an epoch do not write (then: the last, warned)
                checkpoint = Path(result["checkpoint"]).name
                assert checkpoint == {"at5": "checkpoint_best.pt", "diet": "checkpoint_last.pt",
                                      "chen2021a": "checkpoint_last.pt",
                                      "extrapolation": "checkpoint_last.pt"}[paper.key]
                # the evidence: chrF, the hypotheses kept for the bootstrap, the buckets
                assert 0.0 <= result["chrf"] <= 100.0
                hyps = Path(result["hypotheses"]).read_text().splitlines()
                assert len(hyps) == result["sentences"]  # untranslated ones empty
                assert sum(b["sentences"] for b in result["buckets"]) == result["sentences"]
        assert (tmp_path / "results" / paper.key / "buckets.png").exists()
    assert " / - / -" not in text  # every cell has our number
    assert text.count("How to read:") == len(recipes.PAPERS)
    assert "| DIET-REL (`diet_rel`) | 39.47 / " in text and "; p " in text


# --- evidence: chrF, significance, length buckets, extrapolation ----------------------


def write_result(run, work: Path, hyps, refs, bleu, chrf, seed=1) -> None:
    """A result as evaluate() writes it, with its hypotheses on disk."""
    suffix = "" if seed == 1 else f".seed{seed}"
    hyp_path = run.result_path(work).parent / f"{run.column.testset}{suffix}.hyp.de"
    hyp_path.parent.mkdir(parents=True, exist_ok=True)
    hyp_path.write_text("".join(h + "\n" for h in hyps))
    ref_path = work / "refs.de"
    ref_path.write_text("".join(r + "\n" for r in refs))
    path = run.result_path(work).with_name(f"{run.column.testset}{suffix}.json")
    evaluate.write_json(path, {
        "bleu": bleu, "chrf": chrf, "signature": "s", "metric": "tokenized", "pair": "en-de",
        "seed": seed, "hypotheses": str(hyp_path), "references": str(ref_path)})


def test_table_shows_chrf_and_the_paired_bootstrap_against_the_baseline_row(tmp_path):
    """AT5's baseline is T5 (the paper's comparison); each other row's cell gets chrF and
    sacreBLEU's paired-bootstrap p of its hypotheses against T5's, on the same sentences."""
    from fairseq_posenc.tools.evaluation import paired_bootstrap

    assert recipes.PAPERS["at5"].baseline_row.label == "T5"
    assert recipes.PAPERS["diet"].baseline_row.label == "Vaswani"
    refs = [f"das ist satz nummer {i} mit einigen worten ." for i in range(150)]
    t5 = [r.replace("einigen ", "") if i % 2 else r for i, r in enumerate(refs)]
    at5 = [r.replace("mit einigen worten ", "") for r in refs]
    [t5_run] = wmt_runs.select("at5", "T5", "2015")
    [at5_run] = wmt_runs.select("at5", "AT5", "2015")
    write_result(t5_run, tmp_path, t5, refs, 30.0, 55.0)
    write_result(at5_run, tmp_path, at5, refs, 31.0, 56.5)
    text = paper_tables.table(tmp_path, ["at5"])
    bleu_test, _ = paired_bootstrap(t5, at5, refs, "tokenized", "de")
    mark = "*" if bleu_test.significant else ""
    assert f"| AT5 (`at5`) | 28.34 / - / - | 30.18 / 31.00 / +0.82; chrF 56.50; p {bleu_test.p_value:.3f}{mark} |" in text
    assert "| T5 (`t5`) | 28.15 / - / - | 30.05 / 30.00 / -0.05; chrF 55.00 |" in text
    assert "against the baseline row (T5)" in text and "standard deviation" in text
    # several seeds: mean +- std for BLEU and chrF, the largest p over the seed pairs
    write_result(t5_run, tmp_path, at5, refs, 31.0, 56.0, seed=2)
    write_result(at5_run, tmp_path, at5, refs, 31.0, 57.5, seed=2)
    text = paper_tables.table(tmp_path, ["at5"])
    equal, _ = paired_bootstrap(at5, at5, refs, "tokenized", "de")
    p = max(bleu_test.p_value, equal.p_value)
    assert (f"30.18 / 31.00 ± 0.00 (n=2) / +0.82; chrF 57.00 ± 0.71 (n=2); p {p:.3f} |"
            in text)  # seed 2 is a tie: never marked


def test_table_lists_bleu_and_chrf_by_source_length_and_plots_them(tmp_path):
    from fairseq_posenc.tools.evaluation import BucketScore

    for label, bleu in (("Vaswani", 20.0), ("ALiBi", 25.0)):
        [run] = wmt_runs.select("extrapolation", label)
        buckets = [BucketScore("(0, 20]", 5, 0, bleu, 50.0),
                   BucketScore("(20, 40]", 3, 1, bleu - 5, 40.0)]
        evaluate.write_json(run.result_path(tmp_path), {
            "bleu": bleu, "signature": "s", "notes": [f"{label}: a note"],
            "buckets": [b.__dict__ for b in buckets]})
    text = paper_tables.table(tmp_path, ["extrapolation"])
    assert "| model | 2017 ours |" in text  # no paper numbers: ours only
    assert "| ALiBi (`alibi`) | 25.00 |" in text and "| RoPE (`rope`) | - |" in text
    assert "| source length | (0, 20] n=5 few | (20, 40] n=3 few |" in text
    assert "`few`: fewer than 30 sentences in the bin" in text
    assert "| ALiBi | 25.00 / 50.00 | 20.00 / 40.00 (1 untranslated) |" in text
    assert "- ALiBi: a note" in text
    png = tmp_path / "results" / "extrapolation" / "buckets.png"
    assert f"Plot: `{png}`" in text and png.read_bytes()[:4] == b"\x89PNG"


def test_extrapolation_trains_short_with_the_papers_settings():
    [run] = wmt_runs.select("extrapolation", "DIET-ABS, 64 positions")
    args = wmt_runs.train_args(run, Path("D"), Path("W"), wmt_runs.Scale())
    assert flag(args, "--task") == "translation_extrapolation"
    assert flag(args, "--train-max-len") == "50" and flag(args, "--diet-abs-max-len") == "64"
    [other] = wmt_runs.select("at5", "AT5", "2015")
    assert flag(wmt_runs.train_args(other, Path("D"), Path("W"), wmt_runs.Scale()),
                "--task") == "translation"


def test_table_scripts_are_the_recipes(tmp_path):
    """examples/wmt/PAPER_table.sh are generated from the recipes; a script that drifts
    from them (a recipe changed, the script not regenerated) fails here."""
    import subprocess

    from fairseq_posenc.tools.wmt import table_scripts

    examples = Path(__file__).resolve().parents[2] / "examples" / "wmt"
    for fresh in table_scripts.write_scripts(tmp_path):
        checked_in = examples / fresh.name
        assert checked_in.exists() and checked_in.read_text() == fresh.read_text(), (
            f"{checked_in} differs from the recipes: run "
            "`posenc-reproduce scripts --out examples/wmt`")
        subprocess.run(["bash", "-n", str(checked_in)], check=True)  # valid bash
    diet = (examples / "diet_table.sh").read_text()
    for flag_ in ("--arch transformer_wmt_en_de_diet_rel", "--max-update 250000",
                  "--lr 9.88e-4", "--task translation_gnmt", "--gen-subset test",
                  '--save-dir "$WORK/checkpoints/diet/diet_rel/wmt18_en_de.en-de$SUFFIX"'):
        assert flag_ in diet
    assert '"$DATA/wmt17_en_de/bin"' in (examples / "at5_table.sh").read_text()
    assert "--gen-subset test3" in (examples / "at5_table.sh").read_text()  # newstest2017


def test_a_table_script_runs_the_recipes_commands_for_every_seed(tmp_path):
    """Run at5_table.sh --seeds 2 with the tools replaced by shell functions that print
    their arguments: its fairseq-train commands are the recipe's (train_args) for seeds 1
    and 2, and evaluation covers both seeds."""
    import subprocess

    script = Path(__file__).resolve().parents[2] / "examples" / "wmt" / "at5_table.sh"
    stubs = ('fairseq-train() { echo "TRAIN $*"; }; posenc-prepare-wmt() { :; }; '
             'posenc-reproduce() { echo "REPRODUCE $*"; }; python() { echo /U; }; ')
    done = subprocess.run(["bash", "-c", stubs + f'source "{script}" --seeds 2'],
                          capture_output=True, text=True, check=True, cwd=tmp_path)
    printed = [line for line in done.stdout.splitlines() if line.startswith("TRAIN ")]
    runs = wmt_runs.trainings(wmt_runs.select("at5", seeds=2))
    expected = []
    for run in runs:
        args = wmt_runs.train_args(run, Path("data/wmt"), Path("work/wmt"), wmt_runs.Scale())
        args[args.index("--user-dir") + 1] = "/U"
        expected.append("TRAIN " + " ".join(args))
    assert sorted(printed) == sorted(expected) and len(printed) == 8
    assert "REPRODUCE evaluate --paper at5 --data data/wmt --work work/wmt --seeds 2" in done.stdout
    bad = subprocess.run(["bash", str(script), "--bogus"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage:" in bad.stderr
