"""The papers' tables as Markdown: per cell the paper's BLEU, ours (mean ± standard
deviation over seeds) and the difference, chrF, the paired-bootstrap p-value against the
baseline row; under each table the signatures, the decoding, how to read the marks, the
training corpora, every setting that differs from the paper, and BLEU / chrF by source
length (with one plot per table).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Optional, Sequence

from ..evaluation import BucketScore, bucket_table, plot_buckets
from ..evaluation.significance import READING, bleu_bootstrap
from ..textprep.files import read_lines
from .recipes import PAPERS, Paper
from .runs import Run, decoding


def mean_std(values: Sequence[float]) -> str:
    """``mean ± sample standard deviation (n=k)``, or the value alone for one seed."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return (f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} "
            f"(n={len(values)})")


def significance(results: Sequence[dict], baselines: Sequence[dict]) -> Optional[str]:
    """``p 0.012*``: the row against the baseline, seed against seed (the largest p), or
    None where hypotheses are missing (results written before they were kept)."""
    by_seed = {res.get("seed", 1): res for res in baselines}
    pairs = [(by_seed[res.get("seed", 1)], res) for res in results
             if res.get("seed", 1) in by_seed]
    if not pairs or any("hypotheses" not in r or not Path(r["hypotheses"]).exists()
                        for pair in pairs for r in pair):
        return None
    tests = []
    for base, res in pairs:
        refs = read_lines(Path(res["references"]))
        tests.append(bleu_bootstrap(
            read_lines(Path(base["hypotheses"])), read_lines(Path(res["hypotheses"])), refs,
            res["metric"], res["pair"].split("-")[1]))
    p = max(t.p_value for t in tests)
    return f"p {p:.3f}" + ("*" if all(t.significant for t in tests) else "")


def cell(theirs: Optional[float], results: Sequence[dict],
         baselines: Sequence[dict], is_baseline: bool) -> str:
    """``paper / ours / diff`` (``ours`` alone where the recipe has no paper number), then
    chrF and the p-value against the baseline where the results have them."""
    bleus = [res["bleu"] for res in results]
    if not bleus:
        return "-" if theirs is None else f"{theirs:.2f} / - / -"
    ours = mean_std(bleus)
    text = ours if theirs is None else (
        f"{theirs:.2f} / {ours} / {statistics.mean(bleus) - theirs:+.2f}")
    chrfs = [res["chrf"] for res in results if "chrf" in res]
    if len(chrfs) == len(results):
        text += f"; chrF {mean_std(chrfs)}"
    if not is_baseline and (p := significance(results, baselines)):
        text += f"; {p}"
    return text


def table(work: Path, papers: Sequence[str]) -> str:
    """Each paper's table: the paper's BLEU, ours and the difference, as Markdown; then
    BLEU and chrF by source length (and one plot per table under ``work/results``)."""
    out: list[str] = []
    for key in papers:
        paper = PAPERS[key]
        has_paper = any(row.paper for row in paper.rows)
        what = "paper / ours / diff" if has_paper else "ours"
        out += [f"### {paper.title}", "",
                "| model | " + " | ".join(f"{c.label} {what}" for c in paper.columns) + " |",
                "|---|" + "---|" * len(paper.columns)]
        signatures, notes = set(), []
        baseline = paper.baseline_row
        for row in paper.rows:
            cells = []
            for i, col in enumerate(paper.columns):
                results = seed_results(Run(paper, row, col), work)
                signatures.update(res["signature"] for res in results)
                notes += [n for res in results[:1] for n in res.get("notes", ())]
                cells.append(cell(row.paper[i] if row.paper else None, results,
                                  seed_results(Run(paper, baseline, col), work),
                                  row is baseline))
            out.append(f"| {row.label} (`{row.encoding}`) | " + " | ".join(cells) + " |")
        out.append("")
        out += [f"sacreBLEU: `{s}`" for s in sorted(signatures)]
        out += [f"Decoding: {decoding(paper)}."]
        out += [READING.format(baseline=f"({baseline.label})")]
        out += corpora_notes(paper, work)
        out += [f"- {n}" for n in notes]
        out += length_tables(paper, work)
        out += ["", "Settings that differ from the paper:"]
        out += [f"- {d}" for d in paper.differences] + [""]
    return "\n".join(out)


def length_tables(paper: Paper, work: Path) -> list[str]:
    """Per column: BLEU / chrF of every row by source-length bucket (seed 1), as Markdown;
    all columns in one plot, ``results/PAPER/buckets.png``."""
    out: list[str] = []
    panels: dict[str, dict[str, list[BucketScore]]] = {}
    for col in paper.columns:
        rows = {}
        for row in paper.rows:
            path = Run(paper, row, col).result_path(work)
            result = json.loads(path.read_text()) if path.exists() else {}
            if "buckets" in result:
                rows[row.label] = [BucketScore(**b) for b in result["buckets"]]
        if rows:
            panels[col.label] = rows
            out += ["", f"{col.label}: BLEU / chrF by source length (Moses tokens; AT5's "
                        "bins; seed 1)", "", bucket_table(rows)]
    if panels:
        png = plot_buckets(panels, work / "results" / paper.key / "buckets.png",
                           f"{paper.title.split(':')[0]}: BLEU and chrF by source length")
        out += ["", f"Plot: `{png}`"]
    return out


def seed_results(run: Run, work: Path) -> list[dict]:
    """The results of every seed evaluated for ``run``'s cell (``TESTSET.json`` for seed 1,
    ``TESTSET.seedN.json`` for the others)."""
    first = run.result_path(work)
    paths = [first, *sorted(first.parent.glob(f"{run.column.testset}.seed*.json"))]
    return [json.loads(p.read_text()) for p in paths if p.exists()]


def corpora_notes(paper: Paper, work: Path) -> list[str]:
    """Per column whose paper names its training corpora: the paper's and our run's, and
    whether the cell is comparable."""
    notes = []
    for col in paper.columns:
        if not col.paper_corpora:
            continue
        ours = next((json.loads(path.read_text()).get("train_corpora")
                     for row in paper.rows
                     if (path := Run(paper, row, col).result_path(work)).exists()), None)
        if ours is None:
            continue
        same = sorted(ours) == sorted(col.paper_corpora)
        notes.append(f"{col.label} training data: the paper's {', '.join(col.paper_corpora)}; "
                     f"ours {', '.join(ours)}"
                     + ("" if same else " -- different data: not comparable"))
    return notes
