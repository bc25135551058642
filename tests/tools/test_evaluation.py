"""fairseq_posenc.tools.evaluation and ``posenc-score``: chrF, the paired bootstrap, length buckets.

The references are sacreBLEU's own command line (a separate process reading the same
files) and sacreBLEU's corpus scores of sentence subsets chosen by a plain loop here.
"""

from __future__ import annotations

import json
import random
import subprocess

import pytest
import sacrebleu

from tests.support.cli_utils import console_script, run_script, subprocess_env, write_lines
from fairseq_posenc.tools.evaluation import (
    ALPHA, AT5_BINS, BucketScore, bins_from_edges, bucket_table, by_length, paired_bootstrap,
    score)
from fairseq_posenc.tools.evaluation.cli import main as score_main

WORDS = "the a cat dog house tree sees finds big small red old runs sleeps".split()


def corpus(n: int, seed: int, lengths=(3, 30)) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(*lengths))) + " ."
            for _ in range(n)]


def noisy(refs: list[str], rate: float, seed: int) -> list[str]:
    """Each word dropped with probability ``rate``: a worse system for a larger rate."""
    rng = random.Random(seed)
    return [" ".join(w for w in r.split() if rng.random() >= rate) for r in refs]


def near_misses(refs: list[str], rate: float, seed: int) -> tuple[list[str], list[str]]:
    """Two systems that miss the same words: one writes a word nowhere in the references,
    the other a one-letter typo of the right word. Their BLEU is equal (the same word
    n-grams match), their chrF is not (the typos keep most character n-grams)."""
    rng = random.Random(seed)
    wrong, typo = [], []
    for r in refs:
        miss = [w != "." and rng.random() < rate for w in r.split()]
        wrong.append(" ".join("zz" if m else w for m, w in zip(miss, r.split())))
        typo.append(" ".join(w[:-1] + "q" if m else w for m, w in zip(miss, r.split())))
    return wrong, typo


def sacrebleu_cli(args: list[str]) -> object:
    out = subprocess.run([console_script("sacrebleu"), *args], capture_output=True, text=True,
                         check=True, env=subprocess_env())
    return json.loads(out.stdout)


def test_chrf_beside_bleu_equals_sacrebleus_command_line(tmp_path):
    refs, hyps = corpus(60, 1), None
    hyps = noisy(refs, 0.2, 2)
    write_lines(tmp_path / "ref.de", refs)
    write_lines(tmp_path / "hyp.de", hyps)
    scored = score(hyps, refs, "cased", "de")
    cli = sacrebleu_cli([str(tmp_path / "ref.de"), "-i", str(tmp_path / "hyp.de"),
                         "-m", "bleu", "chrf", "-w", "6"])
    assert scored.bleu == pytest.approx(cli[0]["score"], abs=1e-6)
    assert scored.chrf == pytest.approx(cli[1]["score"], abs=1e-6)
    assert scored.chrf_signature.startswith("nrefs:1|case:mixed") and scored.sentences == 60
    # uncased BLEU (t2t-bleu) lowercases chrF as well
    upper = [h.upper() for h in hyps]
    assert score(upper, refs, "uncased", "de").chrf == pytest.approx(scored.chrf)
    assert score(upper, refs, "cased", "de").chrf < scored.chrf


def test_paired_bootstrap_is_sacrebleus(tmp_path):
    """The p-values are those of ``sacrebleu REF -i BASELINE SYSTEM --paired-bs`` (1000
    resamples, sacreBLEU's seed), for BLEU and chrF."""
    refs = corpus(200, 3)
    base, system = noisy(refs, 0.30, 4), noisy(refs, 0.25, 5)
    for name, lines in (("ref", refs), ("base", base), ("sys", system)):
        write_lines(tmp_path / f"{name}.de", lines)
    bleu_test, chrf_test = paired_bootstrap(base, system, refs, "cased", "de")
    cli = sacrebleu_cli([str(tmp_path / "ref.de"), "-i", str(tmp_path / "base.de"),
                         str(tmp_path / "sys.de"), "--paired-bs", "-m", "bleu", "chrf"])
    expected = cli[1]  # the system's entry; the first is the baseline's
    assert bleu_test.p_value == pytest.approx(expected["BLEU"]["p_value"])
    assert chrf_test.p_value == pytest.approx(expected["chrF2"]["p_value"])
    assert bleu_test.system == pytest.approx(expected["BLEU"]["score"])


