"""posenc-compare's scores by length (fairseq_posenc/tools/compare/length_bins.py): the test
split's own bins by source and by reference length, the same for every encoding, and the few
marking, in report.json, report.md and the plot.

References: a test split whose source and reference lengths are written down here, its bins
worked out by hand, each bin's sentences picked by a plain loop over those lengths, and
sacreBLEU's own corpus scores of them, averaged over the seeds.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest
import sacrebleu

import tests.support.cli_utils as cu
from tests.support.compare_reports import fake_result, write_prepared
from fairseq_posenc.tools.compare import cli, data, report as report_mod, summary
from fairseq_posenc.tools.compare.plan import Run

INF = float("inf")
ENCODINGS = ["sinusoidal", "rope"]

#: Source lengths in Moses tokens (words and the final "."): 240 sentences whose running
#: count reaches 40, 80, ... 240 exactly, so six bins of 40 by hand: (0, 2], (2, 4], (4, 6],
#: (6, 8], (8, 15] (11|16: the roundest edge between is 15) and (15, inf). The 20 sources of
#: 22 tokens or more are longer than every training source.
SOURCE = {2: 40, 3: 25, 4: 15, 5: 22, 6: 18, 7: 20, 8: 20, 9: 12, 10: 14, 11: 14, 16: 8,
          17: 6, 19: 6, 22: 6, 27: 4, 33: 6, 40: 4}
SOURCE_BINS = [(0, 2), (2, 4), (4, 6), (6, 8), (8, 15), (15, INF)]
#: Reference lengths: 3 tokens hold half the sentences, a bin of their own; 35 below; the 85
#: above make two bins of 30 or more at most, 30 | 55 and 55 | 30 tie on the sum of squares
#: and the earlier cut wins: (0, 2], (2, 3], (3, 4], (4, inf).
TARGET = {2: 35, 3: 120, 4: 30, 5: 25, 6: 15, 9: 10, 12: 5}
TARGET_BINS = [(0, 2), (2, 3), (3, 4), (4, INF)]


def histogram_lengths(histogram: dict[int, int], rng: random.Random) -> list[int]:
    lengths = [n for n, count in histogram.items() for _ in range(count)]
    rng.shuffle(lengths)
    return lengths


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Training sources of 2 to 20 words and a final "." (the longest: 22 tokens with the
    end of sentence), and the test split of SOURCE and TARGET."""
    rng = random.Random(3)
    words = cu.SRC_WORDS

    def sentence(tokens: int, vocabulary) -> list[str]:
        return [rng.choice(vocabulary) for _ in range(tokens - 1)] + ["."]

    train = [sentence(21, words)] + [sentence(rng.randint(3, 21), words) for _ in range(299)]
    test_src = [sentence(n, words) for n in histogram_lengths(SOURCE, rng)]
    targets = list(cu.LEXICON.values())
    test_tgt = [sentence(n, targets) for n in histogram_lengths(TARGET, rng)]
    valid = train[:20]
    splits = {"train": (train, [cu.translate(s[:-1]) + ["."] for s in train]),
              "valid": (valid, [cu.translate(s[:-1]) + ["."] for s in valid]),
              "test": (test_src, test_tgt)}
    root = write_prepared(tmp_path_factory.mktemp("lengths") / "prepared", splits)
    return root, [len(s) for s in test_src], [len(t) for t in test_tgt]


def build(prepared, tmp_path: Path, bins=None):
    """The report of two encodings, two seeds each, whose translations drop words from the
    references (more for rope), with ``bins`` (None: the split's own)."""
    root, _, _ = prepared
    out = tmp_path / "cmp"
    parser = cli.parser()
    args = parser.parse_args([str(out), "--data", str(root), "-s", cu.SRC, "-t", cu.TGT,
                              "--encodings", *ENCODINGS, "--max-update", "12", "--test",
                              "test", "--cpu"])
    settings = cli.settings_of(args, parser)
    corpus = data.open_prepared(root, settings, None)
    refs = cu.read_lines(root / "raw" / f"test.{cu.TGT}")
    rng = random.Random(4)
    hyps = {}
    for encoding, keep in zip(ENCODINGS, (0.9, 0.7)):
        for seed in (1, 2):
            hyps[encoding, seed] = [" ".join(w for w in r.split() if rng.random() < keep)
                                    for r in refs]
            fake_result(out, Run(encoding, seed), "test", refs, hyps[encoding, seed])
    built = summary.build(out, settings, corpus, ENCODINGS, 2, "sinusoidal", bins,
                          {e: 10 for e in ENCODINGS})
    return out, built, refs, hyps


def label(low, high) -> str:
    return f"({low}, inf)" if high == INF else f"({low}, {high}]"


