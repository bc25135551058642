"""posenc-compare's report (fairseq_posenc/tools/compare/report.py) says each thing once: one
"How to read" section with the significance note and one ``†`` note, every table ending in
a line that links to it, the title naming the data's directory and the full path written
once, in the settings paragraph.

The report is built without training from run records (train logs whose validation curves
are written here, so which run is still improving is known) and from summary rows of two
test splits with every kind of table (by source length, by reference length, by length
relative to ``--train-max-len``); the references are counts and positions of those texts
in the written report.md and report/index.html.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.compare_reports import fake_comparison
from fairseq_posenc.tools.compare import cli, report
from fairseq_posenc.tools.compare.summary import run_records
from fairseq_posenc.tools.compare.plan import Run

ENCODINGS = ["sinusoidal", "t5"]
SPLITS = ["test", "test_long"]
#: The significance note's words and the marker note's, each said once in a report.
SIGNIFICANCE = "p measures only which sentences the test set holds"
MARKER = "the difference may be training speed, not final quality"
POINTER = re.compile(r"^What its cells( and †)? mean: \[above\]\(#how-to-read\)\.$")


def bins(mean: float, few_last: bool) -> list[dict]:
    return [{"label": label, "sentences": n, "untranslated": 0, "bleu": mean, "chrf": mean + 10}
            for label, n in (("(0, 10]", 40), ("(10, inf)", 10 if few_last else 40))]


def relative(mean: float) -> list[dict]:
    return [{"bin": [lo, hi], "tokens": [0, 0], "n": 30, "few": False, "untranslated": 0,
             "bleu": mean, "chrf": mean + 10, "bleu_seeds": [mean], "chrf_seeds": [mean + 10]}
            for lo, hi in ((0, 1), (1, None))]


def built_report(tmp_path: Path, t5_improving: bool) -> tuple[dict, Path]:
    """Two encodings, one seed, two test splits; t5's validation loss falls by 4% over its
    last 20% of updates (still improving) or stays flat."""
    data = tmp_path / "corpora" / "my-corpus"
    data.mkdir(parents=True)
    out = tmp_path / "cmp"
    flat = [(u, 4.0) for u in range(50, 1001, 50)]
    falling = [(u, 5.0 - 0.2 * max(0, u - 800) / 200) for u in range(50, 1001, 50)]
    fake_comparison(out, {("sinusoidal", 1): flat,
                          ("t5", 1): falling if t5_improving else flat})
    parser = cli.parser()
    settings = cli.settings_of(parser.parse_args(
        [str(out), "--data", str(data), "-s", "en", "-t", "de", "--encodings", *ENCODINGS,
         "--max-update", "1000", "--test", *SPLITS, "--cpu"]), parser)
    records = run_records(out, settings, [Run(e, 1) for e in ENCODINGS])
    assert [r["still_improving"] for r in records] == [False, t5_improving]
    summary = [{"split": split, "encoding": e, "n": 1, "bleu_mean": mean, "bleu_sd": None,
                "chrf_mean": mean + 10, "chrf_sd": None,
                "p_value": None if e == "sinusoidal" else 0.001,
                "chrf_p_value": None if e == "sinusoidal" else 0.001, "significant": True,
                "chrf_significant": True, "params_added": 0, "speed_ratio": 1.0,
                "beyond_training": 0, "sentences": 80, "buckets": bins(mean, split == "test_long"),
                "target_buckets": bins(mean, False), "extrapolation": relative(mean),
                "still_improving": t5_improving and e == "t5"}
               for split in SPLITS for e, mean in zip(ENCODINGS, (30.0, 28.5))]
    return {"settings": settings.to_json(), "baseline": "sinusoidal", "encodings": ENCODINGS,
            "seeds": 1, "checkpoint_rule": "last", "decoding": "beam 10", "metric": "sacreBLEU",
            "runs": records, "summary": summary,
            "train_max_len": {"n": 10, "kept": 1500, "dropped": 20}}, out


@pytest.mark.parametrize("t5_improving", [True, False])
def test_the_report_says_each_thing_once_and_every_table_points_to_it(tmp_path, t5_improving):
    built, out = built_report(tmp_path, t5_improving)
    report.write(built, out, {})
    md = (out / "report.md").read_text()
    blocks = md.rstrip("\n").split("\n\n")
    data = built["settings"]["data"]

    # the title: the directory's name; the full path once, in the settings paragraph
    assert blocks[0] == "# Position encodings on my-corpus: en → de"
    assert md.count(data) == 1
    assert blocks[1].startswith(f"2 encodings × 1 seed on `{data}`, baseline `sinusoidal`.")
    page = (out / "report" / "index.html").read_text()
    assert "<title>Position encodings on my-corpus: en → de</title>" in page
    assert page.count(data) == 1

    # one "How to read", before the first table, with the significance note, the cells of the
    # tables by length, few, and the marker's note where a run is still improving
    assert md.count("How to read") == 1 and md.count(SIGNIFICANCE) == 1
    section = md[md.index("## How to read"):md.index("## test:")]
    assert "|" not in md[:md.index("## test:")]
    assert SIGNIFICANCE in section and "Varis and Bojar 2021" in section
    assert section.count("`few`: fewer than 30 sentences") == md.count("`few`: fewer than") == 1
    assert "Tables by source length relative to N = 10" in section
    assert md.count(MARKER) == (1 if t5_improving else 0)
    assert (MARKER in section) is t5_improving

    # every table of a split ends with a line linking there, saying † where the table has it
    tables = [i for i, b in enumerate(blocks) if b.startswith("| encoding | ")]
    assert len(tables) == 2 * 4 + 1  # per split: scores, source, reference, relative; runs
    *splits, runs = tables
    for i in splits:
        pointer = POINTER.match(blocks[i + 1])
        assert pointer, blocks[i + 1]
        assert bool(pointer.group(1)) is t5_improving
        assert ("| `t5` † |" in blocks[i]) is t5_improving
    assert (blocks[runs + 1:runs + 2] == ["What † means: [above](#how-to-read)."]) is t5_improving

    # the HTML page: the section has the anchor each table's line links to
    assert page.count('<h2 id="how-to-read">How to read</h2>') == 1
    assert set(re.findall(r'href="#([^"]+)"', page)) == {"how-to-read"}
    assert page.count(SIGNIFICANCE) == 1 and page.count(MARKER) == (1 if t5_improving else 0)
    assert len(re.findall(r'</table>\n<p>What (its cells|†)[^<]*<a href="#how-to-read">above</a>',
                          page)) == len(splits) + t5_improving
