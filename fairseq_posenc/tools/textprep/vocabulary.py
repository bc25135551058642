"""Data in an existing model's vocabulary: its subword model (BPE codes, or a SentencePiece
model) and its fairseq dictionaries, checked before any work, installed into ``DEST/bpe``,
and the share of subwords the dictionaries do not hold (``posenc-prepare-corpus
--bpe-codes`` / ``--spm-model`` with ``--srcdict --tgtdict`` or ``--joined-dictionary``).

Decisions:

* BPE codes of both tools are read: subword-nmt's (two columns, an optional ``#version``
  header) and fastBPE's (a third column, the pair's count in the data it was learned on).
  Both are applied by subword-nmt's ``apply-bpe``, since fastBPE applies a merge table as
  subword-nmt's version 0.2 does: a word is its characters with ``</w>`` on the last one;
  the adjacent pair of lowest rank (its line in the file) is merged, at every place it
  occurs, left to right without overlap, until no pair has a rank; every subword but a
  word's last gets ``@@``. fastBPE's codes become subword-nmt's by dropping the counts and
  writing the ``#version: 0.2`` header: without it subword-nmt reads version 0.1, whose
  ``</w>`` is a symbol of its own, and no word-final merge would apply.
* The dictionaries are read by fairseq's own ``Dictionary.load``, the reader
  fairseq-preprocess binarizes with, so a file it refuses is refused before any work.
* ``--vocabulary-threshold T`` with existing codes is subword-nmt's vocabulary filter over
  the model's dictionary: a subword the dictionary counts fewer than ``T`` times (or does
  not hold) is split back into the smaller units it was merged from, until they are in it
  (or are single characters). fairseq's dictionary counts are the subwords' counts in the
  model's training data, what subword-nmt's ``--write-vocabulary`` counts. Without it the
  codes are applied as fairseq's recipes apply them, without a vocabulary.
* A side whose training subwords are more than :data:`MAX_UNKNOWN` unknown to its dictionary
  is refused before binarizing: the codes, the dictionary or the tokenization are not the
  model's, and training on ``<unk>`` would teach it nothing.
"""

from __future__ import annotations

import collections
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

from .files import PrepareError, open_text, sha256_file, write_text_atomic
from .text import Moses, subword_settings

#: The largest share of a side's training subwords that may be missing from its dictionary.
MAX_UNKNOWN = 0.05
#: The header that makes subword-nmt read codes as version 0.2 (``</w>`` on the last letter).
VERSION_02 = "#version: 0.2"


def read_codes(path: Path, flag: str = "--bpe-codes") -> Tuple[str, list[str], Optional[str]]:
    """``(format, merges, header)`` of a BPE codes file: format ``"fastBPE"`` (three columns,
    the third a count) or ``"subword-nmt"`` (two); each merge as ``"LEFT RIGHT"``; the
    ``#version`` header line or None. A :class:`PrepareError` names the first line that is
    neither."""
    if not path.is_file():
        raise PrepareError(f"{flag} {path} does not exist: pass the BPE codes the model's "
                           "data was segmented with (subword-nmt's or fastBPE's)")
    with open_text(path) as f:
        lines = [line.rstrip("\r\n") for line in f]
    while lines and not lines[-1]:
        lines.pop()  # subword-nmt reads past trailing empty lines too
    header = lines[0] if lines and lines[0].startswith("#version") else None
    first = 2 if header else 1
    body = lines[first - 1:]
    if not body:
        raise PrepareError(f"{flag} {path} holds no merge: pass the BPE codes the model's data "
                           "was segmented with")
    width = len(body[0].split(" "))
    for number, line in enumerate(body, first):
        fields = line.split(" ")
        if "" in fields:
            why = "an empty column (two spaces in a row, or one at an end)"
        elif width not in (2, 3) or len(fields) != width:
            why = f"{len(fields)} columns" + (f" where line {first} has {width}"
                                              if number > first else "")
        elif width == 3 and not fields[2].isdigit():
            why = f"a third column {fields[2]!r} that is not a count"
        else:
            continue
        shown = line if len(line) <= 60 else line[:57] + "..."
        raise PrepareError(
            f"{flag} {path}: line {number} {shown!r} has {why}: subword-nmt writes a merge "
            "as 'LEFT RIGHT', fastBPE as 'LEFT RIGHT COUNT'; pass the codes file as the tool "
            "wrote it")
    if width == 3 and header:
        raise PrepareError(f"{flag} {path} has fastBPE's three columns under a {header!r} "
                           "line, which fastBPE never writes: pass the codes as it wrote them")
    fmt = "fastBPE" if width == 3 else "subword-nmt"
    return fmt, [" ".join(line.split(" ")[:2]) for line in body], header