def test_significance_marks_a_real_difference_only():
    refs = corpus(300, 6)
    base = noisy(refs, 0.3, 7)
    better = noisy(refs, 0.05, 8)
    same_quality = noisy(refs, 0.3, 9)
    bleu_better, chrf_better = paired_bootstrap(base, better, refs, "cased", "de")
    assert bleu_better.significant and chrf_better.significant
    assert bleu_better.system > bleu_better.baseline
    bleu_same, _ = paired_bootstrap(base, same_quality, refs, "cased", "de")
    assert not bleu_same.significant and bleu_same.p_value > 0.05
    # equal scores: sacreBLEU's strict count gives p = 1/1001, never marked significant
    bleu_equal, _ = paired_bootstrap(base, list(base), refs, "cased", "de")
    assert bleu_equal.system == bleu_equal.baseline and not bleu_equal.significant
    with pytest.raises(ValueError, match="one hypothesis per reference"):
        paired_bootstrap(base[:-1], better, refs, "cased", "de")


def test_length_buckets_score_each_bin_as_its_own_corpus():
    """AT5's bins by Moses tokens of the source; each bin's BLEU and chrF are sacreBLEU's
    corpus scores of the sentences a plain loop puts in it; untranslated sentences are
    counted, not scored; the (120, inf) bin appears only when used."""
    rng = random.Random(10)
    lengths = [rng.choice([5, 20, 21, 39, 45, 119, 125]) for _ in range(80)]
    sources = [" ".join(["w"] * (n - 1)) + " ." for n in lengths]  # n Moses tokens
    refs = corpus(80, 11)
    hyps = noisy(refs, 0.2, 12)
    untranslated = [i % 9 == 0 for i in range(80)]
    hyps = ["" if u else h for h, u in zip(hyps, untranslated)]
    buckets = by_length(sources, hyps, refs, "cased", "en", "de", untranslated=untranslated,
                        bins=AT5_BINS)
    labels = ["(0, 20]", "(20, 40]", "(40, 60]", "(60, 80]", "(80, 100]", "(100, 120]",
              "(120, inf)"]
    assert [b.label for b in buckets] == labels
    edges = [*AT5_BINS, (120, 10**9)]
    for bucket, (low, high) in zip(buckets, edges):
        members = [i for i, n in enumerate(lengths) if low < n <= high]
        kept = [i for i in members if not untranslated[i]]
        assert bucket.sentences == len(members)
        assert bucket.untranslated == len(members) - len(kept)
        if not kept:
            assert bucket.bleu is None and bucket.chrf is None
            continue
        sub_h, sub_r = [hyps[i] for i in kept], [refs[i] for i in kept]
        assert bucket.bleu == pytest.approx(sacrebleu.corpus_bleu(sub_h, [sub_r]).score)
        assert bucket.chrf == pytest.approx(sacrebleu.corpus_chrf(sub_h, [sub_r]).score)
    short = by_length(sources[:3], hyps[:3], refs[:3], "cased", "en", "de", lengths=[1, 2, 3],
                      bins=AT5_BINS)
    assert [b.label for b in short] == labels[:-1]  # no overflow bin when unused
    with pytest.raises(ValueError, match="one of each per sentence"):
        by_length(sources, hyps[:-1], refs, "cased", "en", "de")


def test_bucket_table_compares_systems_on_one_test_set():
    a = [BucketScore("(0, 20]", 3, 0, 10.0, 40.0), BucketScore("(20, 40]", 2, 1, None, None)]
    b = [BucketScore("(0, 20]", 3, 0, 12.5, 41.0), BucketScore("(20, 40]", 2, 0, 9.0, 30.0)]
    text = bucket_table({"A": a, "B": b})
    assert "| source length | (0, 20] n=3 few | (20, 40] n=2 few |" in text
    assert "| A | 10.00 / 40.00 | - (1 untranslated) |" in text
    assert "| B | 12.50 / 41.00 | 9.00 / 30.00 |" in text
    with pytest.raises(ValueError, match="other sentences"):
        bucket_table({"A": a, "B": b[:1]})


