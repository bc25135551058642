"""Train, translate, score and tabulate the papers' WMT experiments (see ``recipes.py``).

Usage (after ``examples/wmt/prepare.py`` has prepared the datasets under ``--data``)::

    python examples/wmt/reproduce.py commands --paper diet            # print every command
    python examples/wmt/reproduce.py train    --paper diet --row DIET-REL --column EN-DE --gpus 8
    python examples/wmt/reproduce.py evaluate --paper diet --row DIET-REL --column EN-DE
    python examples/wmt/reproduce.py train    --paper at5 --seeds 3   # seeds 1..3 of each cell
    python examples/wmt/reproduce.py table                            # Markdown: paper, ours, diff
    python examples/wmt/reproduce.py smoke    --work /tmp/smoke       # whole chain, tiny, offline

Layout under ``--work`` (default ``work/wmt``): ``checkpoints/PAPER/ROW/DATASET.SRC-TGT/``
and ``results/PAPER/ROW/SRC-TGT/TESTSET.json`` (score, sacreBLEU signature, metric, number
of sentences, checkpoint). ``--data`` (default ``data/wmt``) holds one directory per dataset
as written by ``prepare.py`` (``bin/``, ``refs/``, ``manifest.json``).

Training follows each paper (``recipes.py``): Transformer base, the paper's batch in tokens
per update reached on any number of GPUs through ``--max-tokens`` per GPU and
``--update-freq``, the paper's number of updates. Evaluation averages the last checkpoints
where the paper's setup implies it (AT5: the checkpoint best on its validation set,
newstest2014), translates every test sentence (beam 10, length
penalty 0.6, ``--required-batch-size-multiple 1``; a missing hypothesis is an error),
detokenizes, and scores with sacreBLEU as the paper did: cased (DIET), uncased with
international tokenization (Chen 2021a: tensor2tensor's ``t2t-bleu``), or tokenized BLEU (AT5's multi-BLEU: Moses-tokenized hypothesis and reference,
``tokenize=none``). fairseq's ``scripts/average_checkpoints.py`` is not part of the
installed package, hence :func:`average_checkpoints`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
USER_DIR = ROOT / "fairseq_posenc"
sys.path.insert(0, str(HERE))  # recipes.py, beside this file

from recipes import BEAM, LENPEN, PAPERS, Column, Paper, Row  # noqa: E402

from fairseq_posenc.evaluation import (  # noqa: E402
    BucketScore, bucket_table, by_length, plot_buckets, scoring)
from fairseq_posenc.evaluation.significance import (  # noqa: E402
    ALPHA, N_RESAMPLES, bleu_bootstrap)
from fairseq_posenc.extrapolation import (  # noqa: E402
    Untranslatable, checkpoint_limits, source_sizes)
from fairseq_posenc.wmt import cli as prepare  # noqa: E402  (examples/wmt/prepare.py)
from fairseq_posenc.wmt.manifest import load_manifest  # noqa: E402
from fairseq_posenc.wmt.text import detokenize  # noqa: E402


# --- what to run -----------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    paper: Paper
    row: Row
    column: Column
    seed: int = 1  # fairseq-train --seed; seed 1 keeps the paths without a seed suffix

    @property
    def pair(self) -> str:
        return f"{self.column.src}-{self.column.tgt}"

    @property
    def seed_suffix(self) -> str:
        return "" if self.seed == 1 else f".seed{self.seed}"

    def save_dir(self, work: Path) -> Path:
        return work / "checkpoints" / self.paper.key / slug(self.row.label) / (
            f"{self.column.dataset}.{self.pair}{self.seed_suffix}")

    def result_path(self, work: Path) -> Path:
        return (work / "results" / self.paper.key / slug(self.row.label) / self.pair
                / f"{self.column.testset}{self.seed_suffix}.json")


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_").lower()


def select(paper: str, row: Optional[str] = None, column: Optional[str] = None,
           alternative_schedule: bool = False, seeds: int = 1) -> list[Run]:
    if paper not in PAPERS:
        raise SystemExit(f"unknown --paper {paper!r}; choose one of {', '.join(PAPERS)}")
    p = PAPERS[paper]
    if alternative_schedule:
        if p.alternative_schedule is None:
            raise SystemExit(f"--alternative-schedule: {paper} states its training length; "
                             "there is no other reading")
        max_update, average_last, _why = p.alternative_schedule
        p = dataclasses.replace(p, max_update=max_update, average_last=average_last)
    rows = [r for r in p.rows if row in (None, r.label, slug(r.label), r.encoding)]
    cols = [c for c in p.columns if column in (None, c.label)]
    if not rows or not cols:
        raise SystemExit(
            f"{paper} has rows {[r.label for r in p.rows]} and columns "
            f"{[c.label for c in p.columns]}; got --row {row!r} --column {column!r}")
    return [Run(p, r, c, seed) for seed in range(1, seeds + 1) for r in rows for c in cols]


def trainings(runs: Iterable[Run]) -> list[Run]:
    """One training per (row, dataset, direction): columns that differ only in the test set
    (AT5's four years) share a model."""
    seen: dict[tuple, Run] = {}
    for run in runs:
        seen.setdefault((run.paper.key, run.row.label, run.column.dataset, run.pair, run.seed),
                        run)
    return list(seen.values())


@dataclass(frozen=True)
class Scale:
    """What differs between the real recipe and the smoke mode."""

    arch_size: str = "transformer_wmt_en_de"
    max_update: Optional[int] = None  # None: the paper's
    max_tokens: int = 4096  # per GPU and forward pass
    gpus: int = 1
    extra_train: tuple[str, ...] = ()


def update_freq(paper: Paper, scale: Scale) -> int:
    return max(1, math.ceil(paper.batch_tokens / (scale.max_tokens * scale.gpus)))


def train_args(run: Run, data: Path, work: Path, scale: Scale) -> list[str]:
    """``fairseq-train`` arguments for one run (the program name excluded)."""
    paper = run.paper
    args = [
        str(data / run.column.dataset / "bin"),
        "--user-dir", str(USER_DIR),
        *(("--task", "translation_extrapolation", "--train-max-len", str(paper.train_max_len))
          if paper.train_max_len else ("--task", "translation")),
        "--source-lang", run.column.src, "--target-lang", run.column.tgt,
        "--arch", f"{scale.arch_size}_{run.row.encoding}",
        *paper.model_flags, *run.row.flags, *paper.train_flags,
        "--max-tokens", str(scale.max_tokens),
        "--update-freq", str(update_freq(paper, scale)),
        "--max-update", str(scale.max_update or paper.max_update),
        "--save-dir", str(run.save_dir(work)), "--seed", str(run.seed),
        "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "100",
    ]
    if paper.average_last:
        interval = max(1, (scale.max_update or paper.max_update) // 100)
        args += ["--save-interval-updates", str(interval),
                 "--keep-interval-updates", str(paper.average_last)]
    # Always: fairseq's default world size is every visible GPU, and --update-freq above
    # is computed for scale.gpus of them.
    args += ["--distributed-world-size", str(scale.gpus)]
    return args + list(scale.extra_train)


def generate_args(run: Run, data: Path, checkpoint: Path, split: str, results: Path,
                  bpe: str, limits: Optional[Untranslatable] = None) -> list[str]:
    """``fairseq-generate`` arguments; ``limits``: sources the model cannot represent are
    skipped (and reported by :func:`evaluate`), outputs capped at the decoder's table."""
    post = ["--remove-bpe"] if bpe == "subword-nmt" else ["--post-process", "sentencepiece"]
    return [
        str(data / run.column.dataset / "bin"),
        "--user-dir", str(USER_DIR),
        # translation_gnmt: fairseq's translation, hypotheses normalized by GNMT's penalty
        "--task", "translation_gnmt" if run.paper.length_penalty == "gnmt" else "translation",
        "--source-lang", run.column.src, "--target-lang", run.column.tgt,
        "--path", str(checkpoint), "--gen-subset", split,
        "--beam", str(BEAM), "--lenpen", str(LENPEN), *post,
        # fairseq's default multiple of 8 silently drops a last, smaller batch
        "--required-batch-size-multiple", "1", "--max-tokens", "8000",
        "--results-path", str(results), "--num-workers", "0",
        *(limits.generate_flags() if limits else ()),
    ]


# --- running fairseq -------------------------------------------------------------------


def run_fairseq(tool: str, args: Sequence[str], in_process: bool) -> None:
    """``fairseq-train`` / ``fairseq-generate`` as a subprocess (the recipe), or in this
    process with the same arguments (the smoke mode: no interpreter start-up per run)."""
    if not in_process:
        exe = Path(sys.executable).parent / tool
        # fairseq logs to stdout; keep stdout for results (the smoke mode prints tables)
        subprocess.run([str(exe) if exe.exists() else tool, *args], check=True, stdout=2)
        return
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import generate, train

    if tool == "fairseq-train":
        from fairseq import checkpoint_utils

        # fairseq keeps the best validation loss so far on the function; a new process
        # starts without it, so must each in-process training (or it never writes
        # checkpoint_best.pt unless it beats an earlier, unrelated model)
        if hasattr(checkpoint_utils.save_checkpoint, "best"):
            del checkpoint_utils.save_checkpoint.best
        parsed = options.parse_args_and_arch(options.get_training_parser(), list(args))
        distributed_utils.call_main(convert_namespace_to_omegaconf(parsed), train.main)
    elif tool == "fairseq-generate":
        parsed = options.parse_args_and_arch(options.get_generation_parser(), list(args))
        generate.main(parsed)
    else:
        raise ValueError(tool)


def train(run: Run, data: Path, work: Path, scale: Scale, in_process: bool = False) -> None:
    run.save_dir(work).mkdir(parents=True, exist_ok=True)
    run_fairseq("fairseq-train", train_args(run, data, work, scale), in_process)


def average_checkpoints(paths: Sequence[Path], out: Path) -> Path:
    """Parameter-wise mean of ``paths`` (as fairseq's scripts/average_checkpoints.py), the
    rest of the state from the last one. Written to a temporary name, then renamed."""
    import torch
    from fairseq_posenc.checkpoint import register_safe_globals

    register_safe_globals()  # fairseq's checkpoint globals for torch.load(weights_only=True)
    states = [torch.load(p, map_location="cpu") for p in paths]
    averaged = dict(states[-1])
    averaged["model"] = {
        k: (sum(s["model"][k].double() for s in states) / len(states)).to(v.dtype)
        if v.is_floating_point() else v
        for k, v in states[-1]["model"].items()
    }
    tmp = out.with_suffix(".tmp")
    torch.save(averaged, tmp)
    os.replace(tmp, out)
    return out


def final_checkpoint(run: Run, work: Path) -> Path:
    save = run.save_dir(work)
    last = save / "checkpoint_last.pt"
    if not last.exists():
        raise SystemExit(f"{last} does not exist: train first (reproduce.py train ...)")
    n = run.paper.average_last
    if not n and run.paper.checkpoint == "best":
        best = save / "checkpoint_best.pt"
        if not best.exists():
            raise SystemExit(f"{best} does not exist: {run.paper.key} evaluates the checkpoint "
                             "chosen on the validation set, which fairseq-train writes when it "
                             "validates; train with validation on (no --disable-validation)")
        return best
    if not n:
        return last

    def updates(p: Path) -> int:
        return int(p.stem.rsplit("_", 1)[1])

    kept = sorted(save.glob("checkpoint_*_*.pt"), key=updates)[-n:]
    if len(kept) < n:
        print(f"[reproduce] warning: {len(kept)} interval checkpoints in {save}, the paper "
              f"averages {n}", file=sys.stderr)
    if not kept:
        return last
    return average_checkpoints(kept, save / f"checkpoint_avg{n}.pt")


# --- scoring ---------------------------------------------------------------------------


def hypotheses(generate_output: Path, expected: int,
               untranslated: frozenset[int] = frozenset()) -> list[str]:
    """``H-<id>`` lines sorted by id; every sentence must be there but the ``untranslated``
    ones (sources the model cannot represent), which must not and get ``""``."""
    hyps: dict[int, str] = {}
    for line in generate_output.read_text(encoding="utf-8").splitlines():
        if line.startswith("H-"):
            head, _score, text = (line.split("\t") + [""])[:3]
            hyps[int(head[2:])] = text
    missing = sorted(set(range(expected)) - set(hyps) - untranslated)
    if missing or len(hyps) + len(untranslated) != expected:
        raise SystemExit(
            f"{generate_output}: {len(hyps)} hypotheses for {expected} test sentences "
            f"(missing ids {missing[:10]}...). fairseq dropped sentences: check "
            "--required-batch-size-multiple 1 and --max-source-positions.")
    return [hyps.get(i, "") for i in range(expected)]


def score(hyps: Sequence[str], refs: Sequence[str], metric: str, lang: str):
    """sacreBLEU's BLEU as the paper reports it (:func:`fairseq_posenc.evaluation.bleu`)."""
    return scoring.bleu(hyps, refs, metric, lang)


def evaluate(runs: Sequence[Run], data: Path, work: Path, in_process: bool = False) -> None:
    checkpoints: dict[Path, Path] = {}
    for run in runs:
        manifest = load_manifest(data / run.column.dataset)
        tests = {t["testset"]: t["split"] for t in manifest["tests"]}
        if run.column.testset not in tests:
            raise SystemExit(f"{run.column.dataset} has no {run.column.testset} test split "
                             f"(it has {sorted(tests)}); rerun prepare.py")
        split = tests[run.column.testset]
        save = run.save_dir(work)
        if save not in checkpoints:
            checkpoints[save] = final_checkpoint(run, work)
        bin_dir = data / run.column.dataset / "bin"
        limits = checkpoint_limits(checkpoints[save])
        lengths = source_sizes(bin_dir, split, run.column.src, run.column.tgt)
        skip = Untranslatable.of(limits, lengths)
        out_dir = (run.result_path(work).parent
                   / f"generate.{run.column.testset}{run.seed_suffix}")
        run_fairseq("fairseq-generate",
                    generate_args(run, data, checkpoints[save], split, out_dir,
                                  manifest["bpe"], skip), in_process)
        refs_dir = data / run.column.dataset / "refs"
        ref_path = refs_dir / f"{run.column.testset}.{run.column.tgt}"
        src_path = refs_dir / f"{run.column.testset}.{run.column.src}"
        refs = read_lines(ref_path)
        hyps = hypotheses(out_dir / f"generate-{split}.txt", len(refs), skip.sentences)
        detok = detokenize(hyps, run.column.tgt, manifest["bpe"], manifest.get("tokenizer"))
        detok = ["" if i in skip.sentences else h for i, h in enumerate(detok)]
        hyp_path = run.result_path(work).with_suffix(f".hyp.{run.column.tgt}")
        hyp_path.write_text("".join(h + "\n" for h in detok), encoding="utf-8")
        scored = scoring.score(detok, refs, run.paper.metric, run.column.tgt)
        buckets = by_length(read_lines(src_path), detok, refs, run.paper.metric,
                            run.column.src, run.column.tgt,
                            untranslated=[i in skip.sentences for i in range(len(refs))])
        write_json(run.result_path(work), {
            "paper": run.paper.key, "row": run.row.label, "column": run.column.label,
            "encoding": run.row.encoding, "testset": run.column.testset, "pair": run.pair,
            "metric": run.paper.metric, "bleu": round(scored.bleu, 2),
            "signature": scored.bleu_signature, "chrf": round(scored.chrf, 2),
            "chrf_signature": scored.chrf_signature, "sentences": len(refs),
            "untranslated": sorted(skip.sentences), "notes": skip.notes(run.row.label),
            "buckets": [dataclasses.asdict(b) for b in buckets],
            "hypotheses": str(hyp_path), "references": str(ref_path), "source": str(src_path),
            "checkpoint": str(checkpoints[save]),
            "train_corpora": manifest["train_corpora"], "seed": run.seed,
            "decoding": decoding(run.paper),
        })
        print(f"[reproduce] {run.paper.key} {run.row.label} {run.column.label}: "
              f"BLEU {scored.bleu:.2f}, chrF {scored.chrf:.2f} ({scored.bleu_signature})"
              + "".join(f"\n[reproduce]   {n}" for n in skip.notes(run.row.label)))


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


# --- table -----------------------------------------------------------------------------

#: Printed under every table: what the marks mean, and how not to over-read them.
READING = (
    "How to read: `chrF` is sacreBLEU's chrF2 on the same hypotheses; `p` is sacreBLEU's "
    f"paired bootstrap ({N_RESAMPLES} resamples) of the row's BLEU against the baseline row "
    "{baseline} on the same test sentences (with several seeds: the largest p over the seed "
    f"pairs), `*` where p < {ALPHA} (never for equal scores). p measures only which "
    "sentences the test set holds: a difference smaller than the seeds' standard deviation "
    "is within training noise, whatever p says -- train --seeds 3 or more before reading one.")


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


def decoding(paper: Paper) -> str:
    penalty = (f"GNMT length penalty ((5 + L) / 6)^{LENPEN}" if paper.length_penalty == "gnmt"
               else f"fairseq's length penalty L^{LENPEN}")
    return f"beam {BEAM}, {penalty}"


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


# --- smoke mode ------------------------------------------------------------------------

SMOKE = Scale(arch_size="transformer_tiny", max_update=2, max_tokens=2000, extra_train=(
    "--num-workers", "0", "--no-progress-bar", "--log-interval", "1",
    # a validation set of a few sentences would be dropped whole by the default multiple 8
    "--required-batch-size-multiple", "1",
    "--max-source-positions", "256", "--max-target-positions", "256"))


def smoke(work: Path, papers: Sequence[str], bpe_size: int = 60) -> str:
    """Every step on CPU in minutes: fake archives with the real layout (served from
    a local directory), preparation, a tiny model per table cell trained for 2 updates,
    translation, scoring, tables. The BLEU is meaningless; the chain is what is tested."""
    from fairseq_posenc.wmt import fake_archives

    data = work / "data"
    mirror = fake_archives.build_fake_mirror(work / "mirror")
    runs = [run for key in papers for run in select(key)]
    for dataset in sorted({run.column.dataset for run in runs}):
        code = prepare.main([dataset, "--dest", str(data / dataset), "--bpe-size",
                             str(bpe_size), *fake_archives.prepare_flags(mirror)])
        if code:
            raise SystemExit(f"prepare.py {dataset} failed (exit code {code})")
    for n, run in enumerate(trainings(runs)):
        with quiet():  # the first run as users run it: the fairseq-train console script
            train(run, data, work, SMOKE, in_process=n > 0)
    with quiet():
        evaluate(runs[:1], data, work, in_process=False)  # and fairseq-generate likewise
        evaluate(runs[1:], data, work, in_process=True)
    return table(work, papers)


@contextlib.contextmanager
def quiet():
    """fairseq logs every step; keep the smoke output to the table."""
    import logging

    level = logging.root.level
    logging.root.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        logging.root.setLevel(level)


# --- command line ----------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("commands", "train", "evaluate"):
        p = sub.add_parser(name)
        p.add_argument("--paper", required=True, choices=sorted(PAPERS))
        p.add_argument("--row", help="a row label, its slug or its encoding (default: all)")
        p.add_argument("--column", help="a column label, e.g. EN-DE or 2016 (default: all)")
        p.add_argument("--data", type=Path, default=Path("data/wmt"))
        p.add_argument("--work", type=Path, default=Path("work/wmt"))
        p.add_argument("--seeds", type=int, default=1, metavar="N",
                       help="train and evaluate seeds 1..N of every cell; the table shows "
                            "mean +- standard deviation (n) where a cell has several")
        p.add_argument("--alternative-schedule", action="store_true",
                       help="the other reading of a paper's unstated training length (Chen "
                            "2021a: DIET's 250k updates without averaging)")
        if name != "evaluate":
            p.add_argument("--gpus", type=int, default=1,
                           help="GPUs per run: sets --distributed-world-size and, with "
                                "--max-tokens, the --update-freq that gives the paper's batch")
            p.add_argument("--max-tokens", type=int, default=4096,
                           help="tokens per GPU and forward pass (default 4096)")
    p = sub.add_parser("table")
    p.add_argument("--work", type=Path, default=Path("work/wmt"))
    p.add_argument("--paper", action="append", choices=sorted(PAPERS))
    p = sub.add_parser("smoke")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--paper", action="append", choices=sorted(PAPERS))
    args = parser.parse_args(argv)

    if args.command == "table":
        print(table(args.work, args.paper or list(PAPERS)))
    elif args.command == "smoke":
        print(smoke(args.work, args.paper or list(PAPERS)))
    else:
        if args.seeds < 1:
            parser.error("--seeds must be at least 1")
        runs = select(args.paper, args.row, args.column, args.alternative_schedule, args.seeds)
        if args.command == "evaluate":
            evaluate(runs, args.data, args.work)
            return
        scale = Scale(gpus=args.gpus, max_tokens=args.max_tokens)
        for run in trainings(runs):
            if args.command == "commands":
                print(" ".join(["fairseq-train", *map(quote, train_args(run, args.data,
                                                                         args.work, scale))]))
            else:
                train(run, args.data, args.work, scale)


def quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


if __name__ == "__main__":
    main()
