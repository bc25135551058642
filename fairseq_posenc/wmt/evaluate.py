"""Translating and scoring one cell: every test sentence translated (a missing hypothesis is
an error; a source the model cannot represent is reported, see
:class:`~fairseq_posenc.extrapolation.Untranslatable`), detokenized, scored with sacreBLEU
as the paper did (cased, uncased with international tokenization, or tokenized), with chrF
and the scores by source length beside it; the result and the hypotheses are kept for the
table and its paired bootstrap.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Sequence

from ..evaluation import by_length, scoring
from ..extrapolation import LengthLimits, Untranslatable, checkpoint_limits, source_sizes
from ..hypotheses import MissingHypotheses, read as read_hypotheses
from .common import read_lines, write_text_atomic
from .execute import final_checkpoint, run_fairseq
from .manifest import load_manifest
from .runs import Run, Scale, decoding, generate_args
from .text import detokenize


def hypotheses(generate_output: Path, expected: int,
               untranslated: frozenset[int] = frozenset()) -> list[str]:
    """``H-<id>`` lines sorted by id (:func:`fairseq_posenc.hypotheses.read`); every
    sentence must be there but the ``untranslated`` ones, which get ``""``."""
    try:
        return read_hypotheses(generate_output, expected, untranslated)
    except MissingHypotheses as missing:
        raise SystemExit(str(missing)) from None


def score(hyps: Sequence[str], refs: Sequence[str], metric: str, lang: str):
    """sacreBLEU's BLEU as the paper reports it (:func:`fairseq_posenc.evaluation.bleu`)."""
    return scoring.bleu(hyps, refs, metric, lang)


def evaluate(runs: Sequence[Run], data: Path, work: Path, in_process: bool = False,
             scale: Scale = Scale()) -> None:
    # one checkpoint (and its limits) per training: AT5's four test years share one
    checkpoints: dict[Path, tuple[Path, LengthLimits]] = {}
    for run in runs:
        manifest = load_manifest(data / run.column.dataset)
        tests = {t["testset"]: t["split"] for t in manifest["tests"]}
        if run.column.testset not in tests:
            raise SystemExit(f"{run.column.dataset} has no {run.column.testset} test split "
                             f"(it has {sorted(tests)}); rerun prepare.py")
        split = tests[run.column.testset]
        save = run.save_dir(work)
        if save not in checkpoints:
            final = final_checkpoint(run, work)
            checkpoints[save] = final, checkpoint_limits(final)
        checkpoint, limits = checkpoints[save]
        bin_dir = data / run.column.dataset / "bin"
        lengths = source_sizes(bin_dir, split, run.column.src, run.column.tgt)
        skip = Untranslatable.of(limits, lengths)
        out_dir = (run.result_path(work).parent
                   / f"generate.{run.column.testset}{run.seed_suffix}")
        run_fairseq("fairseq-generate",
                    generate_args(run, data, checkpoint, split, out_dir,
                                  manifest["bpe"], skip, scale), in_process,
                    out_dir.with_name(out_dir.name + ".log"))
        refs_dir = data / run.column.dataset / "refs"
        ref_path = refs_dir / f"{run.column.testset}.{run.column.tgt}"
        src_path = refs_dir / f"{run.column.testset}.{run.column.src}"
        refs = read_lines(ref_path)
        hyps = hypotheses(out_dir / f"generate-{split}.txt", len(refs), skip.sentences)
        detok = detokenize(hyps, run.column.tgt, manifest["bpe"], manifest.get("tokenizer"))
        detok = ["" if i in skip.sentences else h for i, h in enumerate(detok)]
        hyp_path = run.result_path(work).with_suffix(f".hyp.{run.column.tgt}")
        write_text_atomic(hyp_path, "".join(h + "\n" for h in detok))
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
            "checkpoint": str(checkpoint),
            "train_corpora": manifest["train_corpora"], "seed": run.seed,
            "decoding": decoding(run.paper),
        })
        print(f"[reproduce] {run.paper.key} {run.row.label} {run.column.label}: "
              f"BLEU {scored.bleu:.2f}, chrF {scored.chrf:.2f} ({scored.bleu_signature})"
              + "".join(f"\n[reproduce]   {n}" for n in skip.notes(run.row.label)))


def write_json(path: Path, obj: dict) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1) + "\n")