def test_posenc_score_writes_scores_buckets_and_plot(tmp_path):
    refs = corpus(120, 13)
    sources = corpus(120, 14, lengths=(2, 50))
    write_lines(tmp_path / "test.de", refs)
    write_lines(tmp_path / "test.en", sources)
    write_lines(tmp_path / "a.de", noisy(refs, 0.3, 15))
    write_lines(tmp_path / "b.de", noisy(refs, 0.1, 16))
    out = tmp_path / "out"
    assert score_main(["--ref", str(tmp_path / "test.de"), "--src", str(tmp_path / "test.en"),
                       "--hyp", f"base={tmp_path / 'a.de'}", "--hyp", f"sys={tmp_path / 'b.de'}",
                       "--out", str(out)]) == 0
    report = json.loads((out / "scores.json").read_text())
    assert report["baseline"] == "base" and report["sentences"] == 120
    system = report["systems"]["sys"]
    b, c = paired_bootstrap(noisy(refs, 0.3, 15), noisy(refs, 0.1, 16), refs, "cased", "de")
    assert system["paired_bootstrap"]["bleu_p"] == pytest.approx(b.p_value)
    assert system["paired_bootstrap"]["chrf_p"] == pytest.approx(c.p_value)
    assert "paired_bootstrap" not in report["systems"]["base"]
    assert sum(x["sentences"] for x in system["buckets"]) == 120
    assert (out / "buckets.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| sys |" in (out / "buckets.md").read_text()
    # the installed console script, as a user runs it
    done = run_script("posenc-score", ["--ref", tmp_path / "test.de", "--hyp", tmp_path / "b.de"])
    assert done.returncode == 0, done.stderr
    assert f"b.de: BLEU {system['bleu']:.2f}  chrF {system['chrf']:.2f}" in done.stdout


def test_posenc_score_bad_input_says_what_to_do(tmp_path):
    write_lines(tmp_path / "test.de", ["a b", "c d"])
    write_lines(tmp_path / "short.de", ["a b"])
    write_lines(tmp_path / "refs.txt", ["a b", "c d"])
    ref = str(tmp_path / "test.de")
    with pytest.raises(SystemExit, match="does not exist"):
        score_main(["--ref", ref, "--hyp", str(tmp_path / "missing.de")])
    with pytest.raises(SystemExit, match="1 lines for 2 references"):
        score_main(["--ref", ref, "--hyp", str(tmp_path / "short.de")])
    with pytest.raises(SystemExit, match="pass --tgt-lang"):
        score_main(["--ref", str(tmp_path / "refs.txt"), "--hyp", ref])
    with pytest.raises(SystemExit, match="--baseline 'x' is none of the systems"):
        score_main(["--ref", ref, "--hyp", ref, "--baseline", "x"])


@pytest.mark.slow  # posenc-score's console script
def test_posenc_score_marks_every_significant_difference_with_its_direction(tmp_path, capsys):
    """Per system: score, difference to the baseline (its score minus the baseline's) and
    p-value, marked * exactly where ``sacrebleu --paired-bs`` gives p < 0.05 and the
    scores differ -- for chrF as for BLEU; a line under the scores says what * and + mean."""
    refs = corpus(200, 20)
    wrong, typo = near_misses(refs, 0.3, 21)
    systems = {"base": wrong, "typo": typo, "worse": noisy(wrong, 0.2, 22),
               "similar": near_misses(refs, 0.3, 23)[0]}
    write_lines(tmp_path / "ref.de", refs)
    for name, lines in systems.items():
        write_lines(tmp_path / f"{name}.de", lines)
    files = [str(tmp_path / f"{name}.de") for name in systems]
    out = tmp_path / "out"
    assert score_main(["--ref", str(tmp_path / "ref.de"), "--out", str(out),
                       *(f"--hyp={name}={tmp_path / name}.de" for name in systems)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "scores.json").read_text())
    assert report["baseline"] == "base"
    assert "  base:    BLEU" in printed and "(baseline)" in printed
    assert ("(+/-) a system's score minus base's: + means better than the baseline base; "
            "* marks p < 0.05 in sacreBLEU's paired bootstrap (1000 resamples) against "
            "base.") in printed
    marks = {}
    for metric, key in (("chrf", "chrF2"), ("bleu", "BLEU")):
        cli = sacrebleu_cli([str(tmp_path / "ref.de"), "-i", *files, "--paired-bs",
                             "-m", metric])
        baseline = cli[0][key]["score"]
        for name, entry in zip(list(systems)[1:], cli[1:]):
            result = entry[key]
            delta = result["score"] - baseline
            significant = result["p_value"] < 0.05 and result["score"] != baseline
            marks[name, metric] = significant, delta
            pb = report["systems"][name]["paired_bootstrap"]
            assert pb[f"{metric}_p"] == pytest.approx(result["p_value"])
            assert pb[f"{metric}_significant"] == significant
            assert pb[f"{metric}_delta"] == pytest.approx(delta, abs=0.005)
            assert pb["alpha"] == ALPHA == 0.05
            label = "chrF" if metric == "chrf" else "BLEU"
            if result["score"] == baseline:
                cell = f"{label} {result['score']:.2f} (+0.00, same score)"
            else:
                cell = (f"{label} {result['score']:.2f} ({delta:+.2f}, p = "
                        f"{result['p_value']:.3f}{'*' if significant else ''})")
            line = next(x for x in printed.splitlines() if x.startswith(f"  {name}:"))
            assert cell in line, (cell, line)
    # the inputs cover each case: chrF significant where BLEU is equal; both significantly
    # worse; no significant difference
    assert marks["typo", "chrf"][0] and marks["typo", "chrf"][1] > 0
    assert report["systems"]["typo"]["bleu"] == report["systems"]["base"]["bleu"]
    assert "BLEU" in printed and "(+0.00, same score)" in printed
    assert marks["worse", "chrf"][0] and marks["worse", "chrf"][1] < 0
    assert marks["worse", "bleu"][0] and marks["worse", "bleu"][1] < 0
    assert not marks["similar", "bleu"][0] and not marks["similar", "chrf"][0]


def test_posenc_score_bins(tmp_path, capsys):
    """``--bins 5 10 20``: (0, 5], (5, 10], (10, 20], (20, inf); each bin's BLEU and chrF
    are sacreBLEU's corpus scores of the sentences a plain loop puts in it."""
    rng = random.Random(30)
    lengths = [rng.randint(1, 30) for _ in range(150)]
    write_lines(tmp_path / "test.en", [" ".join(["w"] * (n - 1) + ["."]) for n in lengths])
    refs = corpus(150, 31)
    hyps = noisy(refs, 0.25, 32)
    write_lines(tmp_path / "test.de", refs)
    write_lines(tmp_path / "hyp.de", hyps)
    out = tmp_path / "out"
    assert score_main(["--ref", str(tmp_path / "test.de"), "--src", str(tmp_path / "test.en"),
                       "--hyp", str(tmp_path / "hyp.de"), "--bins", "5", "10", "20",
                       "--out", str(out)]) == 0
    report = json.loads((out / "scores.json").read_text())
    buckets = report["systems"]["hyp.de"]["buckets"]
    edges = [(0, 5), (5, 10), (10, 20), (20, 10**9)]
    labels = ["(0, 5]", "(5, 10]", "(10, 20]", "(20, inf)"]
    assert [b["label"] for b in buckets] == labels == report["length_bins"]
    for bucket, (low, high) in zip(buckets, edges):
        members = [i for i, n in enumerate(lengths) if low < n <= high]
        assert members and bucket["sentences"] == len(members)
        sub_h, sub_r = [hyps[i] for i in members], [refs[i] for i in members]
        assert bucket["bleu"] == pytest.approx(sacrebleu.corpus_bleu(sub_h, [sub_r]).score)
        assert bucket["chrf"] == pytest.approx(sacrebleu.corpus_chrf(sub_h, [sub_r]).score)
    header = capsys.readouterr().out
    assert "| source length | (0, 5] n=" in header and "| (20, inf) n=" in header
    assert bins_from_edges([5, 10, 20]) == ((0, 5), (5, 10), (10, 20), (20, float("inf")))
    # the last, open-ended bin is shown even when no sentence falls in it
    short = by_length(["a ."] * 3, hyps[:3], refs[:3], "cased", "en", "de",
                      bins=bins_from_edges([5, 10]))
    assert [(b.label, b.sentences) for b in short] == [("(0, 5]", 3), ("(5, 10]", 0),
                                                       ("(10, inf)", 0)]
    # rendering checks that the rows were scored with the bins it is given
    assert "(10, inf) n=0" in bucket_table({"A": short}, bins=bins_from_edges([5, 10]))
    with pytest.raises(ValueError, match="not the given"):
        bucket_table({"A": short}, bins=AT5_BINS)


@pytest.mark.parametrize("bins, message", [
    (["10", "5"], "bin edges must ascend: 5 follows 10"),
    (["5", "5"], "bin edges must ascend"),
    (["0", "5"], "bin edge 0 is not a positive whole number"),
    (["-3"], "bin edge -3 is not a positive whole number"),
    (["5.5"], "'5.5' is not a whole number"),
    (["ten"], "'ten' is not a whole number"),
])
def test_posenc_score_bad_bins_say_what_to_pass(tmp_path, bins, message):
    write_lines(tmp_path / "test.de", ["a b", "c d"])
    write_lines(tmp_path / "test.en", ["a b", "c d"])
    ref, src = str(tmp_path / "test.de"), str(tmp_path / "test.en")
    with pytest.raises(SystemExit) as exit_info:
        score_main(["--ref", ref, "--src", src, "--hyp", ref, "--bins", *bins])
    text = str(exit_info.value)
    assert text.startswith(f"posenc-score: --bins {' '.join(bins)}: ") and message in text
    assert "e.g. 5 10 15 20 30" in text or "e.g. --bins 5 10 15 20 30" in text
    with pytest.raises(SystemExit, match="need the raw source text: pass --src"):
        score_main(["--ref", ref, "--hyp", ref, "--bins", "5", "10"])
    with pytest.raises(ValueError, match="contiguous"):
        by_length(["a"], ["a"], ["a"], "cased", "en", "de", bins=[(0, 5), (6, 10)])
