"""posenc-compare's report built without training (tests/tools/test_compare_*.py): a prepared
directory as ``posenc-prepare-corpus`` leaves one, from sentences given as word lists, the
``result.json`` a run leaves after translating a test split, from hypotheses given as text,
and the train.log and trained.json of finished runs, from validation curves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import sacrebleu

import tests.support.cli_utils as cu
from fairseq_posenc.tools.compare.plan import Run
from fairseq_posenc.tools.textprep.text import TOKENIZER


def write_prepared(root: Path, splits: dict[str, tuple[Sequence[Sequence[str]],
                                                       Sequence[Sequence[str]]]]) -> Path:
    """``root`` with bin/, bpe/bpe.json, raw/ and prepared.json for ``splits`` (``train``,
    ``valid`` and ``test``: sources and targets, a word a token), binarized by fairseq."""
    raw = root / "raw"
    raw.mkdir(parents=True)
    for split, (sources, targets) in splits.items():
        cu.write_lines(raw / f"{split}.{cu.SRC}", (" ".join(s) for s in sources))
        cu.write_lines(raw / f"{split}.{cu.TGT}", (" ".join(t) for t in targets))
    cu.preprocess_translation_data(raw, root / "bin")
    (root / "bpe").mkdir()
    (root / "bpe" / "bpe.json").write_text(json.dumps(
        {"bpe": "subword-nmt", "langs": [cu.SRC, cu.TGT], "tokenizer": TOKENIZER}))
    (root / "prepared.json").write_text(json.dumps(
        {"tests": ["test"], "valid": "valid",
         "pairs": {split: len(sources) for split, (sources, _) in splits.items()}}))
    return root


def fake_result(out: Path, run: Run, name: str, refs: list[str], hyps: list[str],
                flags: tuple = ()) -> None:
    """``run``'s translation of the test split ``name`` as :mod:`.execute` leaves it."""
    where = run.test_dir(out, name)
    where.mkdir(parents=True)
    cu.write_lines(where / f"hyp.{cu.TGT}", hyps)
    bleu, chrf = sacrebleu.corpus_bleu(hyps, [refs]), sacrebleu.corpus_chrf(hyps, [refs])
    (where / "result.json").write_text(json.dumps({
        "bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2), "sentences": len(refs),
        "untranslated": [], "hypotheses": str(where / f"hyp.{cu.TGT}"),
        "bleu_signature": "b", "chrf_signature": "c",
        **({"flags": list(flags)} if flags else {})}))


def valid_line(update: int, loss: float) -> str:
    """A validation as fairseq-train logs it (--log-format simple)."""
    return (f"2026-11-26 09:22:52 | INFO | valid | epoch 001 | valid on 'valid' subset | "
            f"loss {loss} | nll_loss {loss - 0.4} | ppl 9.9 | wps 59010.8 | wpb 2111.5 | "
            f"bsz 148 | num_updates {update}\n")


def fake_comparison(out: Path, curves: dict[tuple[str, int], list[tuple[int, float]]]) -> None:
    """Under ``out``, each ``(encoding, seed)`` run trained with the validations ``(update,
    loss)`` of its curve: its train.log and trained.json as :mod:`.execute` leaves them."""
    for (encoding, seed), points in curves.items():
        run = Run(encoding, seed)
        run.dir(out).mkdir(parents=True)
        run.train_log(out).write_text("".join(valid_line(u, v) for u, v in points))
        run.trained(out).write_text(json.dumps({
            "checkpoint": str(run.save_dir(out) / "checkpoint_last.pt"),
            "last_update": points[-1][0], "words_per_second": 1000.0}))
