"""The corpus of a comparison: raw text prepared once, or a prepared directory as it is.

``--data`` is either

* raw text: ``SPLIT.LANG`` files, a sentence per line (``train``, the validation split and
  the test splits), prepared once into ``OUT/data`` by :func:`fairseq_posenc.tools.corpus.
  prepare_corpus` -- the WMT preparation's tokenize / BPE / binarize steps, the training
  pairs cleaned as :data:`.settings.DEFAULT_CLEANING` says, the pairs dropped counted by
  reason -- and reused by every later run while the data and settings are the same; or
* a prepared directory: ``posenc-prepare-corpus`` output (``bin/``, ``bpe/bpe.json``, the
  raw splits in ``raw/`` or the joiner-marked tokens in ``tok/``, which join back to them)
  or ``posenc-prepare-wmt`` output (``bin/``, ``bpe/``, ``refs/``, ``manifest.json``).

Translations are scored against the raw references, so a prepared directory without them
(``fairseq-preprocess`` output alone) is refused with what to do instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..corpus import check_raw, prepare_corpus
from ..textprep.files import PrepareError, count_lines, read_lines, write_text_atomic
from ..textprep.text import join_marked, load_subword_settings
from .settings import Settings


@dataclass(frozen=True)
class TestSplit:
    name: str  # as --test names it
    subset: str  # fairseq's --gen-subset: test, test1, ...
    source: Path  # raw sources
    reference: Path  # raw references
    sentences: int


@dataclass(frozen=True)
class Corpus:
    root: Path
    source_lang: str
    target_lang: str
    subword: dict  # bpe/bpe.json
    tests: tuple[TestSplit, ...]
    prepared: dict  # what the preparation reports (pairs, cleaning), {} if unknown

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def bpe(self) -> Path:
        return self.root / "bpe"


def is_raw(data: Path, src: str) -> bool:
    return (data / f"train.{src}").is_file() and not (data / "bin").is_dir()


def check(settings: Settings, prepared: bool = False) -> None:
    """What can be checked of ``--data`` before anything is written: the files, languages,
    splits and line counts; with ``prepared`` (``--init-from``), that it is a prepared
    directory. Raises SystemExit with what to do."""
    data, src, tgt = Path(settings.data), settings.source_lang, settings.target_lang
    if not data.is_dir():
        raise SystemExit(f"posenc-compare: --data {data} is not a directory")
    if prepared and is_raw(data, src):
        raise SystemExit(
            f"posenc-compare: --data {data} is raw text, which posenc-compare would split "
            "into subwords and a dictionary of its own, but --init-from fine-tunes a model "
            "on data in its vocabulary: prepare the text with posenc-prepare-corpus and the "
            "checkpoint's subword model and dictionaries (--bpe-codes or --spm-model, "
            "--srcdict/--tgtdict or --joined-dictionary; docs/prepare-corpus.md), and give "
            "that directory as --data")
    try:
        if is_raw(data, src):
            check_raw(data, src, tgt, ["train", settings.valid, *settings.tests])
        else:
            open_prepared(data, settings, None)
    except PrepareError as e:
        raise SystemExit(f"posenc-compare: --data {data}: {e}") from None


def corpus(settings: Settings, out: Path, workers: int,
           say: Callable[[str], None]) -> Corpus:
    """The prepared corpus: ``--data`` itself, or raw text prepared into ``OUT/data``
    (once; again only when the raw files or the preparation's settings change)."""
    data = Path(settings.data)
    dest = out / "data"
    if not is_raw(data, settings.source_lang):
        return open_prepared(data, settings, dest)
    stamp = dest / "stamp.json"
    key = _raw_key(settings)
    if stamp.exists() and json.loads(stamp.read_text()).get("key") == key:
        say(f"data: prepared in {dest} (up to date)")
        return open_prepared(dest, settings, dest)
    if dest.exists():
        shutil.rmtree(dest)
    say(f"data: preparing {data} -> {dest} (tokenize, clean, BPE with "
        f"{settings.bpe_merges} merges, binarize; log: {dest / 'preprocess.log'})")
    try:
        prepare_corpus(data, settings.source_lang, settings.target_lang, dest, settings.valid,
                       settings.tests, settings.bpe_merges, workers=workers,
                       cleaning=settings.cleaning)
    except PrepareError as e:
        raise SystemExit(f"posenc-compare: preparing {data} failed: {e}") from None
    write_text_atomic(stamp, json.dumps({"key": key}) + "\n")
    return open_prepared(dest, settings, dest)


def _raw_key(settings: Settings) -> str:
    """What the prepared data depends on: the raw files (size, modification time) and the
    preparation's settings."""
    data = Path(settings.data)
    files = sorted(p for p in data.iterdir() if p.is_file())
    facts = {"files": [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files],
             "langs": [settings.source_lang, settings.target_lang], "valid": settings.valid,
             "tests": list(settings.tests), "merges": settings.bpe_merges,
             "cleaning": dataclasses.asdict(settings.cleaning)}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def open_prepared(root: Path, settings: Settings, scratch: Optional[Path]) -> Corpus:
    """A prepared directory (see the module docstring), its test splits mapped to fairseq's
    subsets and raw references; references joined back from tokens go to ``scratch/raw``
    (None: only check that they can be)."""
    src, tgt = settings.source_lang, settings.target_lang
    missing = [p for p in (root / "bin" / f"dict.{src}.txt", root / "bin" / f"dict.{tgt}.txt",
                           root / "bpe" / "bpe.json") if not p.is_file()]
    if missing:
        raise PrepareError(
            f"not raw text (no train.{src}) and not a prepared directory (missing "
            f"{', '.join(map(str, missing))}). Pass a directory of raw SPLIT.LANG files, or "
            "the output of posenc-prepare-corpus or posenc-prepare-wmt (its bpe/bpe.json and "
            "raw references are needed to score detokenized translations)")
    subword = load_subword_settings(root / "bpe")
    if src not in subword["langs"] or tgt not in subword["langs"]:
        raise PrepareError(f"{root} holds {'-'.join(subword['langs'])}, not {src}-{tgt}")
    if (root / "manifest.json").is_file():
        tests, prepared = _wmt_tests(root, settings)
    else:
        tests, prepared = _corpus_tests(root, settings, scratch)
    return Corpus(root, src, tgt, subword, tests, prepared)


def _wmt_tests(root: Path, settings: Settings) -> tuple[tuple[TestSplit, ...], dict]:
    manifest = json.loads((root / "manifest.json").read_text())
    by_name = {t["testset"]: t["split"] for t in manifest["tests"]}
    unknown = [t for t in settings.tests if t not in by_name]
    if unknown:
        raise PrepareError(f"no test set {unknown} in {root}: it has {sorted(by_name)}")
    if settings.valid != "valid":
        raise PrepareError("a posenc-prepare-wmt directory has one validation split: "
                           "leave --valid at its default")
    refs = root / "refs"
    tests = tuple(TestSplit(name, by_name[name], refs / f"{name}.{settings.source_lang}",
                            refs / f"{name}.{settings.target_lang}",
                            count_lines(refs / f"{name}.{settings.target_lang}"))
                  for name in settings.tests)
    return tests, {"pairs": {"train": manifest["train_pairs"]["binarized"]},
                   "cleaning": manifest.get("cleaning")}


def _corpus_tests(root: Path, settings: Settings,
                  scratch: Optional[Path]) -> tuple[tuple[TestSplit, ...], dict]:
    src, tgt = settings.source_lang, settings.target_lang
    info_path = root / "prepared.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    order = info.get("tests", list(settings.tests))  # older directories: as given
    unknown = [t for t in settings.tests if t not in order]
    if unknown:
        raise PrepareError(f"no test split {unknown} in {root}: it was prepared with "
                           f"--test {' '.join(order)}")
    if info and info.get("valid") != settings.valid:
        raise PrepareError(f"{root} was prepared with --valid {info.get('valid')}")
    tests = []
    for name in settings.tests:
        index = order.index(name)
        subset = "test" if index == 0 else f"test{index}"
        source, reference = _raw_pair(root, name, src, tgt, scratch)
        n = count_lines(reference) if reference.is_file() else 0
        binarized = root / "bin" / f"{subset}.{src}-{tgt}.{src}.idx"
        if not binarized.is_file():
            raise PrepareError(f"{binarized} is missing: the test splits are binarized as "
                               "test, test1, ... in the order they were prepared")
        tests.append(TestSplit(name, subset, source, reference, n))
    return tuple(tests), info


def _raw_pair(root: Path, split: str, src: str, tgt: str,
              scratch: Optional[Path]) -> tuple[Path, Path]:
    """The raw source and reference of ``split``: ``raw/`` if the preparation kept them,
    else the joiner-marked tokens of ``tok/`` joined back (their exact inverse) into
    ``scratch/raw``."""
    raw = root / "raw"
    paths = (raw / f"{split}.{src}", raw / f"{split}.{tgt}")
    if all(p.is_file() for p in paths):
        return paths
    tok = [root / "tok" / f"{split}.{lang}" for lang in (src, tgt)]
    if not all(p.is_file() for p in tok):
        raise PrepareError(f"no raw text of {split} in {raw} or {root / 'tok'}: prepare it "
                           "with posenc-prepare-corpus, or pass the raw SPLIT.LANG files")
    if scratch is None:
        return paths
    joined = (scratch / "raw" / f"{split}.{src}", scratch / "raw" / f"{split}.{tgt}")
    for path, out in zip(tok, joined):
        write_text_atomic(out, "".join(join_marked(line.split()) + "\n"
                                       for line in read_lines(path)))
    return joined


def longest(corpus: Corpus, subset: str) -> int:
    """The longest source or target of a binarized subset, in the model's tokens with the
    end of sentence (what a table of positions must cover)."""
    from ...plugin.extrapolation import source_sizes

    src, tgt = corpus.source_lang, corpus.target_lang
    return max(max(source_sizes(corpus.bin, subset, src, tgt)),
               max(source_sizes(corpus.bin, subset, tgt, src)))


def source_lengths(corpus: Corpus, subset: str) -> list[int]:
    """Each source's tokens (with the end of sentence) in a binarized subset."""
    from ...plugin.extrapolation import source_sizes

    return source_sizes(corpus.bin, subset, corpus.source_lang, corpus.target_lang)


def inspect_sentence(test: TestSplit) -> Optional[str]:
    """A source of moderate length to draw attention maps of: the first with 10 or more
    words, else the first."""
    lines = [line for line in read_lines(test.source) if line.strip()]
    return next((line for line in lines if len(line.split()) >= 10), lines[0] if lines else None)