def install_codes(given: Path, codes: Path) -> dict:
    """Write ``given``'s merges as subword-nmt codes to ``codes`` (fastBPE's: counts dropped,
    the version 0.2 header added; subword-nmt's: their lines as they are). Returns bpe.json's
    record of them."""
    fmt, merges, header = read_codes(given)
    header = VERSION_02 if fmt == "fastBPE" else header  # subword-nmt's: as given
    write_text_atomic(codes, "".join(m + "\n" for m in [*([header] if header else []),
                                                        *merges]))
    return {"path": str(given.resolve()), "sha256": sha256_file(given), "format": fmt,
            "merges": len(merges), "version": "0.2" if fmt == "fastBPE" else
            (header.split()[-1] if header else "0.1")}


def load_dictionary(path: Path, flag: str) -> Any:
    """fairseq's ``Dictionary`` of ``path``, or a :class:`PrepareError` saying why not."""
    if not path.is_file():
        raise PrepareError(f"{flag} {path} does not exist: pass the dictionary (dict.LANG.txt) "
                           "the model was trained with")
    from fairseq.data import Dictionary

    try:
        dictionary = Dictionary.load(str(path))
    except (ValueError, RuntimeError) as e:  # a bad line, a duplicate, bytes not UTF-8
        raise PrepareError(f"{flag} {path} is not a fairseq dictionary ({e}): pass the "
                           "dict.LANG.txt the model was trained with") from None
    if len(dictionary) <= dictionary.nspecial:
        raise PrepareError(f"{flag} {path} holds no symbol: pass the dict.LANG.txt the model "
                           "was trained with")
    return dictionary


def write_vocabulary(dictionary: Any, out: Path) -> None:
    """The dictionary's symbols and counts as subword-nmt's vocabulary file (``WORD COUNT``),
    its special symbols left out."""
    symbols = dictionary.symbols[dictionary.nspecial:]
    counts = dictionary.count[dictionary.nspecial:]
    write_text_atomic(out, "".join(f"{s} {c}\n" for s, c in zip(symbols, counts)))


def unknown(path: Path, dictionary: Any) -> Tuple[int, int, list[str]]:
    """``(unknown, total, most frequent unknown)`` of the subwords of an encoded file, each
    split as fairseq-preprocess splits a line, looked up as it looks them up."""
    missing: collections.Counter = collections.Counter()
    total = 0
    unk = dictionary.unk()
    with open_text(path) as f:
        for line in f:
            for token in line.split():
                total += 1
                if dictionary.index(token) == unk:
                    missing[token] += 1
    return sum(missing.values()), total, [t for t, _ in missing.most_common(5)]


