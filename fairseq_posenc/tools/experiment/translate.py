"""Translating one test split: the ``fairseq-generate`` arguments (beam 10, length penalty
0.6, every sentence kept), the sources the model cannot represent skipped and reported
(:class:`~fairseq_posenc.plugin.extrapolation.Untranslatable`), every hypothesis read in the test
set's order (a missing one is an error), detokenized as the data was prepared, and written
to a file for scoring and the paired bootstrap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, AbstractSet, Callable, Optional, Sequence

from ..hypotheses import MissingHypotheses, read as read_hypotheses
from ..textprep.files import write_text_atomic
from ..textprep.text import detokenize
from .fairseq_run import USER_DIR, run_fairseq

if TYPE_CHECKING:  # imported by translate(): it needs fairseq, the arguments do not
    from ...plugin.extrapolation import Untranslatable

#: The decoding of the three papers' tables, and of every other translation by default: all
#: three papers decode with beam 10 (AT5: not stated) and alpha 0.6.
BEAM, LENPEN = 10, 0.6


@dataclass(frozen=True)
class Translation:
    """One test split translated by one checkpoint."""

    hypotheses: list[str]  # detokenized, one per test sentence in order; "" if untranslated
    untranslated: frozenset[int]  # ids of the sources the model cannot represent
    notes: list[str]  # what was skipped or capped, and why (Untranslatable.notes)
    hyp_path: Path  # the detokenized hypotheses, one per line
    log: Path  # fairseq-generate's log


def generate_args(data_bin: Path, checkpoint: Path, split: str, src: str, tgt: str,
                  results: Path, *, bpe: str = "subword-nmt", task: str = "translation",
                  limits: Optional[Untranslatable] = None, max_output: Optional[int] = None,
                  beam: int = BEAM, lenpen: float = LENPEN,
                  user_dir: Path = USER_DIR) -> list[str]:
    """``fairseq-generate`` arguments (the program name excluded). ``bpe``: how the data
    was split into subwords ("subword-nmt" or "sentencepiece"), undone by fairseq;
    ``limits``: sources the model cannot represent are skipped, outputs capped at the
    decoder's table; ``max_output`` caps them further; ``user_dir``: fairseq's
    ``--user-dir`` (a user's own, :mod:`.user_dir`, whose ``__init__`` imports the plugin)."""
    post = ["--remove-bpe"] if bpe == "subword-nmt" else ["--post-process", "sentencepiece"]
    cap = limits.target_cap if limits else None
    tighter = max_output is not None and (cap is None or max_output < cap)
    return [
        str(data_bin),
        "--user-dir", str(user_dir),
        "--task", task,
        "--source-lang", src, "--target-lang", tgt,
        "--path", str(checkpoint), "--gen-subset", split,
        "--beam", str(beam), "--lenpen", str(lenpen), *post,
        # fairseq's default multiple of 8 silently drops a last, smaller batch
        "--required-batch-size-multiple", "1", "--max-tokens", "8000",
        "--results-path", str(results), "--num-workers", "0",
        *(limits.generate_flags() if limits else ()),
        # fairseq reads the last of a repeated flag
        *(("--max-len-a", "0", "--max-len-b", str(max_output)) if tighter else ()),
    ]


def hypotheses(generate_output: Path, expected: int,
               untranslated: AbstractSet[int] = frozenset()) -> list[str]:
    """``H-<id>`` lines sorted by id (:func:`fairseq_posenc.tools.hypotheses.read`); every
    sentence must be there but the ``untranslated`` ones, which get ``""``; a missing one
    stops the run (:class:`SystemExit`)."""
    try:
        return read_hypotheses(generate_output, expected, untranslated)
    except MissingHypotheses as missing:
        raise SystemExit(str(missing)) from None


def translate(data_bin: Path, checkpoint: Path, split: str, src: str, tgt: str, out_dir: Path,
              subword: dict, *, hyp_path: Path, task: str = "translation", label: str = "",
              in_process: bool = False, max_output: Optional[int] = None,
              say: Optional[Callable[[str], None]] = None, beam: int = BEAM,
              lenpen: float = LENPEN, extra: Sequence[str] = (),
              user_dir: Path = USER_DIR) -> Translation:
    """Translate ``split`` of the binarized ``data_bin`` with ``checkpoint``:
    ``fairseq-generate`` writes into ``out_dir`` (its log beside it, ``out_dir`` + ``.log``);
    the hypotheses, detokenized as ``subword`` says (bpe.json or a manifest: ``bpe`` and
    ``tokenizer``, see :func:`fairseq_posenc.tools.textprep.text.detokenize`), go to ``hyp_path``.
    ``label`` names the model in the notes on skipped sources; ``extra``: more
    fairseq-generate flags (``--cpu``); ``user_dir``: its ``--user-dir`` (a user's own must
    be imported in this process already: the checkpoint is read here first). A damaged
    checkpoint, or one of another model, stops with :class:`SystemExit` naming it, before
    fairseq-generate starts."""
    from ...plugin.extrapolation import Untranslatable, checkpoint_limits, source_sizes

    lengths = source_sizes(data_bin, split, src, tgt)
    try:
        limits = checkpoint_limits(checkpoint)  # the first read of the checkpoint
    except ValueError as e:  # damaged, or not a fairseq-posenc model's: the message says
        raise SystemExit(str(e)) from None
    skip = Untranslatable.of(limits, lengths)
    log = out_dir.with_name(out_dir.name + ".log")
    run_fairseq("fairseq-generate",
                generate_args(data_bin, checkpoint, split, src, tgt, out_dir,
                              bpe=subword["bpe"], task=task, limits=skip,
                              max_output=max_output, beam=beam, lenpen=lenpen,
                              user_dir=user_dir) + list(extra),
                log=log, in_process=in_process, say=say)
    hyps = hypotheses(out_dir / f"generate-{split}.txt", len(lengths), skip.sentences)
    detok = detokenize(hyps, tgt, subword["bpe"], subword.get("tokenizer"))
    detok = ["" if i in skip.sentences else h for i, h in enumerate(detok)]
    write_text_atomic(hyp_path, "".join(h + "\n" for h in detok))
    return Translation(detok, skip.sentences, skip.notes(label), hyp_path, log)
