"""Any parallel corpus of raw text as a fairseq data directory, by the WMT preparation's own
tokenize / subword / binarize steps (:mod:`fairseq_posenc.tools.textprep.text`), or in an
existing model's vocabulary (:mod:`fairseq_posenc.tools.textprep.vocabulary`).

    posenc-prepare-corpus RAW_DIR --source-lang en --target-lang de --dest DIR \\
        [--valid valid] [--test test test_long] [--bpe-merges 2000]
    posenc-prepare-corpus RAW_DIR -s en -t de --dest DIR --bpe-codes MODEL/bpecodes \\
        --srcdict MODEL/dict.en.txt --tgtdict MODEL/dict.de.txt
    posenc-prepare-corpus RAW_DIR -s en -t de --dest DIR --spm-model MODEL/spm.model \\
        --joined-dictionary MODEL/dict.txt

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
* ``prepared.json``: the pairs per split, what the cleaning dropped, and why, and
  ``subword`` (what ``bpe.json`` holds).

With an existing model's subword model and dictionaries (``--bpe-codes`` or ``--spm-model``,
with ``--srcdict --tgtdict`` or ``--joined-dictionary``), ``tok/`` holds plain Moses tokens
as fairseq's WMT recipes make them (no joiners; ``--moses-no-escape``,
``--moses-no-dash-splits`` as fairseq's Moses tokenizer has them) or, for SentencePiece, the
raw text; ``bpe/`` the model's codes (fastBPE's as subword-nmt's) or ``spm.model`` and
``bpe.json`` with where they came from (path, sha256); ``bin/`` is binarized with the
model's dictionaries; and ``prepared.json``'s ``vocabulary`` holds the dictionaries' paths
and sha256 and each split's share of subwords they lack (over 5% of a training side's: an
error before binarizing).

The demo (``scripts/demo.sh``) prepares its toy corpus with it, and ``posenc-compare``
prepares raw data with it. fairseq-generate's output decodes back to raw text with
``posenc-hypotheses LOG --expected N --detokenize DIR/bpe`` (the joiners make that the exact
inverse of the tokenization; plain Moses tokens go through the Moses detokenizer, which is
lossy), and new text encodes with :func:`fairseq_posenc.tools.textprep.text.encode`
(``DIR/bpe``).
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
from .textprep.files import PrepareError, count_lines, default_workers, write_text_atomic
from .textprep.text import (JOINED, Cleaning, Moses, apply_sentencepiece, apply_subword_nmt,
                            binarize, clean_corpus, learn_subword_nmt, moses_process_file,
                            subword_settings)
from .textprep.vocabulary import ExistingVocabulary, check_unknown


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
                   vocabulary_threshold: Optional[int] = 1, workers: int = 1,
                   cleaning: Optional[Cleaning] = None,
                   existing: Optional[ExistingVocabulary] = None) -> dict[str, Any]:
    """Tokenize, clean the training pairs (with ``cleaning``), learn and apply joint BPE,
    binarize (see the module docstring); with ``existing``, tokenize, encode and binarize as
    that model's data was (its own ``vocabulary_threshold``; ``merges`` and the argument
    here are unused). Returns what ``prepared.json`` holds: ``pairs`` per split (``train``
    as given, ``valid``, then the tests), ``cleaning`` (None, or the rule, the pairs read
    and kept, and the pairs dropped per reason), ``subword`` (bpe.json) and ``vocabulary``
    (None, or the dictionaries given and each split's share of unknown subwords)."""
    splits = ["train", valid, *tests]
    sizes = check_raw(raw, src, tgt, splits)
    dictionaries = existing.check() if existing is not None else None
    tok, bpe, copies = dest / "tok", dest / "bpe", dest / "raw"
    for d in (tok, bpe, copies):
        d.mkdir(parents=True, exist_ok=True)
    for split in (valid, *tests):
        for lang in (src, tgt):
            shutil.copyfile(raw / f"{split}.{lang}", copies / f"{split}.{lang}")
    moses = JOINED if existing is None else existing.moses
    tokenize = existing is None or existing.bpe == "subword-nmt"
    log(f"tokenize ({moses.name if tokenize else 'whitespace only: SentencePiece'}) -> {tok}")
    for split in splits:
        for lang in (src, tgt):
            moses_process_file(raw / f"{split}.{lang}", tok / f"{split}.{lang}", lang, tokenize,
                               workers, moses)
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
    inputs = {split: tok / f"{train if split == 'train' else split}" for split in splits}
    if existing is None:
        settings = _learned_subwords(inputs, bpe, (src, tgt), merges, vocabulary_threshold,
                                     workers)
        vocabulary = None
    else:
        settings, vocabulary = _existing_subwords(inputs, bpe, (src, tgt), existing,
                                                  dictionaries, workers)
    names = ", ".join(["train", "valid", *(f"test{i or ''} = {t}" for i, t in enumerate(tests))])
    dicts = "joined dictionary" if existing is None else "the model's dictionaries"
    log(f"binarize (fairseq-preprocess, {dicts}) -> {dest / 'bin'} ({names})")
    binarize(src, tgt, str(bpe / "train"), str(bpe / valid), [str(bpe / t) for t in tests],
             dest / "bin", workers, dest / "preprocess.log",
             None if existing is None else (existing.srcdict, existing.tgtdict))
    prepared = {"source_lang": src, "target_lang": tgt, "valid": valid, "tests": list(tests),
                "pairs": sizes, "cleaning": cleaned, "subword": settings,
                "vocabulary": vocabulary}
    write_text_atomic(dest / "prepared.json", json.dumps(prepared, indent=1) + "\n")
    return prepared


def _learned_subwords(inputs: dict[str, Path], bpe: Path, langs: tuple[str, str], merges: int,
                      threshold: Optional[int], workers: int) -> dict:
    """Joint BPE learned on the training split and applied to every split (``inputs``:
    ``{split: tokens' PREFIX}``) into ``bpe/SPLIT.LANG``; returns bpe.json's settings."""
    log(f"joint BPE ({merges} merges, subword-nmt) -> {bpe}")
    learned = learn_subword_nmt([Path(f"{inputs['train']}.{lang}") for lang in langs],
                                bpe / "codes", [bpe / f"vocab.{lang}" for lang in langs],
                                merges, workers)
    # A small corpus runs out of pairs that occur twice before the merges asked for.
    log(f"learned {learned} merges")
    settings = {**subword_settings({"bpe": "subword-nmt", "merges": merges,
                                    "vocabulary_threshold": threshold}, langs),
                "learned_merges": learned}
    write_text_atomic(bpe / "bpe.json", json.dumps(settings, indent=1) + "\n")
    for split, prefix in inputs.items():
        for lang in langs:
            apply_subword_nmt(Path(f"{prefix}.{lang}"), bpe / f"{split}.{lang}", bpe / "codes",
                              bpe / f"vocab.{lang}", threshold, workers)
    return settings


def _existing_subwords(inputs: dict[str, Path], bpe: Path, langs: tuple[str, str],
                       existing: ExistingVocabulary, dictionaries: tuple[Any, Any],
                       workers: int) -> tuple[dict, dict]:
    """Every split encoded with an existing model's subword model into ``bpe/SPLIT.LANG``,
    and the share of its subwords each side's dictionary lacks (over 5% of the training
    split's: a :class:`PrepareError`, before anything is binarized). Returns bpe.json's
    settings and prepared.json's ``vocabulary``."""
    settings = existing.install(bpe, langs, dictionaries)
    threshold = existing.vocabulary_threshold
    what = (f"{settings['codes']['format']} codes, subword-nmt apply-bpe"
            + (f", vocabulary threshold {threshold}" if threshold is not None else "")
            if existing.bpe == "subword-nmt" else "SentencePiece")
    log(f"encode with the model's subwords ({what}) -> {bpe}")
    for split, prefix in inputs.items():
        for lang in langs:
            source, out = Path(f"{prefix}.{lang}"), bpe / f"{split}.{lang}"
            if existing.bpe == "subword-nmt":
                apply_subword_nmt(source, out, bpe / "codes",
                                  None if threshold is None else bpe / f"vocab.{lang}",
                                  threshold, workers)
            else:
                apply_sentencepiece(source, out, bpe / "spm.model", workers)
    given = dict(zip(langs, zip(dictionaries, (existing.srcdict, existing.tgtdict))))
    rates = check_unknown({split: {lang: bpe / f"{split}.{lang}" for lang in langs}
                           for split in inputs}, given, existing.remedy())
    log("subwords not in the dictionaries: " + "; ".join(
        f"{split} " + ", ".join(f"{lang} {rate:.2%}" for lang, rate in by_lang.items())
        for split, by_lang in rates.items()))
    return settings, {**existing.record(), "unknown": rates}


def existing_vocabulary(args: argparse.Namespace) -> Optional[ExistingVocabulary]:
    """The existing model's vocabulary that the flags give (None: BPE learned from the
    corpus), or a :class:`PrepareError` naming the flags that do not go together."""
    model = [f for f, v in (("--bpe-codes", args.bpe_codes), ("--spm-model", args.spm_model))
             if v is not None]
    dicts = [f for f, v in (("--srcdict", args.srcdict), ("--tgtdict", args.tgtdict),
                            ("--joined-dictionary", args.joined_dictionary)) if v is not None]
    moses = [f for f, v in (("--moses-no-escape", args.moses_no_escape),
                            ("--moses-no-dash-splits", args.moses_no_dash_splits)) if v]
    if len(model) > 1:
        raise PrepareError("--bpe-codes and --spm-model: give one, the subword model the "
                           "model's data was encoded with")
    if moses and args.bpe_codes is None:
        raise PrepareError(f"{moses[0]} is for an existing model's --bpe-codes: "
                           + ("--spm-model encodes the raw text, without a Moses step"
                              if model else "the preparation's own tokens (with joiners) are "
                              "never escaped and always split at hyphens"))
    if dicts and not model:
        raise PrepareError(f"{dicts[0]} needs the model's subword model too: --bpe-codes FILE "
                           "or --spm-model FILE")
    if not model:
        return None
    if args.joined_dictionary is not None and len(dicts) > 1:
        raise PrepareError("--joined-dictionary is both sides' dictionary: leave out "
                           "--srcdict and --tgtdict")
    if args.joined_dictionary is None and len(dicts) < 2:
        raise PrepareError(f"{model[0]} needs the model's dictionaries: --srcdict FILE "
                           "--tgtdict FILE, or --joined-dictionary FILE (without them, leave "
                           f"{model[0]} out and BPE is learned from the corpus)")
    if args.bpe_merges is not None:
        raise PrepareError(f"--bpe-merges is for BPE learned from the corpus: {model[0]} "
                           "fixes the subwords already; leave it out")
    if args.spm_model is not None and args.vocabulary_threshold is not None:
        raise PrepareError("--vocabulary-threshold is subword-nmt's vocabulary filter: it "
                           "does not apply to --spm-model; leave it out")
    joined = args.joined_dictionary
    return ExistingVocabulary(
        srcdict=joined or args.srcdict, tgtdict=joined or args.tgtdict, codes=args.bpe_codes,
        spm_model=args.spm_model,
        moses=Moses(joiners=False, escape=not args.moses_no_escape,
                    aggressive_dash_splits=not args.moses_no_dash_splits),
        vocabulary_threshold=args.vocabulary_threshold)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="posenc-prepare-corpus",
        description="Any parallel corpus of raw text (SPLIT.LANG files, a sentence per line, "
                    "UTF-8) as a fairseq data directory, by the WMT preparation's own "
                    "tokenize / subword / binarize steps: DEST/raw, tok, bpe, bin and "
                    "prepared.json. With an existing model's subword model and "
                    "dictionaries: the data in that model's vocabulary.")
    p.add_argument("raw", type=Path, help="directory of SPLIT.LANG raw text files")
    p.add_argument("--source-lang", "-s", required=True, help="source language (file suffix)")
    p.add_argument("--target-lang", "-t", required=True, help="target language (file suffix)")
    p.add_argument("--dest", type=Path, required=True, help="output directory")
    p.add_argument("--valid", default="valid", help="validation split (default: valid)")
    p.add_argument("--test", nargs="+", default=["test"],
                   help="test splits, binarized as test, test1, ... (default: test)")
    p.add_argument("--bpe-merges", type=int,
                   help="subword-nmt merges learned from the corpus (default 32000)")
    p.add_argument("--vocabulary-threshold", type=int, metavar="T",
                   help="subword-nmt apply-bpe --vocabulary-threshold: a subword counted fewer "
                        "than T times is split back into smaller ones. Learned BPE: counts of "
                        "the training split (default 1). With --bpe-codes: counts of the "
                        "model's dictionary, so only subwords it holds T times or more are "
                        "made (default: no filter, as fairseq's recipes apply codes)")
    p.add_argument("--clean-max-len", type=int, metavar="N",
                   help="drop training pairs with a side longer than N Moses tokens (also "
                        "empty sides; default: keep every pair)")
    p.add_argument("--clean-max-ratio", type=float, metavar="R",
                   help="drop training pairs whose longer side has more than R times the "
                        "tokens of the shorter (fairseq's WMT preparation: 1.5)")
    p.add_argument("--workers", type=int, default=default_workers(),
                   help="processes for tokenization and BPE (default: the CPU cores)")
    model = p.add_argument_group(
        "an existing model's vocabulary",
        "the subword model and dictionaries of a trained model, instead of BPE learned from "
        "the corpus; a training split more than 5% of whose subwords are not in a "
        "dictionary is refused before binarizing")
    model.add_argument("--bpe-codes", type=Path, metavar="FILE",
                       help="the model's BPE codes, subword-nmt's or fastBPE's (three "
                            "columns), over plain Moses tokens (sacremoses, as fairseq's WMT "
                            "recipes: -a, escaping; no joiner marks)")
    model.add_argument("--spm-model", type=Path, metavar="FILE",
                       help="the model's SentencePiece model, applied to the raw text (no "
                            "Moses step), as NLLB and IndicTrans2 data are")
    model.add_argument("--srcdict", type=Path, metavar="FILE",
                       help="the model's source dictionary (fairseq-preprocess --srcdict)")
    model.add_argument("--tgtdict", type=Path, metavar="FILE",
                       help="the model's target dictionary (fairseq-preprocess --tgtdict)")
    model.add_argument("--joined-dictionary", type=Path, metavar="FILE",
                       help="the model's one dictionary of both sides (fairseq-preprocess "
                            "--joined-dictionary --srcdict FILE)")
    model.add_argument("--moses-no-escape", action="store_true",
                       help="with --bpe-codes: the model's data was tokenized without "
                            "escaping & < > ' \" [ ] | (tokenizer.perl -no-escape; fairseq's "
                            "--tokenizer moses flag of the same name)")
    model.add_argument("--moses-no-dash-splits", action="store_true",
                       help="with --bpe-codes: without splitting hyphens inside words "
                            "(tokenizer.perl without -a; fairseq's flag of the same name)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.bpe_merges is not None and args.bpe_merges < 1:
        p.error("--bpe-merges must be positive")
    try:
        existing = existing_vocabulary(args)
    except PrepareError as e:
        print(f"posenc-prepare-corpus: error: {e}", file=sys.stderr)
        return 2
    cleaning = None
    if args.clean_max_len is not None or args.clean_max_ratio is not None:
        cleaning = Cleaning(max_len=args.clean_max_len, max_ratio=args.clean_max_ratio,
                            rule="posenc-prepare-corpus --clean-max-len/--clean-max-ratio")
    threshold = args.vocabulary_threshold
    try:
        prepared = prepare_corpus(args.raw, args.source_lang, args.target_lang, args.dest,
                                  args.valid, args.test, args.bpe_merges or 32000,
                                  1 if threshold is None else threshold, args.workers,
                                  cleaning, existing)
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    log("done: " + ", ".join(f"{k} {v}" for k, v in prepared["pairs"].items())
        + f" -> {args.dest / 'bin'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