@dataclass(frozen=True)
class ExistingVocabulary:
    """An existing model's subword model (``codes`` or ``spm_model``) and dictionaries
    (``srcdict``, ``tgtdict``; the same file when joined), the Moses tokenization its data
    had (``moses``, for codes) and the vocabulary filter (``vocabulary_threshold``: see the
    module docstring; None: none)."""

    srcdict: Path
    tgtdict: Path
    codes: Optional[Path] = None
    spm_model: Optional[Path] = None
    moses: Moses = Moses(joiners=False, escape=True, aggressive_dash_splits=True)
    vocabulary_threshold: Optional[int] = None

    @property
    def bpe(self) -> str:
        return "subword-nmt" if self.codes is not None else "sentencepiece"

    @property
    def joined(self) -> bool:
        return self.srcdict == self.tgtdict

    def flags(self) -> Tuple[str, str]:
        return (("--joined-dictionary", "--joined-dictionary") if self.joined
                else ("--srcdict", "--tgtdict"))

    def check(self) -> Tuple[Any, Any]:
        """Everything that can be wrong with the files, before any work: the codes (or the
        SentencePiece model) and both dictionaries read. Returns the dictionaries."""
        if self.codes is not None:
            read_codes(self.codes)
        else:
            if not self.spm_model.is_file():
                raise PrepareError(f"--spm-model {self.spm_model} does not exist: pass the "
                                   "SentencePiece model the model's data was encoded with")
            import sentencepiece as spm

            try:
                spm.SentencePieceProcessor(model_file=str(self.spm_model))
            except (OSError, RuntimeError) as e:
                raise PrepareError(f"--spm-model {self.spm_model} is not a SentencePiece "
                                   f"model ({e}): pass the model's .model file") from None
        src_flag, tgt_flag = self.flags()
        return (load_dictionary(self.srcdict, src_flag),
                load_dictionary(self.tgtdict, tgt_flag))

    def install(self, bpe_dir: Path, langs: Sequence[str], dictionaries: Sequence[Any]) -> dict:
        """The subword model in ``bpe_dir`` (``codes``, or ``spm.model``), the vocabulary
        files of the filter (``vocab.LANG``, from each side's dictionary) and ``bpe.json``
        (:func:`.text.subword_settings` with where the subword model came from), which
        it returns."""
        if self.codes is not None:
            record = install_codes(self.codes, bpe_dir / "codes")
            if self.vocabulary_threshold is not None:
                for lang, dictionary in zip(langs, dictionaries):
                    write_vocabulary(dictionary, bpe_dir / f"vocab.{lang}")
            model = {"bpe": "subword-nmt", "vocabulary_threshold": self.vocabulary_threshold,
                     "codes": record}
        else:
            shutil.copyfile(self.spm_model, bpe_dir / "spm.model")
            model = {"bpe": "sentencepiece",
                     "model": {"path": str(self.spm_model.resolve()),
                               "sha256": sha256_file(self.spm_model)}}
        settings = subword_settings({**model, "existing_model": True}, langs, self.moses)
        write_text_atomic(bpe_dir / "bpe.json", json.dumps(settings, indent=1) + "\n")
        return settings

    def remedy(self) -> str:
        """What to do when the dictionaries lack the subwords (:func:`check_unknown`)."""
        if self.codes is None:
            return "Pass the --spm-model and the dictionaries of one model"
        return ("Pass the --bpe-codes and the dictionaries of one model, and the Moses "
                "settings its data was tokenized with (--moses-no-escape, "
                "--moses-no-dash-splits)")

    def record(self) -> dict:
        """prepared.json's ``vocabulary``: the dictionaries given, by path and sha256."""
        def entry(path: Path) -> dict:
            return {"path": str(path.resolve()), "sha256": sha256_file(path)}

        return {"joined": self.joined, "source_dict": entry(self.srcdict),
                "target_dict": entry(self.tgtdict)}


def check_unknown(encoded: dict, dictionaries: dict, remedy: str,
                  train: str = "train") -> dict:
    """The share of each split's subwords (``encoded``: ``{split: {lang: path}}``) that
    its side's dictionary (``dictionaries``: ``{lang: (Dictionary, path)}``) does not hold;
    a :class:`PrepareError` that ends with ``remedy`` when a side of ``train`` is over
    :data:`MAX_UNKNOWN`."""
    rates: dict = {}
    for split, paths in encoded.items():
        for lang, path in paths.items():
            dictionary, dict_path = dictionaries[lang]
            n, total, examples = unknown(path, dictionary)
            rate = n / total if total else 0.0
            rates.setdefault(split, {})[lang] = rate
            if split == train and rate > MAX_UNKNOWN:
                raise PrepareError(
                    f"the {lang} side: {rate:.1%} of the training split's {total:,} subwords "
                    f"({n:,}; most often {', '.join(map(repr, examples))}) are not in "
                    f"{dict_path} and would become <unk> (at most {MAX_UNKNOWN:.0%} is "
                    "accepted): the subword model, the dictionary or the tokenization is not "
                    f"the model's. {remedy}")
    return rates