def expected(lengths, bins, refs, hyps, encoding):
    """Per bin: its sentences by a plain loop, and the mean over seeds of sacreBLEU's BLEU
    and chrF of them."""
    rows = []
    for low, high in bins:
        ids = [i for i, n in enumerate(lengths) if low < n <= high]
        sub_r = [refs[i] for i in ids]
        bleu = [sacrebleu.corpus_bleu([hyps[encoding, s][i] for i in ids], [sub_r]).score
                for s in (1, 2)]
        chrf = [sacrebleu.corpus_chrf([hyps[encoding, s][i] for i in ids], [sub_r]).score
                for s in (1, 2)]
        rows.append((label(low, high), len(ids), statistics.mean(bleu), statistics.mean(chrf)))
    return rows


def test_each_split_is_binned_by_its_own_source_and_reference_lengths(prepared, tmp_path):
    out, built, refs, hyps = build(prepared, tmp_path)
    _, source, target = prepared
    assert built["bins"] == {"rule": "quantile", "few_below": 30, "splits": {"test": {
        "source": [[0, 2], [2, 4], [4, 6], [6, 8], [8, 15], [15, None]],
        "target": [[0, 2], [2, 3], [3, 4], [4, None]]}}}
    beyond = [i for i, n in enumerate(source) if n + 1 > 22]  # with </s>, over the longest
    assert len(beyond) == 20
    for row in built["summary"]:
        assert row["beyond_training"] == 20
        for key, lengths, bins in (("buckets", source, SOURCE_BINS),
                                   ("target_buckets", target, TARGET_BINS)):
            got = row[key]
            want = expected(lengths, bins, refs, hyps, row["encoding"])
            if key == "buckets":
                assert got[-1]["label"] == "beyond training"
                assert got[-1]["sentences"] == 20 and got[-1]["few"] is True
                sub_r = [refs[i] for i in beyond]
                assert got[-1]["bleu"] == pytest.approx(statistics.mean(
                    sacrebleu.corpus_bleu([hyps[row["encoding"], s][i] for i in beyond],
                                          [sub_r]).score for s in (1, 2)), abs=0.011)
                got = got[:-1]
            assert [b["label"] for b in got] == [w[0] for w in want]
            assert [b["sentences"] for b in got] == [w[1] for w in want]
            assert sum(b["sentences"] for b in got) == 240
            assert all(b["few"] is False for b in got)
            for b, (_, _, bleu, chrf) in zip(got, want):
                assert b["bleu"] == pytest.approx(bleu, abs=0.011)
                assert b["chrf"] == pytest.approx(chrf, abs=0.011)
    assert [b["sentences"] for b in built["summary"][0]["target_buckets"]] == [35, 120, 30, 55]

    report_mod.write(built, out, {})
    md = (out / "report.md").read_text()
    assert ("| encoding | (0, 2] n=40 | (2, 4] n=40 | (4, 6] n=40 | (6, 8] n=40 | (8, 15] n=40 "
            "| (15, inf) n=40 | beyond training n=20 few |") in md
    assert "### By reference length in Moses tokens" in md
    assert "| encoding | (0, 2] n=35 | (2, 3] n=120 | (3, 4] n=30 | (4, inf) n=55 |" in md
    assert "Varis and Bojar 2021" in md and "`few`: fewer than 30 sentences" in md
    # the references' (0, 2] and (2, 3] hold no 4-gram: their BLEU is 0, and the table says why
    assert [b["bleu"] for b in built["summary"][0]["target_buckets"][:2]] == [0.0, 0.0]
    assert md.count("BLEU counts matching 4-grams") == 1  # under the references' table
    assert (out / "report" / "lengths.png").stat().st_size > 10_000


def test_bins_by_hand_apply_to_both_and_mark_few_bins(prepared, tmp_path):
    """``--bins 3 10``: (0, 3], (3, 10], (10, inf) for sources and references alike; the 5
    references of 12 tokens are few."""
    _, built, refs, hyps = build(prepared, tmp_path, ((0, 3), (3, 10), (10, INF)))
    _, source, target = prepared
    assert built["bins"]["rule"] == "given"
    assert built["bins"]["splits"]["test"]["target"] == [[0, 3], [3, 10], [10, None]]
    for row in built["summary"]:
        for key, lengths in (("buckets", source), ("target_buckets", target)):
            bins = [b for b in row[key] if b["label"] != "beyond training"]
            want = expected(lengths, [(0, 3), (3, 10), (10, INF)], refs, hyps, row["encoding"])
            assert [(b["label"], b["sentences"], b["few"]) for b in bins] == [
                (w[0], w[1], w[1] < 30) for w in want]
            assert [b["bleu"] for b in bins] == pytest.approx([w[2] for w in want], abs=0.011)
        assert [b["sentences"] for b in row["target_buckets"]] == [155, 80, 5]
        assert row["target_buckets"][-1]["few"] is True
