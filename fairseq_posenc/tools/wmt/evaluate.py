"""Translating and scoring one cell: the test set translated by the shared runner
(:func:`fairseq_posenc.tools.experiment.translate.translate`: every sentence, a source the model
cannot represent reported, detokenized), scored with sacreBLEU as the paper did (cased,
uncased with international tokenization, or tokenized), with chrF and the scores by source
length beside it; the result and the hypotheses are kept for the table and its paired
bootstrap.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Sequence

from ..evaluation import AT5_BINS, by_length, scoring
from ..experiment.translate import hypotheses, translate  # noqa: F401  (hypotheses: API)
from ..textprep.files import read_lines, write_text_atomic
from .execute import final_checkpoint
from .manifest import load_manifest
from .runs import Run, Scale, decoding, generate_task


def score(hyps: Sequence[str], refs: Sequence[str], metric: str, lang: str):
    """sacreBLEU's BLEU as the paper reports it (:func:`fairseq_posenc.tools.evaluation.bleu`)."""
    return scoring.bleu(hyps, refs, metric, lang)


def evaluate(runs: Sequence[Run], data: Path, work: Path, in_process: bool = False,
             scale: Scale = Scale()) -> None:
    # one checkpoint per training: AT5's four test years share one (and its average)
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
        checkpoint = checkpoints[save]
        out_dir = (run.result_path(work).parent
                   / f"generate.{run.column.testset}{run.seed_suffix}")
        done = translate(data / run.column.dataset / "bin", checkpoint, split, run.column.src,
                         run.column.tgt, out_dir, manifest,
                         hyp_path=run.result_path(work).with_suffix(f".hyp.{run.column.tgt}"),
                         task=generate_task(run.paper), label=run.row.label,
                         in_process=in_process, max_output=scale.max_output)
        refs_dir = data / run.column.dataset / "refs"
        ref_path = refs_dir / f"{run.column.testset}.{run.column.tgt}"
        src_path = refs_dir / f"{run.column.testset}.{run.column.src}"
        refs = read_lines(ref_path)
        if len(refs) != len(done.hypotheses):
            raise SystemExit(f"{ref_path}: {len(refs)} references for the "
                             f"{len(done.hypotheses)} sentences of the {split} split; rerun "
                             "prepare.py")
        detok = done.hypotheses
        scored = scoring.score(detok, refs, run.paper.metric, run.column.tgt)
        buckets = by_length(read_lines(src_path), detok, refs, run.paper.metric,
                            run.column.src, run.column.tgt, bins=AT5_BINS,
                            untranslated=[i in done.untranslated for i in range(len(refs))])
        write_json(run.result_path(work), {
            "paper": run.paper.key, "row": run.row.label, "column": run.column.label,
            "encoding": run.row.encoding, "testset": run.column.testset, "pair": run.pair,
            "metric": run.paper.metric, "bleu": round(scored.bleu, 2),
            "signature": scored.bleu_signature, "chrf": round(scored.chrf, 2),
            "chrf_signature": scored.chrf_signature, "sentences": len(refs),
            "untranslated": sorted(done.untranslated), "notes": done.notes,
            "buckets": [dataclasses.asdict(b) for b in buckets],
            "hypotheses": str(done.hyp_path), "references": str(ref_path),
            "source": str(src_path), "checkpoint": str(checkpoint),
            "train_corpora": manifest["train_corpora"], "seed": run.seed,
            "decoding": decoding(run.paper),
        })
        print(f"[reproduce] {run.paper.key} {run.row.label} {run.column.label}: "
              f"BLEU {scored.bleu:.2f}, chrF {scored.chrf:.2f} ({scored.bleu_signature})"
              + "".join(f"\n[reproduce]   {n}" for n in done.notes))


def write_json(path: Path, obj: dict) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1) + "\n")
