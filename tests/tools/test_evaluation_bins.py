"""The default length bins (fairseq_posenc/tools/evaluation/bins.py), bins by reference length and
the few marking, in the library and in ``posenc-score``.

References: bins worked out by hand for length distributions written down here (short UI
strings, a long tail, one length holding most sentences, 90 sentences, fewer), an exhaustive
search over every way to cut the distinct lengths (the rule as the docs state it, tried on
every candidate), membership by a plain loop, and sacreBLEU's own corpus scores of the
sentences each bin holds.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter

import pytest
import sacrebleu
from sacremoses import MosesTokenizer

from tests.support.cli_utils import write_lines
from fairseq_posenc.tools.evaluation import (
    FEW, BucketScore, bucket_table, by_length, plot_buckets, quantile_bins)
from fairseq_posenc.tools.evaluation.cli import main as score_main

INF = math.inf


def lengths_of(histogram: dict[int, int]) -> list[int]:
    """Sentence lengths with these counts, in a shuffled order (the bins must not care)."""
    lengths = [length for length, count in histogram.items() for _ in range(count)]
    random.Random(len(lengths)).shuffle(lengths)
    return lengths


def sizes(lengths: list[int], bins) -> list[int]:
    return [sum(1 for n in lengths if low < max(n, 1) <= high) for low, high in bins]


def roundest(low: int, high: int) -> int:
    """The edge between a bin whose longest sentence has ``low`` tokens and a bin whose
    shortest has ``high``: the smallest multiple of 100, else 50, 10, 5 in [low, high)."""
    for step in (100, 50, 10, 5):
        candidates = [e for e in range(low, high) if e % step == 0]
        if candidates:
            return min(candidates)
    return low


def exhaustive_bins(lengths: list[int]):
    """Every way to cut the distinct lengths into 2..6 bins, tried: the most bins of at least
    30 sentences, then the least sum of squared sizes, then the earliest cuts."""
    counts = Counter(max(n, 1) for n in lengths)
    values = sorted(counts)
    for k in range(min(6, len(lengths) // 30), 1, -1):
        best = None
        for cuts in itertools.combinations(range(1, len(values)), k - 1):
            bounds = [0, *cuts, len(values)]
            bin_sizes = [sum(counts[v] for v in values[a:b]) for a, b in zip(bounds, bounds[1:])]
            if min(bin_sizes) >= 30:
                key = (sum(s * s for s in bin_sizes), cuts)
                best = key if best is None or key < best else best
        if best:
            edges = [roundest(values[c - 1], values[c]) for c in best[1]]
            return tuple(zip([0, *edges], [*edges, INF]))
    return ((0, INF),)


#: A test set of 1,000 short UI strings: 984 of them are at most 20 tokens long, AT5's first
#: bin; a few run longer.
UI_STRINGS = {1: 166, 2: 170, 3: 150, 4: 120, 5: 90, 6: 70, 7: 50, 8: 40, 9: 30, 10: 25, 11: 20,
              12: 15, 13: 10, 14: 8, 15: 6, 16: 5, 17: 3, 18: 2, 19: 2, 20: 2, 22: 4, 25: 4,
              28: 2, 31: 2, 40: 2, 57: 1, 83: 1}
#: A long tail whose running count reaches 100, 200, ... 600 exactly, with gaps between the
#: lengths of neighbouring bins (for the round edges).
LONG_TAIL = {3: 30, 5: 40, 7: 30, 11: 50, 13: 50, 18: 60, 21: 40, 24: 50, 27: 50, 33: 40,
             41: 35, 75: 25, 130: 40, 260: 60}
#: One length holds 700 of 1,000 sentences.
DOMINANT = {1: 40, 2: 60, 3: 700, 4: 50, 5: 40, 6: 30, 7: 20, 8: 20, 9: 15, 10: 25}


@pytest.mark.parametrize("histogram, bins, counts", [
    # six bins: one length each where a length holds ~150 sentences, then wider; sizes as
    # equal as the ties allow (166, 170, 150, 210, 160, 144: the least sum of squares)
    (UI_STRINGS, [(0, 1), (1, 2), (2, 3), (3, 5), (5, 8), (8, INF)],
     [166, 170, 150, 210, 160, 144]),
    # exactly 100 each; the edges are rounded within the gaps: 7|11 -> 10, 13|18 -> 15,
    # 21|24 -> 21 (no multiple of 5 in 21..23), 27|33 -> 30, 75|130 -> 100
    (LONG_TAIL, [(0, 10), (10, 15), (15, 21), (21, 30), (30, 100), (100, INF)],
     [100] * 6),
    # the 700 make a bin of their own; 40 and 60 below; above, 50 | 70 | 80 is the most
    # even split of 200 into bins of 30 or more (sum of squares 13,800 against 14,200 for
    # 90 | 50 | 60); 1 | 2 | 3 | 4 | 5-6 | 7+ beats 1-2 | 3 | 4 | 5 | 6 | 7+ (509,000 < 511,400)
    (DOMINANT, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 6), (6, INF)],
     [40, 60, 700, 50, 70, 80]),
    # 90 sentences whose running count reaches 30 and 60 exactly: three bins of 30
    ({3: 8, 4: 10, 5: 12, 6: 9, 7: 11, 8: 10, 9: 7, 11: 8, 14: 6, 19: 5, 26: 4},
     [(0, 5), (5, 8), (8, INF)], [30, 30, 30]),
    # 90 sentences where 29 share length 6 across the 30th: no three bins of 30 exist (the
    # first ends at 25 or 54, leaving 36 at most for two): two, as even as possible
    ({2: 10, 4: 15, 6: 29, 9: 12, 12: 12, 15: 12}, [(0, 6), (6, INF)], [54, 36]),
    # 75 sentences: at most two bins (75 // 30)
    ({n: 1 for n in range(1, 76)}, [(0, 37), (37, INF)], [37, 38]),
    # one length with all but 10 below and 5 above: no second bin of 30, one bin
    ({2: 10, 4: 85, 7: 5}, [(0, INF)], [100]),
    # fewer than 60 sentences: one bin, the whole test set
    ({n: 1 for n in range(1, 46)}, [(0, INF)], [45]),
    ({5: 12}, [(0, INF)], [12]),
])
def test_default_bins_are_what_a_hand_count_gives(histogram, bins, counts):
    lengths = lengths_of(histogram)
    got = quantile_bins(lengths)
    assert list(got) == bins
    assert sizes(lengths, got) == counts and sum(counts) == len(lengths)
    assert got == exhaustive_bins(lengths)
    assert quantile_bins(sorted(lengths)) == got  # the order of the sentences is no matter


def test_ui_strings_no_longer_fall_in_one_bin():
    """The issue's case: AT5's (0, 20] holds 984 of the 1,000 short strings."""
    lengths = lengths_of(UI_STRINGS)
    assert sum(1 for n in lengths if n <= 20) == 984
    assert max(sizes(lengths, quantile_bins(lengths))) == 210


def test_three_bins_of_thirty_where_no_length_holds_too_many():
    """Realistic distributions (lognormal lengths, as news and UI text have): with 90
    sentences or more and no length holding more than (n - 88) / 2 of them, at least three
    bins, each of at least 30 sentences; with 260 or more, whenever no length holds a
    third. Never more than six bins, never one under 30 (from 60 sentences on)."""
    rng = random.Random(7)
    checked = {"bound": 0, "third": 0, "exhaustive": 0}
    for trial in range(300):
        n = rng.choice([60, 75, 90, 120, 200, 260, 400, 1000])
        mu, sigma = rng.choice([(0.8, 0.6), (1.5, 0.7), (2.9, 0.5), (3.0, 0.9)])
        lengths = [max(1, round(rng.lognormvariate(mu, sigma))) for _ in range(n)]
        bins = quantile_bins(lengths)
        got = sizes(lengths, bins)
        assert sum(got) == n and len(bins) <= 6 and min(got) >= FEW, (n, mu, sigma)
        largest = max(Counter(lengths).values())
        if n >= 90 and largest <= (n - 88) / 2:
            checked["bound"] += 1
            assert len(bins) >= 3, (n, largest, bins)
        if n >= 260 and largest < n / 3:
            checked["third"] += 1
            assert len(bins) >= 3, (n, largest, bins)
        if trial < 40 and len(Counter(lengths)) <= 20:
            checked["exhaustive"] += 1
            assert bins == exhaustive_bins(lengths)
    assert min(checked.values()) > 10, checked  # every case occurred


def test_bad_lengths_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="the test set is empty"):
        quantile_bins([])
    with pytest.raises(ValueError, match="3 lengths for 2 sentences"):
        by_length(["a", "b"], ["a", "b"], ["a", "b"], "cased", "en", "de", lengths=[1, 2, 3])
    (tmp_path / "test.de").write_text("")
    (tmp_path / "test.en").write_text("")
    with pytest.raises(SystemExit, match="test.de has no lines; give the references"):
        score_main(["--ref", str(tmp_path / "test.de"), "--src", str(tmp_path / "test.en"),
                    "--hyp", str(tmp_path / "test.de")])


def test_few_bins_are_marked_in_the_table_and_json():
    a = [BucketScore("(0, 5]", 30, 0, 10.0, 40.0), BucketScore("(5, inf)", 29, 1, 9.0, 30.0)]
    b = [BucketScore("(0, 5]", 30, 0, 12.5, 41.0), BucketScore("(5, inf)", 29, 0, 8.0, 31.0)]
    assert [x.few for x in a] == [False, True]
    assert a[1].to_json() == {"label": "(5, inf)", "sentences": 29, "untranslated": 1,
                              "bleu": 9.0, "chrf": 30.0, "few": True}
    text = bucket_table({"A": a, "B": b}, by="reference length")
    assert text.startswith("| reference length | (0, 5] n=30 | (5, inf) n=29 few |")
    assert "`few`: fewer than 30 sentences in the bin" in text
    assert " few" not in bucket_table({"A": a[:1], "B": b[:1]})


def moses_count(lines: list[str], lang: str) -> list[int]:
    tok = MosesTokenizer(lang=lang)
    return [len(tok.tokenize(line, escape=False)) for line in lines]


def short_lines(n: int, seed: int) -> tuple[list[str], list[str]]:
    """UI strings in English and Czech: typographic quotes, no-break spaces, diacritics,
    mostly one to six words."""
    rng = random.Random(seed)
    en = ["Save", "file", "changes", "now", "Delete", "all", "items", "Open", "settings",
          "Cancel", "the", "download", "“Report”", "100\u00a0%", "Close", "window"]
    cs = ["Uložit", "soubor", "změny", "nyní", "Smazat", "všechny", "položky", "Otevřít",
          "nastavení", "Zrušit", "stahování", "„Hlášení“", "100\u00a0%", "Zavřít", "okno"]
    src, ref = [], []
    for _ in range(n):
        words = min(1 + int(rng.expovariate(0.45)), 40)
        end = rng.choice(["", "", ".", "?", "…", "!"])
        src.append(" ".join(rng.choice(en) for _ in range(words)) + end)
        ref.append(" ".join(rng.choice(cs) for _ in range(max(1, words + rng.randint(-1, 2))))
                   + end)
    return src, ref


def test_posenc_score_bins_short_lines_by_source_and_reference_length(tmp_path, capsys):
    """posenc-score's defaults on 400 short UI strings: the source and the reference each in
    their own bins (the exhaustive search's), every bin scored as sacreBLEU scores its
    sentences; with --bins, both in the given edges and the bins of few sentences marked."""
    src, ref = short_lines(400, 40)
    rng = random.Random(41)
    hyps = {"a": [" ".join(w for w in r.split() if rng.random() > 0.2) for r in ref],
            "b": [" ".join(w for w in r.split() if rng.random() > 0.4) for r in ref]}
    write_lines(tmp_path / "test.en", src)
    write_lines(tmp_path / "test.cs", ref)
    for name, lines in hyps.items():
        write_lines(tmp_path / f"{name}.cs", lines)
    args = ["--ref", str(tmp_path / "test.cs"), "--src", str(tmp_path / "test.en"),
            "--hyp", f"a={tmp_path / 'a.cs'}", "--hyp", f"b={tmp_path / 'b.cs'}"]
    src_len, ref_len = moses_count(src, "en"), moses_count(ref, "cs")
    assert score_main([*args, "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "scores.json").read_text())
    assert report["bins_rule"] == "quantile"
    for key, lengths in (("buckets", src_len), ("target_buckets", ref_len)):
        bins = exhaustive_bins(lengths)
        assert len(bins) >= 3
        labels = [f"({lo}, {'inf' if hi == INF else hi}" + (")" if hi == INF else "]")
                  for lo, hi in bins]
        assert report["length_bins" if key == "buckets" else "target_length_bins"] == labels
        for name, lines in hyps.items():
            rows = report["systems"][name][key]
            assert [r["label"] for r in rows] == labels
            assert sum(r["sentences"] for r in rows) == 400
            for row, (low, high) in zip(rows, bins):
                ids = [i for i, n in enumerate(lengths) if low < max(n, 1) <= high]
                assert row["sentences"] == len(ids) and not row["few"]
                sub_h, sub_r = [lines[i] for i in ids], [ref[i] for i in ids]
                assert row["bleu"] == pytest.approx(
                    sacrebleu.corpus_bleu(sub_h, [sub_r]).score)
                assert row["chrf"] == pytest.approx(sacrebleu.corpus_chrf(sub_h, [sub_r]).score)
    assert "| reference length | " in printed and "| source length | " in printed
    assert "BLEU counts matching 4-grams" in printed  # bins of one, two, three tokens
    md = (tmp_path / "out" / "buckets.md").read_text()
    assert "| reference length | " in md and " few |" not in md and "`few`" not in md

    # by hand: 2 4 10 -> (0, 2], (2, 4], (4, 10], (10, inf), the same edges for the
    # references; (10, inf) holds fewer than 30 sources
    assert score_main([*args, "--bins", "2", "4", "10", "--out", str(tmp_path / "hand")]) == 0
    report = json.loads((tmp_path / "hand" / "scores.json").read_text())
    assert report["bins_rule"] == "given"
    for key, lengths in (("buckets", src_len), ("target_buckets", ref_len)):
        rows = report["systems"]["b"][key]
        assert [r["label"] for r in rows] == ["(0, 2]", "(2, 4]", "(4, 10]", "(10, inf)"]
        for row, (low, high) in zip(rows, [(0, 2), (2, 4), (4, 10), (10, INF)]):
            ids = [i for i, n in enumerate(lengths) if low < max(n, 1) <= high]
            assert row["sentences"] == len(ids) and row["few"] == (len(ids) < 30)
            sub_h, sub_r = [hyps["b"][i] for i in ids], [ref[i] for i in ids]
            assert row["bleu"] == pytest.approx(sacrebleu.corpus_bleu(sub_h, [sub_r]).score)
    few = [r for r in report["systems"]["b"]["buckets"] if r["few"]]
    assert few, "the hand bins should leave a bin of few sentences"
    assert f"{few[0]['label']} n={few[0]['sentences']} few" in (
        tmp_path / "hand" / "buckets.md").read_text()
    assert (tmp_path / "hand" / "buckets.png").stat().st_size > 10_000


def test_the_plot_marks_few_bins(tmp_path):
    """Hollow markers on a grey band where a bin is few: the band's grey shows in the PNG
    at the few bin's place and nowhere else along the axis."""
    rows = {"A": [BucketScore("(0, 5]", 40, 0, 20.0, 50.0),
                  BucketScore("(5, 9]", 3, 0, 25.0, 52.0),
                  BucketScore("(9, inf)", 35, 0, 22.0, 51.0)]}
    path = plot_buckets({"test": rows}, tmp_path / "few.png", "by length",
                        axis={"test": "reference length (Moses tokens)"})
    import matplotlib.image as mpimg

    pixels = mpimg.imread(path)
    grey = (abs(pixels[..., :3] - 0.85) < 0.01).all(axis=-1)
    band = (grey.sum(axis=0) > 100).nonzero()[0]  # columns grey over 100 pixels high
    left_panel = band[band < pixels.shape[1] // 2]
    assert len(left_panel) > 50  # a band, not a line
    # the middle bin's band: between the first and last tick of the left panel
    assert pixels.shape[1] * 0.1 < left_panel.min() and left_panel.max() < pixels.shape[1] * 0.4
    assert len(band) > 2 * len(left_panel) - 10  # and the same in the right panel
