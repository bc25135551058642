"""Any parallel corpus of raw text as a fairseq data directory, by the WMT preparation's own
tokenize / subword / binarize steps (:mod:`fairseq_posenc.tools.textprep.text`).

    posenc-prepare-corpus RAW_DIR --source-lang en --target-lang de --dest DIR \\
        [--valid valid] [--test test test_long] [--bpe-merges 2000]

``RAW_DIR`` holds one file per split and language, ``SPLIT.LANG`` (``train.en``,
``train.de``, ...), a sentence per line, in UTF-8: a file in another encoding is refused
before anything is written, naming its first line that is not UTF-8 and what it looks like
(:func:`fairseq_posenc.tools.textprep.encoding.check_utf8`); a UTF-8 byte-order mark at the
start is dropped. ``DIR`` gets:

* ``raw/``: a copy of the validation and test splits as given, the references and sources
  that translations are scored against;
* ``tok/``: sacremoses tokens (``-a``, no escaping), each token that was attached to the
  previous one in the raw text marked with a joiner, as ``posenc-prepare-wmt`` tokenizes;
  with ``--clean-max-len`` / ``--clean-max-ratio``, ``train.clean.LANG``: the training
  pairs that the WMT preparation's cleaning keeps
  (:func:`fairseq_posenc.tools.textprep.text.clean_corpus`);
* ``bpe/``: joint BPE learned on the (cleaned) training split with subword-nmt (``codes``,
  ``vocab.LANG``, ``bpe.json``), and every split encoded with it;
* ``bin/``: ``fairseq-preprocess --joined-dictionary``; the test splits become fairseq's
  ``test``, ``test1``, ... in the order given;
* ``prepared.json``: the pairs per split and what the cleaning dropped, and why.

The demo (``scripts/demo.sh``) prepares its toy corpus with it, and ``posenc-compare``
prepares raw data with it. fairseq-generate's output decodes back to raw text with
``posenc-hypotheses LOG --expected N --detokenize DIR/bpe`` (the joiners make that the exact
inverse of the tokenization), and new text encodes with
:func:`fairseq_posenc.tools.textprep.text.encode` (``DIR/bpe``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from .textprep.encoding import check_utf8
from .textprep.text import Cleaning
from .textprep.files import PrepareError, count_lines, default_workers, write_text_atomic
from .textprep.text import (apply_subword_nmt, binarize, clean_corpus, learn_subword_nmt,
                       moses_process_file, subword_settings)


def log(msg: str) -> None:
    print(f"[prepare-corpus] {msg}", file=sys.stderr, flush=True)


def check_raw(raw: Path, src: str, tgt: str, splits: Sequence[str]) -> dict[str, int]:
    """The sentence pairs of each split of a raw corpus, or a :class:`PrepareError` that
    says what is missing, not UTF-8 (:func:`.textprep.encoding.check_utf8`) or uneven
    (every file is read twice, nothing is written)."""
    missing = [f"{raw / f'{s}.{lang}'}" for s in splits for lang in (src, tgt)
               if not (raw / f"{s}.{lang}").is_file()]
    if missing:
        raise PrepareError(f"missing raw files: {', '.join(missing)}; name them SPLIT.LANG "
                           "(train, the --valid and --test splits)")
    if len(set(splits)) != len(splits):
        raise PrepareError(f"each split once: got {list(splits)}")
    sizes = {}
    for split in splits:
        for lang in (src, tgt):
            check_utf8(raw / f"{split}.{lang}")
        counts = {lang: count_lines(raw / f"{split}.{lang}") for lang in (src, tgt)}
        if len(set(counts.values())) > 1:
            raise PrepareError(f"{split}: {counts[src]} {src} lines but {counts[tgt]} {tgt} "
                               "lines; the files must have one line per sentence pair")
        if counts[src] == 0:
            raise PrepareError(f"{split}: {raw / f'{split}.{src}'} is empty")
        sizes[split] = counts[src]  # every later step keeps the line count (map_file checks)
    return sizes


def prepare_corpus(raw: Path, src: str, tgt: str, dest: Path, valid: str = "valid",
                   tests: Sequence[str] = ("test",), merges: int = 32000,
                   vocabulary_threshold: int = 1, workers: int = 1,
                   cleaning: Optional[Cleaning] = None) -> dict[str, Any]:
    """Tokenize, clean the training pairs (with ``cleaning``), learn and apply joint BPE,
    binarize (see the module docstring). Returns what ``prepared.json`` holds: ``pairs``
    per split (``train`` as given, ``valid``, then the tests) and ``cleaning`` (None, or
    the rule, the pairs read and kept, and the pairs dropped per reason)."""
    splits = ["train", valid, *tests]
    sizes = check_raw(raw, src, tgt, splits)
    tok, bpe, copies = dest / "tok", dest / "bpe", dest / "raw"
    for d in (tok, bpe, copies):
        d.mkdir(parents=True, exist_ok=True)
    for split in (valid, *tests):
        for lang in (src, tgt):
            shutil.copyfile(raw / f"{split}.{lang}", copies / f"{split}.{lang}")
    log(f"tokenize (sacremoses, joiners) -> {tok}")
    for split in splits:
        for lang in (src, tgt):
            moses_process_file(raw / f"{split}.{lang}", tok / f"{split}.{lang}", lang, True,
                               workers)
    train, cleaned = "train", None
    if cleaning is not None:
        train, reasons = "train.clean", {}
        read, kept, _ = clean_corpus(tuple(tok / f"train.{lang}" for lang in (src, tgt)),
                                     tuple(tok / f"train.clean.{lang}" for lang in (src, tgt)),
                                     cleaning, reasons=reasons)
        cleaned = {"rule": dataclasses.asdict(cleaning), "read": read, "kept": kept,
                   "dropped": {why: n for why, n in reasons.items() if n}}
        log(f"clean: kept {kept:,} of {read:,} training pairs" + "".join(
            f"; {n:,} dropped: {why}" for why, n in cleaned["dropped"].items()))
        if kept == 0:
            raise PrepareError(f"cleaning kept no training pair of {read}: check "
                               f"{raw / f'train.{src}'} (or loosen --clean-max-len / "
                               "--clean-max-ratio)")
    log(f"joint BPE ({merges} merges, subword-nmt) -> {bpe}")
    learned = learn_subword_nmt([tok / f"{train}.{lang}" for lang in (src, tgt)], bpe / "codes",
                                [bpe / f"vocab.{lang}" for lang in (src, tgt)], merges, workers)
    # A small corpus runs out of pairs that occur twice before the merges asked for.
    log(f"learned {learned} merges")
    settings = subword_settings({"bpe": "subword-nmt", "merges": merges,
                                 "vocabulary_threshold": vocabulary_threshold}, (src, tgt))
    write_text_atomic(bpe / "bpe.json",
                      json.dumps({**settings, "learned_merges": learned}, indent=1) + "\n")
    for split in splits:
        for lang in (src, tgt):
            source = tok / f"{train if split == 'train' else split}.{lang}"
            apply_subword_nmt(source, bpe / f"{split}.{lang}", bpe / "codes",
                              bpe / f"vocab.{lang}", vocabulary_threshold, workers)
    names = ", ".join(["train", "valid", *(f"test{i or ''} = {t}" for i, t in enumerate(tests))])
    log(f"binarize (fairseq-preprocess, joined dictionary) -> {dest / 'bin'} ({names})")
    binarize(src, tgt, str(bpe / "train"), str(bpe / valid), [str(bpe / t) for t in tests],
             dest / "bin", workers, dest / "preprocess.log")
    prepared = {"source_lang": src, "target_lang": tgt, "valid": valid, "tests": list(tests),
                "pairs": sizes, "cleaning": cleaned}
    write_text_atomic(dest / "prepared.json", json.dumps(prepared, indent=1) + "\n")
    return prepared


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="posenc-prepare-corpus",
        description="Any parallel corpus of raw text (SPLIT.LANG files, a sentence per line, "
                    "UTF-8) as a fairseq data directory, by the WMT preparation's own "
                    "tokenize / subword / binarize steps: DEST/raw, tok, bpe, bin and "
                    "prepared.json.")
    p.add_argument("raw", type=Path, help="directory of SPLIT.LANG raw text files")
    p.add_argument("--source-lang", "-s", required=True, help="source language (file suffix)")
    p.add_argument("--target-lang", "-t", required=True, help="target language (file suffix)")
    p.add_argument("--dest", type=Path, required=True, help="output directory")
    p.add_argument("--valid", default="valid", help="validation split (default: valid)")
    p.add_argument("--test", nargs="+", default=["test"],
                   help="test splits, binarized as test, test1, ... (default: test)")
    p.add_argument("--bpe-merges", type=int, default=32000,
                   help="subword-nmt merges (default 32000)")
    p.add_argument("--vocabulary-threshold", type=int, default=1,
                   help="subword-nmt apply-bpe --vocabulary-threshold (default 1)")
    p.add_argument("--clean-max-len", type=int, metavar="N",
                   help="drop training pairs with a side longer than N Moses tokens (also "
                        "empty sides; default: keep every pair)")
    p.add_argument("--clean-max-ratio", type=float, metavar="R",
                   help="drop training pairs whose longer side has more than R times the "
                        "tokens of the shorter (fairseq's WMT preparation: 1.5)")
    p.add_argument("--workers", type=int, default=default_workers(),
                   help="processes for tokenization and BPE (default: the CPU cores)")
    args = p.parse_args(argv)
    if args.bpe_merges < 1:
        p.error("--bpe-merges must be positive")
    cleaning = None
    if args.clean_max_len is not None or args.clean_max_ratio is not None:
        cleaning = Cleaning(max_len=args.clean_max_len, max_ratio=args.clean_max_ratio,
                            rule="posenc-prepare-corpus --clean-max-len/--clean-max-ratio")
    try:
        prepared = prepare_corpus(args.raw, args.source_lang, args.target_lang, args.dest,
                                  args.valid, args.test, args.bpe_merges,
                                  args.vocabulary_threshold, args.workers, cleaning)
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    log("done: " + ", ".join(f"{k} {v}" for k, v in prepared["pairs"].items())
        + f" -> {args.dest / 'bin'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
