#!/usr/bin/env python3
"""Download and prepare the WMT translation data of the papers, for fairseq.

One command per dataset::

    python examples/wmt/prepare.py DATASET --dest DIR [options]
    python examples/wmt/prepare.py --list

downloads the training corpora (HTTP with resume, size and archive checks, sha256 recorded),
extracts the needed files, tokenizes them with sacremoses, cleans them
(length limits and length ratio), learns and applies joint BPE with subword-nmt (or a joint
SentencePiece model), takes the validation and test sets from sacreBLEU, and binarizes
everything with ``fairseq-preprocess --joined-dictionary``. Source language = en, target =
de or cs; fairseq's translation task loads the other direction (de->en, cs->en) from the same
files, so one preparation serves both directions.

Datasets (corpus URLs and archive layouts: SPEC.md, "Training corpora"):

============  ===========================================  ==============  ======================
dataset       training corpora                             validation      test splits
============  ===========================================  ==============  ======================
wmt15_en_de   Europarl v7, Common Crawl, News Commentary   newstest2013    test = newstest2015
              v10                                          (wmt13)         (wmt15)
wmt17_en_de   Europarl v7, Common Crawl, NC v12, Rapid     newstest2014    test = newstest2014,
              2016                                         (wmt14/full)    test1 = 2015, test2 =
                                                                           2016, test3 = 2017
wmt18_en_de   Europarl v7, Common Crawl, NC v13            newstest2013    test = newstest2018
              (+ ParaCrawl v1 with --paracrawl)            (wmt13)         (wmt18)
wmt18_en_cs   Europarl v7, Common Crawl, NC v13            newstest2013    test = newstest2018,
              (+ CzEng 1.7 with --czeng PATH,              (wmt13)         test1 = newstest2015
              + ParaCrawl v1 with --paracrawl)                             (wmt18, wmt15)
============  ===========================================  ==============  ======================

(sacreBLEU test-set names in parentheses.) Why these sets:

* wmt15_en_de -- Chen et al. 2021a ("Demystifying the better performance of position
  encoding variants for Transformer"), Table 6 and Sec. 4.3: trained on WMT 2015 en-de, tested
  on newstest2015 (uncased BLEU). They follow Vaswani et al. 2017 with Tensor2Tensor, whose
  en-de problem validates on newstest2013: so do we.
* wmt17_en_de -- Wu et al. 2021 (AT5), "Machine Translation" section and Tables 5-6: trained
  on WMT 2017 en-de, newstest2014 as validation, newstest2015/2016/2017 as tests; their tables
  also report newstest2014, hence four test splits. newstest2014 is sacreBLEU's ``wmt14/full``
  (the full 3003-sentence set).
* wmt18_en_de -- Chen et al. 2021b (DIET), Table 4 and Appendix ("Translate"): Europarl v7,
  Common Crawl and News Commentary v13, tested on newstest2018 with default sacreBLEU.
  ParaCrawl v1 was part of the official WMT18 task but not of DIET's list: ``--paracrawl``
  adds it. Validation: newstest2013 (Tensor2Tensor, as DIET used).
* wmt18_en_cs -- DIET Table 4 (newstest2018) and Chen 2021a Table 6, whose EN-CS column is
  a WMT18-trained model tested on newstest2015: the preparation binarizes both, ``test`` =
  newstest2018 and ``test1`` = newstest2015. CzEng 1.7 needs registration, so it is optional:
  ``--czeng PATH`` adds a local copy (see below); ParaCrawl v1 via ``--paracrawl``.

The reverse directions use the same files: newstest2013-2018 hold the same sentence pairs in
sacreBLEU's en-X and X-en sets; the preparation checks this (manifest: ``reverse_identical``)
and warns if it ever does not hold.

Output (the contract with the training recipes, see README.md)::

    DIR/bin/                 fairseq-preprocess output, joined dictionary, en -> de|cs;
                             splits train, valid, test, test1, ...
    DIR/refs/{testset}.{lang}  raw sacreBLEU source/reference text of every valid/test set
    DIR/bpe/                 codes + vocabularies (or spm.model), bpe.json, README
    DIR/manifest.json        what is where (splits -> test sets, corpora, counts, BPE)
    DIR/work/                intermediate files (may be deleted once bin/ exists)
    DIR/.stamps/             one JSON stamp per finished step

Processing, per language:

1. Text hygiene on reading: characters that some readers take as line breaks (``\\r``,
   ``\\v``, ``\\f``, ``\\x1c-\\x1e``, ``\\x85``, U+2028, U+2029; Common Crawl has some) become
   spaces, so every tool sees the same lines. Files are decoded as UTF-8 (invalid bytes
   replaced).
2. sacremoses ``MosesTokenizer(lang)`` with aggressive hyphen splitting (``-a``) and no XML
   escaping (``-x``), as fairseq's prepare-wmt14en2de.sh, each token that was attached to the
   previous one in the raw text marked with :data:`JOINER`, so that the output joins back to
   exactly the raw form it is scored against. No punctuation normalization (it rewrites
   typographic quotes, dashes and ellipses, which the references keep). With ``--bpe
   sentencepiece`` no Moses step at all (SentencePiece works on raw text).
3. Cleaning, training data only, each dataset's paper's (:class:`Cleaning`): whitespace
   collapsed; for tensor2tensor's papers (Chen 2021a, DIET) a pair with an empty side is
   dropped, nothing else; for AT5 also a pair with a side over 120 tokens (its Table 5:
   5,850,267 pairs, printed beside ours). No paper filters by length ratio (fairseq's
   prepare-wmt14en2de.sh does: ``--max-ratio 1.5 --max-len 250`` gives its rule).
   ``--min-len``/``--max-len``/``--max-ratio`` override. Applied to the tokens before BPE,
   so that BPE is learned on the data that is kept; raw and kept pairs per corpus go into
   the manifest. Validation and test sets are never filtered.
4. Joint BPE: ``subword-nmt learn-joint-bpe-and-vocab -s 32000`` on the cleaned training
   data of both languages, applied with ``--vocabulary-threshold 50`` (subword-nmt's README).
   ``--bpe sentencepiece``: one SentencePiece model (``--spm-model-type``, vocabulary size
   ``--bpe-size``) trained on both languages.
5. ``fairseq-preprocess --source-lang en --target-lang X --joined-dictionary --workers N``.

Robustness: downloads go to ``NAME.part`` and resume with HTTP Range (also after the
process was killed); the size is checked against Content-Length / Content-Range; every
archive is read through completely (gzip CRC) before use; a corrupt or truncated archive is
reported, deleted and fetched once more, then the run stops with a message saying what to do.
The sha256 of each finished download is stored in ``NAME.sha256`` and checked whenever a
rerun uses the file; a download from an official URL must also have the published size and
hash (``PUBLISHED_ARCHIVES``; ``--ignore-published-checksums`` accepts another). Each step writes a stamp; a rerun skips steps whose stamp and outputs
exist and whose inputs and settings are unchanged. Every output file is written under a
temporary name and renamed. Parallel files whose line counts differ stop the run with a
message naming both files and their counts.

Offline use (tests, CI smoke runs, a local mirror): ``--mirror BASE`` (an http(s)/file URL
or a directory) fetches every URL from ``BASE/<host>/<path>`` (the layout of ``wget -x``),
including sacreBLEU's test-set tarballs. If ``BASE/SHA256SUMS`` exists, training archives must
match it; if ``BASE/MD5SUMS`` lists a sacreBLEU tarball, that md5 replaces the one built into
sacreBLEU (this is how ``fake_archives.py``'s small fake tarballs pass sacreBLEU's check).
sacreBLEU itself still downloads, checks the md5, extracts and converts the SGML files. In
mirror mode sacreBLEU's cache defaults to ``DIR/sacrebleu`` so fake test sets never enter
``~/.sacrebleu``; ``--sacrebleu-dir`` sets it explicitly (default otherwise: ``$SACREBLEU``
or ``~/.sacrebleu``, sacreBLEU's own default).

CzEng (``--czeng PATH``): the directory of CzEng 1.6's plain-text export; only its
``data.plaintext-format/??train.gz`` files are read (lines
``ID<TAB>filter-score<TAB>Czech<TAB>English``). CzEng 1.7, WMT18's corpus, is CzEng 1.6 less
the blocks that UFAL's ``convert_czeng16_to_17.pl`` lists (:data:`CZENG17_FILTER`, fetched
and applied); ``--czeng-release 1.6`` keeps them, as tensor2tensor's translate_encs_wmt32k.

Importable helpers for the recipes: :func:`detokenize` (the inverse of step 2 for
fairseq-generate output after ``--remove-bpe``/``--post-process``), :func:`encode` (steps
1-4 for new text, from a ``bpe/`` directory), :func:`load_manifest`.
"""

from __future__ import annotations

import argparse
import bz2
import contextlib
import dataclasses
import datetime
import fcntl
import gzip
import hashlib
import http.client
import itertools
import json
import lzma
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

LOG_PREFIX = "[wmt]"
USER_AGENT = "fairseq_posenc-wmt-prepare/1.0"
CHUNK_LINES = 2000  # lines per task sent to a tokenizer worker


# --------------------------------------------------------------------------------------
# Corpora and datasets
# --------------------------------------------------------------------------------------

EUROPARL_V7 = "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz"
COMMONCRAWL = "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz"
NC_V10 = "http://www.statmt.org/wmt15/training-parallel-nc-v10.tgz"
NC_V12 = "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz"
NC_V13 = "http://data.statmt.org/wmt18/translation-task/training-parallel-nc-v13.tgz"
# WMT17's own copy (WMT18's rapid2016.tgz is another file: 161,050,516 bytes)
RAPID_2016 = "http://data.statmt.org/wmt17/translation-task/rapid2016.tgz"
PARACRAWL_V1 = (
    "https://s3.amazonaws.com/web-language-models/paracrawl/release1/"
    "paracrawl-release1.en-{x}.zipporah0-dedup-clean.tgz"
)
#: UFAL's CzEng 1.6 -> 1.7 converter (public; the data itself needs registration): a Perl
#: script whose ``qw{...}`` lists the blocks that CzEng 1.7 leaves out.
CZENG17_FILTER = "http://ufal.mff.cuni.cz/czeng/download.php?f=convert_czeng16_to_17.pl.zip"


@dataclasses.dataclass(frozen=True)
class PublishedArchive:
    """The size and a hash of an archive as published; sha256 where one is listed, else
    sha1."""

    size: int
    sha256: Optional[str] = None
    sha1: Optional[str] = None


#: Every training archive, as published. sha256 and sizes: TensorFlow Datasets'
#: ``url_checksums/wmt15_translate.txt``, ``wmt17_translate.txt``, ``wmt18_translate.txt``;
#: WMT17's Rapid 2016, which TFDS takes from WMT18: sha1 and size from gluon-nlp's
#: ``scripts/datasets/url_checksums/wmt.txt``. Checked on downloads from these URLs.
PUBLISHED_ARCHIVES: Dict[str, PublishedArchive] = {
    EUROPARL_V7: PublishedArchive(
        657_632_379, sha256="0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7"),
    COMMONCRAWL: PublishedArchive(
        918_311_367, sha256="c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5"),
    NC_V10: PublishedArchive(
        125_136_590, sha256="11e053e7ea29e87e69a1ad05e61cb559820947ecec144ea8c1d6cf05017c9602"),
    NC_V12: PublishedArchive(
        168_591_139, sha256="2b45f30ef1d550d302fd17dd3a5cbe19134ccc4c2cf50c2dae534aee600101a2"),
    NC_V13: PublishedArchive(
        113_157_482, sha256="17992b7e919cfb754c60f4e754148bc23b80706ad0ed7b34150831a554b40c91"),
    RAPID_2016: PublishedArchive(163_416_042, sha1="8b173ce0bc77f2a1a57c8134143e3b5ae228a6e2"),
    PARACRAWL_V1.format(x="de"): PublishedArchive(
        1_918_708_277,
        sha256="435ce65e26ed2d44dd0d627f0b558d25bfe31d9ccb35caef050938745c23ea8c"),
    PARACRAWL_V1.format(x="cs"): PublishedArchive(
        299_052_360, sha256="221f88bac9f48ed6ef94bad5490890066f508be00e8f102cf19edf2a1413c350"),
    CZENG17_FILTER: PublishedArchive(
        2_544_381, sha256="e66466e00aecd392daaf547275590a9264bbc6aed70118c5c7cfd6946daf24ac"),
}


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A training corpus: per language pair ("de-en"), the archive URL and the member
    prefix inside it (the files are ``PREFIX.en`` and ``PREFIX.de``)."""

    title: str
    files: Dict[str, Tuple[str, str]]


CORPORA: Dict[str, Corpus] = {
    "europarl_v7": Corpus(
        "Europarl v7",
        {p: (EUROPARL_V7, f"training/europarl-v7.{p}") for p in ("de-en", "cs-en")},
    ),
    "commoncrawl": Corpus(
        "Common Crawl", {p: (COMMONCRAWL, f"commoncrawl.{p}") for p in ("de-en", "cs-en")}
    ),
    "nc_v10": Corpus(
        "News Commentary v10",
        {p: (NC_V10, f"news-commentary-v10.{p}") for p in ("de-en", "cs-en")},
    ),
    "nc_v12": Corpus(
        "News Commentary v12",
        {p: (NC_V12, f"training/news-commentary-v12.{p}") for p in ("de-en", "cs-en")},
    ),
    "nc_v13": Corpus(
        "News Commentary v13",
        {
            p: (NC_V13, f"training-parallel-nc-v13/news-commentary-v13.{p}")
            for p in ("de-en", "cs-en")
        },
    ),
    "rapid_2016": Corpus("Rapid 2016", {"de-en": (RAPID_2016, "rapid2016.de-en")}),
    "paracrawl_v1": Corpus(
        "ParaCrawl v1 (zipporah0-dedup-clean)",
        {
            f"{x}-en": (
                PARACRAWL_V1.format(x=x),
                f"paracrawl-release1.en-{x}.zipporah0-dedup-clean",
            )
            for x in ("de", "cs")
        },
    ),
}


@dataclasses.dataclass(frozen=True)
class Cleaning:
    """Which training pairs are kept: both sides of ``min_len`` to ``max_len`` tokens (None:
    no limit), the longer side at most ``max_ratio`` times the shorter (None: no ratio
    filter), no token over ``max_word_length`` characters (None: any). ``rule``: whose rule
    this is; ``paper_pairs``: the training pairs the paper reports, if it does."""

    min_len: int = 1
    max_len: Optional[int] = None
    max_ratio: Optional[float] = None
    max_word_length: Optional[int] = None
    rule: str = ""
    paper_pairs: Optional[int] = None


#: Chen 2021a and DIET ran tensor2tensor, whose ``compile_data`` drops a pair with an empty
#: side and nothing else (its ``max_length`` 256 then skips longer examples while training;
#: the recipes do not set fairseq's ``--max-source/target-positions 256``, which would also
#: limit decoding). No length-ratio filter: that is fairseq's prepare-wmt14en2de.sh
#: (clean-corpus-n.perl -ratio 1.5 1 250), in no paper.
TENSOR2TENSOR_CLEANING = Cleaning(
    rule="tensor2tensor's compile_data (Chen 2021a, DIET): pairs with an empty side dropped")
#: AT5's Table 5 bins its WMT17 training corpus by sentence length: 5,850,267 pairs, the
#: longest bin (100, 120]. Not stated: the unit or the side; here tokens of both sides.
AT5_CLEANING = Cleaning(
    max_len=120, paper_pairs=5_850_267,
    rule="AT5 Table 5: 5,850,267 pairs, none over 120 tokens (unit and side not stated: "
         "tokens of both sides here)")


@dataclasses.dataclass(frozen=True)
class EvalSet:
    testset: str  # newstest name, used in refs/ and the manifest
    sacrebleu: str  # sacreBLEU test-set name


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    name: str
    other: str  # the non-English language; source = en, target = other
    corpora: Tuple[str, ...]
    valid: EvalSet
    tests: Tuple[EvalSet, ...]
    paper: str
    paracrawl: bool = False  # --paracrawl allowed
    czeng: bool = False  # --czeng allowed
    cleaning: Cleaning = TENSOR2TENSOR_CLEANING

    @property
    def langs(self) -> Tuple[str, str]:
        return ("en", self.other)

    @property
    def pair(self) -> str:
        """Language pair as the corpora name it."""
        return f"{self.other}-en"


NT13 = EvalSet("newstest2013", "wmt13")
NT14 = EvalSet("newstest2014", "wmt14/full")
NT15 = EvalSet("newstest2015", "wmt15")
NT16 = EvalSet("newstest2016", "wmt16")
NT17 = EvalSet("newstest2017", "wmt17")
NT18 = EvalSet("newstest2018", "wmt18")

DATASETS: Dict[str, DatasetSpec] = {
    "wmt15_en_de": DatasetSpec(
        "wmt15_en_de",
        "de",
        ("europarl_v7", "commoncrawl", "nc_v10"),
        valid=NT13,
        tests=(NT15,),
        paper="Chen et al. 2021a, Table 6 (newstest2015, uncased BLEU); validation "
        "newstest2013 as Tensor2Tensor",
    ),
    "wmt17_en_de": DatasetSpec(
        "wmt17_en_de",
        "de",
        ("europarl_v7", "commoncrawl", "nc_v12", "rapid_2016"),
        valid=NT14,
        tests=(NT14, NT15, NT16, NT17),
        paper="Wu et al. 2021 (AT5), Tables 5-6: validation newstest2014, tests "
        "newstest2014-2017",
        cleaning=AT5_CLEANING,
    ),
    "wmt18_en_de": DatasetSpec(
        "wmt18_en_de",
        "de",
        ("europarl_v7", "commoncrawl", "nc_v13"),
        valid=NT13,
        tests=(NT18,),
        paper="Chen et al. 2021b (DIET), Table 4 (newstest2018, sacreBLEU default); "
        "validation newstest2013 as Tensor2Tensor",
        paracrawl=True,
    ),
    "wmt18_en_cs": DatasetSpec(
        "wmt18_en_cs",
        "cs",
        ("europarl_v7", "commoncrawl", "nc_v13"),
        valid=NT13,
        tests=(NT18, NT15),
        paper="Chen et al. 2021b (DIET), Table 4 (newstest2018) and Chen et al. 2021a, "
        "Table 6 EN-CS (newstest2015, uncased); validation newstest2013 as Tensor2Tensor",
        paracrawl=True,
        czeng=True,
    ),
}


# --------------------------------------------------------------------------------------
# Small utilities
# --------------------------------------------------------------------------------------


class PrepareError(Exception):
    """An error the user can act on; the message says what to do."""


class CorruptArchive(Exception):
    pass


class IncompleteDownload(Exception):
    pass


def log(msg: str) -> None:
    print(f"{LOG_PREFIX} {msg}", file=sys.stderr, flush=True)


def progress(total: Optional[int], desc: str, unit: str = "lines", file=None, **kwargs):
    """A tqdm progress bar (size, rate, ETA) on stderr while it is a terminal, silent
    otherwise (tqdm's ``disable=None``): logs and CI output keep the log lines alone."""
    from tqdm import tqdm

    return tqdm(total=total, desc=f"{LOG_PREFIX} {desc}", unit=unit, disable=None, leave=False,
                file=file if file is not None else sys.stderr, dynamic_ncols=True, **kwargs)


def key_of(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:20]


def tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp.{os.getpid()}")


@contextlib.contextmanager
def atomic_output(path: Path):
    """Yield a temporary path next to ``path``; rename it to ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(path)
    if tmp.is_dir():
        shutil.rmtree(tmp)
    elif tmp.exists():
        tmp.unlink()
    try:
        yield tmp
        if path.is_dir() and tmp.is_dir():
            old = path.with_name(f".{path.name}.old.{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def open_text(path: Path, mode: str = "r"):
    """Open UTF-8 text with ``\\n`` as the only line separator (so ``\\r`` inside a line does
    not split it); invalid input bytes are replaced."""
    if "r" in mode:
        return open(path, mode, encoding="utf-8", errors="replace", newline="\n")
    return open(path, mode, encoding="utf-8", newline="\n")


def count_lines(path: Path) -> int:
    """Lines as :func:`open_text` splits them (a last line without ``\\n`` counts)."""
    n = 0
    last = b"\n"
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                break
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def check_parallel(files: Sequence[Path], what: str = "") -> int:
    """Stop with a message naming the files if their line counts differ."""
    counts = [count_lines(f) for f in files]
    if len(set(counts)) > 1:
        listing = ", ".join(f"{f} has {c} lines" for f, c in zip(files, counts))
        raise PrepareError(
            f"parallel files differ in length{(' (' + what + ')') if what else ''}: {listing}. "
            "They must have one line per sentence pair. If they came from an archive, the "
            "archive is probably damaged or of another version: delete it (and its .sha256) "
            "from the download directory, delete the extracted files, and rerun."
        )
    return counts[0]


_LINE_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def sanitize(line: str) -> str:
    """Strip the newline and turn characters other readers treat as line breaks into spaces."""
    return _LINE_BREAKS.sub(" ", line.rstrip("\n")).strip()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class Stamps:
    """``DEST/.stamps/STEP.json``: the step's key, outputs (relative to DEST) and info."""

    def __init__(self, dest: Path):
        self.dest = dest
        self.dir = dest / ".stamps"

    def _path(self, step: str) -> Path:
        return self.dir / (step.replace("/", "_") + ".json")

    def get(self, step: str) -> Optional[dict]:
        try:
            return json.loads(self._path(step).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def done(self, step: str, key: str) -> Optional[dict]:
        """The stamp if the step finished with this key and its outputs still exist."""
        stamp = self.get(step)
        if not stamp or stamp.get("key") != key:
            return None
        if not all((self.dest / o).exists() for o in stamp.get("outputs", [])):
            return None
        return stamp

    def mark(self, step: str, key: str, outputs: Iterable[Path], info: Optional[dict] = None):
        rel = [str(Path(o).resolve().relative_to(self.dest.resolve())) for o in outputs]
        stamp = {
            "step": step,
            "key": key,
            "outputs": rel,
            "info": info or {},
            "finished": datetime.datetime.now().isoformat(timespec="seconds"),
        }
        write_text_atomic(self._path(step), json.dumps(stamp, indent=1) + "\n")
        return stamp


# --------------------------------------------------------------------------------------
# Downloads
# --------------------------------------------------------------------------------------


def url_filename(url: str) -> str:
    """The file a URL names: its path's last part, or a ``download.php?f=NAME`` query's NAME."""
    parsed = urllib.parse.urlsplit(url)
    named = urllib.parse.parse_qs(parsed.query).get("f")
    return Path(named[0]).name if named else Path(parsed.path).name


def mirror_relpath(url: str) -> str:
    """Where a URL lives under a mirror: ``host/path`` (the layout ``wget -x`` makes), with
    a ``?f=NAME`` download script's NAME in place of the script."""
    parsed = urllib.parse.urlsplit(url)
    return f"{parsed.netloc}{Path(parsed.path).parent.as_posix()}/{url_filename(url)}" \
        if parsed.query else parsed.netloc + parsed.path


def normalize_mirror(base: str) -> str:
    if re.match(r"^(https?|file)://", base):
        return base.rstrip("/")
    path = Path(base).expanduser().resolve()
    if not path.is_dir():
        raise PrepareError(f"--mirror {base}: no such directory (give a directory or a URL)")
    return path.as_uri()


def read_url_text(url: str, timeout: float) -> Optional[str]:
    """Small text file from a URL, or None if it does not exist."""
    try:
        req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        if e.code in (403, 404, 410):
            return None
        raise PrepareError(f"could not read {url}: HTTP {e.code}") from e
    except urllib.error.URLError as e:
        if isinstance(e.reason, (FileNotFoundError, NotADirectoryError)) or url.startswith(
            "file:"
        ):
            return None
        raise PrepareError(f"could not read {url}: {e.reason}") from e


def parse_sums(text: Optional[str]) -> Dict[str, str]:
    """``HEX  relpath`` lines (sha256sum / md5sum output) -> {relpath: hex}."""
    sums = {}
    for line in (text or "").splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and not line.startswith("#"):
            sums[parts[1].lstrip("*").strip()] = parts[0].lower()
    return sums


def _open_decompressed(path: Path):
    """The file, decompressed by its magic bytes (gzip/bzip2/xz check CRCs at the end)."""
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic[:2] == b"\x1f\x8b":
        return gzip.open(path, "rb")
    if magic[:3] == b"BZh":
        return bz2.open(path, "rb")
    if magic[:6] == b"\xfd7zXZ\x00":
        return lzma.open(path, "rb")
    return open(path, "rb")


_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError, lzma.LZMAError, ValueError)


def verify_archive(path: Path) -> int:
    """Read the whole tar archive (every member's data and the compressed stream to its end,
    so gzip's CRC and length are checked), or check every member's CRC of a zip archive.
    Returns the number of members; raises :class:`CorruptArchive`."""
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                bad = zf.testzip()
                members = len(zf.infolist())
        except (zipfile.BadZipFile, OSError) as e:
            raise CorruptArchive(f"{type(e).__name__}: {e}") from e
        if bad is not None:
            raise CorruptArchive(f"member {bad} fails its CRC check")
        if members == 0:
            raise CorruptArchive("the archive has no members")
        return members
    members = 0
    try:
        with _open_decompressed(path) as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
            for member in tar:
                members += 1
                if member.isfile():
                    f = tar.extractfile(member)
                    while f.read(1 << 20):
                        pass
            while raw.read(1 << 20):  # trailing padding: reach the CRC
                pass
    except _READ_ERRORS as e:
        raise CorruptArchive(f"{type(e).__name__}: {e}") from e
    if members == 0:
        raise CorruptArchive("the archive has no members")
    return members


class Downloader:
    """Resumable downloads into ``download_dir`` with verification.

    ``expected_sha256`` maps URLs to known checksums (from a mirror's SHA256SUMS);
    ``published`` maps URLs to the size and hash of the archive as published
    (:data:`PUBLISHED_ARCHIVES`), for downloads from those URLs."""

    def __init__(
        self,
        download_dir: Path,
        mirror: Optional[str] = None,
        expected_sha256: Optional[Dict[str, str]] = None,
        retries: int = 3,
        retry_wait: float = 5.0,
        timeout: float = 60.0,
        published: Optional[Dict[str, PublishedArchive]] = None,
    ):
        self.dir = download_dir
        self.mirror = mirror
        self.expected = expected_sha256 or {}
        self.published = published or {}
        self.retries = retries
        self.retry_wait = retry_wait
        self.timeout = timeout

    def source_url(self, url: str) -> str:
        return f"{self.mirror}/{mirror_relpath(url)}" if self.mirror else url

    def path_for(self, url: str) -> Path:
        return self.dir / url_filename(url)

    def fetch(self, url: str) -> Tuple[Path, str]:
        """Make sure the archive for ``url`` is here and intact; return (path, sha256)."""
        path = self.path_for(url)
        src = self.source_url(url)
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / f".{path.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._fetch_locked(url, src, path)

    def _fetch_locked(self, url: str, src: str, path: Path) -> Tuple[Path, str]:
        sidecar = path.with_name(path.name + ".sha256")
        expected = self.expected.get(url)
        if path.exists():
            recorded = sidecar.read_text().split()[0] if sidecar.exists() else None
            if recorded:
                actual = sha256_file(path)
                if (actual == recorded and (expected is None or actual == expected)
                        and self._as_published(path, url, actual) is None):
                    log(f"download {path.name}: done (sha256 verified)")
                    return path, actual
                log(
                    f"download {path.name}: the file changed since it was downloaded "
                    f"(sha256 {actual[:12]}..., recorded {recorded[:12]}...); fetching it again"
                )
                path.unlink()
                sidecar.unlink()
            else:
                # Placed by hand, or the run stopped before the checksum was written.
                log(f"download {path.name}: found without a checksum; verifying it")
                try:
                    self._check(path, url, src, expected)
                    digest = sha256_file(path)
                    write_text_atomic(sidecar, f"{digest}  {path.name}\n")
                    return path, digest
                except CorruptArchive as e:
                    log(f"download {path.name}: {e}; fetching it again")
                    path.unlink()
        for attempt in (1, 2):
            part = path.with_name(path.name + ".part")
            self._download(src, part)
            try:
                self._check(part, url, src, expected)
            except CorruptArchive as e:
                part.unlink()
                if attempt == 1:
                    log(
                        f"download {path.name}: corrupt archive from {src} ({e}); "
                        "deleted, fetching it again"
                    )
                    continue
                raise PrepareError(
                    f"{path} downloaded from {src} is corrupt twice in a row ({e}). The copy on "
                    "the server may be damaged: try again later, download the file by other means "
                    f"and put it at {path} (the next run verifies it), or use --mirror."
                ) from e
            digest = sha256_file(part)
            differs = self._as_published(part, url, digest)
            if differs is not None:
                part.unlink()
                raise PrepareError(
                    f"{path.name} from {src} is not the archive as published: {differs}. The "
                    "server's copy may have changed or been damaged; the data would then not "
                    "be the papers'. Try again later, or pass --ignore-published-checksums to "
                    "use it anyway (and say so beside any table made from it).")
            os.replace(part, path)
            write_text_atomic(sidecar, f"{digest}  {path.name}\n")
            return path, digest
        raise AssertionError("unreachable")

    def _as_published(self, path: Path, url: str, sha256: str) -> Optional[str]:
        """None if ``path`` is ``url``'s archive as published (or nothing is pinned for
        it), else what differs."""
        known = self.published.get(url)
        if known is None:
            return None
        size = path.stat().st_size
        if size != known.size:
            return f"{size:,} bytes, the published archive has {known.size:,}"
        if known.sha256 is not None and sha256 != known.sha256:
            return f"sha256 {sha256}, the published archive has {known.sha256}"
        if known.sha1 is not None:
            h = hashlib.sha1()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            if h.hexdigest() != known.sha1:
                return f"sha1 {h.hexdigest()}, the published archive has {known.sha1}"
        return None

    def _check(self, path: Path, url: str, src: str, expected: Optional[str]) -> None:
        if expected is not None:
            actual = sha256_file(path)
            if actual != expected:
                raise CorruptArchive(f"sha256 {actual} differs from the expected {expected}")
        n = verify_archive(path)
        name = Path(urllib.parse.urlsplit(url).path).name
        log(f"download {name}: archive verified ({n} members)")

    def _download(self, src: str, part: Path) -> None:
        name = part.name[: -len(".part")]
        for attempt in range(self.retries + 1):
            have = part.stat().st_size if part.exists() else 0
            try:
                if have:
                    log(f"download {name}: resuming {src} at byte {have}")
                else:
                    log(f"download {name}: {src}")
                if src.startswith("file:"):
                    self._copy_file(src, part)
                else:
                    self._http(src, part)
                return
            except urllib.error.HTTPError as e:
                if e.code in (401, 403, 404, 410):
                    raise PrepareError(
                        f"{src}: HTTP {e.code} {e.reason}. The file may have moved: download it "
                        f"by hand and put it at {part.with_name(name)} (the next run verifies "
                        "and uses it), or point --mirror at a copy."
                    ) from e
                err: Exception = e
            except FileNotFoundError as e:
                raise PrepareError(f"{src}: not found in the mirror ({e})") from e
            except (
                urllib.error.URLError,
                http.client.HTTPException,
                ConnectionError,
                socket.timeout,
                TimeoutError,
                IncompleteDownload,
            ) as e:
                err = e
            got = part.stat().st_size if part.exists() else 0
            if attempt == self.retries:
                kept = (
                    f"the {got} bytes received are kept in {part} and a rerun resumes from there"
                    if got
                    else "nothing was received"
                )
                raise PrepareError(
                    f"downloading {src} failed {self.retries + 1} times (last error: {err}); "
                    f"{kept}. Check the network and rerun (or raise --retries), put a copy of "
                    f"the file at {part.with_name(name)}, or use --mirror."
                )
            wait = self.retry_wait * (2**attempt)
            what = f"interrupted at byte {got}" if got else "failed"
            log(f"download {name}: {what} ({err}); retrying in {wait:g}s")
            time.sleep(wait)

    def _http(self, src: str, part: Path) -> None:
        have = part.stat().st_size if part.exists() else 0
        headers = {"User-Agent": USER_AGENT}
        if have:
            headers["Range"] = f"bytes={have}-"
        req = urllib.request.Request(src, headers=headers)
        try:
            resp = urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            if e.code == 416 and have:
                m = re.match(r"bytes \*/(\d+)", e.headers.get("Content-Range", "") or "")
                if m and int(m.group(1)) == have:
                    return  # the .part was already complete (the run stopped before the check)
                log(f"download {part.name}: server refused to resume; starting over")
                part.unlink()
                raise IncompleteDownload("range not satisfiable") from e
            raise
        with resp:
            total: Optional[int] = None
            if have and resp.status == 206:
                m = re.match(r"bytes (\d+)-(\d+)/(\d+|\*)", resp.headers.get("Content-Range", ""))
                if not m or int(m.group(1)) != have:
                    part.unlink()
                    raise IncompleteDownload("server answered with an unexpected range")
                total = int(m.group(3)) if m.group(3) != "*" else None
                mode = "ab"
            else:
                if have:
                    log(f"download {part.name}: server ignored the range request; starting over")
                have = 0
                length = resp.headers.get("Content-Length")
                total = int(length) if length is not None else None
                mode = "wb"
            self._copy_stream(resp, part, mode, have, total)
        size = part.stat().st_size
        if total is not None and size != total:
            raise IncompleteDownload(f"received {size} of {total} bytes")

    def _copy_file(self, src: str, part: Path) -> None:
        path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(src).path))
        total = path.stat().st_size
        have = part.stat().st_size if part.exists() else 0
        if have > total:
            part.unlink()
            have = 0
        with open(path, "rb") as f:
            f.seek(have)
            self._copy_stream(f, part, "ab" if have else "wb", have, total)

    @staticmethod
    def _copy_stream(stream, part: Path, mode: str, have: int, total: Optional[int]) -> None:
        done = have
        next_report = time.monotonic() + 30
        name = part.name[: -len(".part")] if part.name.endswith(".part") else part.name
        with open(part, mode) as out, progress(total, f"download {name}", unit="B",
                                               unit_scale=True, unit_divisor=1024,
                                               initial=have) as bar:
            while True:
                block = stream.read(1 << 20)
                if not block:
                    break
                out.write(block)
                done += len(block)
                bar.update(len(block))
                if bar.disable and time.monotonic() > next_report:  # no bar: a log line
                    pct = f" ({100 * done / total:.0f}%)" if total else ""
                    log(f"download {part.name}: {done >> 20} MiB{pct}")
                    next_report = time.monotonic() + 30
            out.flush()
            os.fsync(out.fileno())


def extract_members(archive: Path, members: Dict[str, Path]) -> None:
    """Stream through ``archive`` once and write the wanted members (archive name -> output
    path), each atomically."""
    wanted = dict(members)
    found = set()
    seen: List[str] = []
    try:
        with _open_decompressed(archive) as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
            for member in tar:
                name = member.name[2:] if member.name.startswith("./") else member.name
                seen.append(name)
                if name in wanted and member.isfile():
                    with atomic_output(wanted[name]) as tmp, open(tmp, "wb") as out:
                        shutil.copyfileobj(tar.extractfile(member), out, 1 << 20)
                    found.add(name)
    except _READ_ERRORS as e:
        raise PrepareError(
            f"cannot read {archive} ({type(e).__name__}: {e}); delete it and its .sha256 and rerun"
        ) from e
    missing = sorted(set(wanted) - found)
    if missing:
        raise PrepareError(
            f"{archive} has no member {', '.join(missing)} (it has: {', '.join(seen[:20])}"
            f"{' ...' if len(seen) > 20 else ''}). The archive is not the expected version: "
            "delete it and its .sha256 and rerun, or check the URL."
        )


# --------------------------------------------------------------------------------------
# Text processing: sacremoses, cleaning, BPE
# --------------------------------------------------------------------------------------

_WORKER: dict = {}

#: Marks a token that nothing separated from the previous one in the raw text, so that the
#: tokens detokenize to exactly that text (the joiner of OpenNMT's tokenizer, U+FFED).
JOINER = "\uffed"
#: The subword-nmt path's tokenization, as bpe.json and the manifest record it (datasets
#: prepared before it record none: they detokenize with sacremoses, which loses „ “ etc.).
TOKENIZER = "sacremoses(-a, no escaping)+joiner"


def mark_joints(raw: str, tokens: Sequence[str]) -> List[str]:
    """``tokens`` of ``raw`` (``MosesTokenizer.tokenize(escape=False)``), each prefixed with
    :data:`JOINER` when it directly follows the previous one in ``raw``. The hyphen that
    ``aggressive_dash_splits`` writes as ``@-@`` is the raw ``-``. A token that is not a
    substring of ``raw`` (nothing in sacremoses makes one from text without control
    characters) is kept as a word of its own."""
    out: List[str] = []
    pos = 0
    for token in tokens:
        text = "-" if token == "@-@" else token
        at = raw.find(text, pos)
        if at < 0:
            out.append(token)
            continue
        out.append(JOINER + text if out and at == pos else text)
        pos = at + len(text)
    return out


def join_marked(tokens: Sequence[str]) -> str:
    """The inverse of :func:`mark_joints`: a token starting with :data:`JOINER` is attached
    to the previous one. A joiner anywhere else (model output can have one) is dropped."""
    words: List[str] = []
    for token in tokens:
        attached = token.startswith(JOINER) and words
        token = token.replace(JOINER, "")
        if attached:
            words[-1] += token
        elif token:
            words.append(token)
    return " ".join(words)


def _init_worker(lang: str, tokenize: bool) -> None:
    from sacremoses import MosesTokenizer

    _WORKER["tok"] = MosesTokenizer(lang=lang) if tokenize else None


def _process_chunk(lines: List[str]) -> List[str]:
    tok = _WORKER["tok"]
    out = []
    for line in lines:
        text = " ".join(sanitize(line).split())
        if tok is not None:
            text = text.replace(JOINER, "\u25a0")  # a raw joiner would be read as a mark
            tokens = tok.tokenize(text, aggressive_dash_splits=True, return_str=False,
                                  escape=False)
            text = " ".join(mark_joints(text, tokens))
        out.append(text)
    return out


def _chunks(path: Path, size: int = CHUNK_LINES) -> Iterator[List[str]]:
    with open_text(path) as f:
        chunk = []
        for line in f:
            chunk.append(line)
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def moses_process_lines(lines: Sequence[str], lang: str, tokenize: bool = True) -> List[str]:
    """Clean up whitespace (and tokenize) lines in this process, as the pipeline does."""
    key = (lang, tokenize)
    if _WORKER.get("key") != key:
        _init_worker(lang, tokenize)
        _WORKER["key"] = key
    return _process_chunk(list(lines))


def map_file(src: Path, out: Path, init, initargs: tuple, process, workers: int,
             what: str) -> int:
    """``out``'s lines = ``process(chunk)`` over ``src``'s chunks of lines, in order, with
    ``workers`` processes (each set up by ``init(*initargs)``) and a progress bar; the line
    count must not change. Returns it."""
    n = 0
    n_in = count_lines(src)
    with atomic_output(out) as tmp, open_text(tmp, "w") as fout, progress(
            n_in, f"{what} {src.name}") as bar:
        if workers <= 1:
            init(*initargs)
            results: Iterable[List[str]] = map(process, _chunks(src))
            pool = None
        else:
            import multiprocessing

            pool = multiprocessing.Pool(workers, initializer=init, initargs=initargs)
            results = pool.imap(process, _chunks(src), chunksize=1)
        try:
            for chunk in results:
                for line in chunk:
                    fout.write(line + "\n")
                n += len(chunk)
                bar.update(len(chunk))
        except BaseException:
            if pool is not None:
                pool.terminate()
            raise
        finally:
            if pool is not None:
                pool.close()
                pool.join()
    if n != n_in:
        raise PrepareError(f"{what} turned {src} ({n_in} lines) into {n} lines: please report "
                           "this")
    return n


def _init_tokenizer(lang: str, tokenize: bool) -> None:
    _init_worker(lang, tokenize)
    _WORKER["key"] = (lang, tokenize)


def moses_process_file(src: Path, out: Path, lang: str, tokenize: bool, workers: int) -> int:
    """Whitespace clean-up (+ sacremoses tokenization with joiners) of a file, with
    ``workers`` processes."""
    return map_file(src, out, _init_tokenizer, (lang, tokenize), _process_chunk, workers,
                    "tokenize")


def _init_bpe(codes: Path, vocab: Path, threshold: int) -> None:
    from subword_nmt.apply_bpe import BPE, read_vocabulary

    with open(codes, encoding="utf-8") as c, open(vocab, encoding="utf-8") as v:
        _WORKER["bpe"] = BPE(c, vocab=read_vocabulary(v, threshold))


def _bpe_chunk(lines: List[str]) -> List[str]:
    bpe = _WORKER["bpe"]
    return [bpe.process_line(line.rstrip("\n")) for line in lines]


def clean_corpus(
    inputs: Tuple[Path, Path],
    outputs: Tuple[Path, Path],
    cleaning: Cleaning,
    corpora: Sequence[Tuple[str, int]] = (),
) -> Tuple[int, int, Dict[str, Dict[str, int]]]:
    """Keep the pairs of a pair of tokenized files that ``cleaning`` keeps (whitespace
    collapsed). ``corpora``: (name, pairs) of the consecutive corpora the files hold.
    Returns (read, kept, {corpus: {"raw": n, "kept": k}})."""
    c = cleaning
    per_corpus = {name: {"raw": n, "kept": 0} for name, n in corpora}
    # the corpus of each line, lazily (a list would hold one entry per training pair)
    corpus_at = itertools.chain.from_iterable(itertools.repeat(name, n) for name, n in corpora)
    read = kept = 0
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(atomic_output(o)) for o in outputs]
        fa, fb = (stack.enter_context(open_text(p)) for p in inputs)
        oa, ob = (stack.enter_context(open_text(t, "w")) for t in tmps)
        for a, b in zip(fa, fb):
            read += 1
            corpus = next(corpus_at, None)
            wa, wb = a.split(), b.split()
            na, nb = len(wa), len(wb)
            if na < c.min_len or nb < c.min_len:
                continue
            if c.max_len is not None and (na > c.max_len or nb > c.max_len):
                continue
            if c.max_ratio is not None and (na / nb > c.max_ratio or nb / na > c.max_ratio):
                continue
            if c.max_word_length is not None and any(
                    len(w) > c.max_word_length for w in (*wa, *wb)):
                continue
            oa.write(" ".join(wa) + "\n")
            ob.write(" ".join(wb) + "\n")
            kept += 1
            if corpus is not None:
                per_corpus[corpus]["kept"] += 1
    return read, kept, per_corpus


def learn_subword_nmt(
    inputs: Sequence[Path], codes: Path, vocabs: Sequence[Path], merges: int, workers: int
) -> int:
    """subword-nmt learn-joint-bpe-and-vocab (its own function, argument parser and all)."""
    from subword_nmt import learn_joint_bpe_and_vocab as lj

    with contextlib.ExitStack() as stack:
        tmp_codes = stack.enter_context(atomic_output(codes))
        tmp_vocabs = [stack.enter_context(atomic_output(v)) for v in vocabs]
        args = lj.create_parser().parse_args(
            ["--input", *map(str, inputs), "--output", str(tmp_codes), "--symbols", str(merges)]
            + ["--write-vocabulary", *map(str, tmp_vocabs), "--num-workers", str(workers)]
        )
        for f in [*args.input, args.output, *args.vocab]:
            f.close()  # argparse.FileType opened them; subword-nmt reopens them by name
        lj.learn_joint_bpe_and_vocab(args)
    with open_text(codes) as f:
        return sum(1 for line in f if not line.startswith("#version"))


def apply_subword_nmt(
    src: Path, out: Path, codes: Path, vocab: Path, threshold: int, workers: int
) -> None:
    """subword-nmt apply-bpe -c codes --vocabulary vocab --vocabulary-threshold T (its
    ``BPE.process_line``, over chunks in ``workers`` processes, with a progress bar)."""
    map_file(src, out, _init_bpe, (codes, vocab, threshold), _bpe_chunk, workers,
             "subword-nmt apply-bpe")


def train_sentencepiece(
    inputs: Sequence[Path], model: Path, vocab_size: int, model_type: str, sample: int, workers: int
) -> None:
    import sentencepiece as spm

    with atomic_output(model) as tmp_model, atomic_output(model.with_suffix(".vocab")) as tmp_vocab:
        prefix = tmp_model.with_name(f".spm.train.{os.getpid()}")
        spm.SentencePieceTrainer.train(
            input=[str(p) for p in inputs],
            model_prefix=str(prefix),
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,
            # no NFKC: it would turn "…" into "...", and the output must come back to the
            # raw references
            normalization_rule_name="identity",
            input_sentence_size=sample,
            shuffle_input_sentence=True,
            hard_vocab_limit=False,
            num_threads=max(1, workers),
            minloglevel=1,
        )
        os.replace(f"{prefix}.model", tmp_model)
        os.replace(f"{prefix}.vocab", tmp_vocab)


def apply_sentencepiece(src: Path, out: Path, model: Path, workers: int) -> None:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    n = 0
    total = count_lines(src)
    with atomic_output(out) as tmp, open_text(tmp, "w") as fout, progress(
            total, f"sentencepiece {src.name}") as bar:
        for chunk in _chunks(src, 10000):
            lines = [line.rstrip("\n") for line in chunk]
            pieces = sp.encode(lines, out_type=str, num_threads=workers)
            for p in pieces:
                fout.write(" ".join(p) + "\n")
            n += len(chunk)
            bar.update(len(chunk))
    if n != total:
        raise PrepareError(f"sentencepiece changed the line count of {src}")


# --------------------------------------------------------------------------------------
# sacreBLEU test sets
# --------------------------------------------------------------------------------------

# Runs in a fresh interpreter so that $SACREBLEU (read by sacreBLEU at import) takes effect.
# Everything is sacreBLEU's own: download_file (with its md5 check), extraction, and the
# SGML processing of its FakeSGMLDataset. Only in mirror mode are a dataset's URLs (and,
# where the mirror lists them, md5s) replaced before sacreBLEU uses them.
_SACREBLEU_SNIPPET = r"""
import json, os, shutil, sys
req = json.loads(sys.argv[1])
from sacrebleu.dataset import DATASETS
out = {}
for item in req:
    ds = DATASETS[item["name"]]
    if item.get("urls"):
        ds.data = item["urls"]
        ds.md5 = item["md5"]
    for attempt in (1, 2):
        try:
            files = {lp: {"src": ds.get_source_file(lp), "refs": ds.get_reference_files(lp)}
                     for lp in item["langpairs"]}
            break
        except (Exception, SystemExit) as e:
            raw = os.path.join(os.environ["SACREBLEU"], ds.name, "raw")
            if attempt == 2 or not os.path.isdir(raw):
                sys.stderr.write("sacreBLEU could not prepare %s: %r\n" % (ds.name, e))
                sys.exit(3)
            sys.stderr.write("sacreBLEU could not prepare %s (%r): removing its cache %s and "
                             "downloading it again\n" % (ds.name, e, os.path.dirname(raw)))
            shutil.rmtree(os.path.dirname(raw))
    out[item["name"]] = files
print(json.dumps(out))
"""


def sacrebleu_fetch(
    requests: List[dict], cache: Path, timeout: float = 3600
) -> Dict[str, Dict[str, dict]]:
    env = dict(os.environ, SACREBLEU=str(cache))
    proc = subprocess.run(
        [sys.executable, "-c", _SACREBLEU_SNIPPET, json.dumps(requests)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise PrepareError(
            f"sacreBLEU failed to provide {', '.join(r['name'] for r in requests)} "
            f"(cache {cache}):\n{tail}\nIf a download failed, check the network (or --mirror) "
            f"and rerun; if a checksum is wrong, delete {cache}/<test set> and rerun."
        )
    for line in proc.stderr.splitlines():
        if line.startswith("sacreBLEU could not"):
            log(line)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def read_lines(path: Path) -> List[str]:
    with open_text(path) as f:
        return [line.rstrip("\n") for line in f]


# --------------------------------------------------------------------------------------
# The preparation
# --------------------------------------------------------------------------------------


#: The block number in a CzEng 1.6 sentence ID, as UFAL's converter reads it.
CZENG_BLOCK = re.compile(r"^[^-]+-b(\d+)-\d\d[tde]")


def czeng17_bad_blocks(archive: Path) -> set:
    """The blocks that CzEng 1.7 leaves out: the ``qw{...}`` list of the Perl script in
    UFAL's ``convert_czeng16_to_17.pl.zip``."""
    with zipfile.ZipFile(archive) as zf:
        scripts = [n for n in zf.namelist() if n.endswith(".pl")]
        text = zf.read(scripts[0]).decode("utf-8", "replace") if scripts else ""
    found = re.search(r"qw\{([\s\d]*)\}", text)
    if not found:
        raise PrepareError(f"{archive}: no qw{{...}} block list in a .pl script; is this "
                           "UFAL's convert_czeng16_to_17.pl.zip?")
    return set(found.group(1).split())


def czeng_files(path: Path) -> List[Path]:
    """CzEng 1.6's training files: ``data.plaintext-format/NNtrain.gz`` under ``path`` (the
    dev and test files are left out), or ``path`` itself if it is a file."""
    if not path.is_dir():
        return [path]
    files = sorted(path.rglob("data.plaintext-format/*train.gz"))
    if not files:
        raise PrepareError(
            f"--czeng {path}: no data.plaintext-format/??train.gz under it. Give the directory "
            "of CzEng 1.6's plain-text export (CzEng 1.7 is CzEng 1.6 less the blocks that "
            "UFAL's convert_czeng16_to_17.pl lists; the preparation applies that list)")
    return files


def iter_czeng(path: Path, bad_blocks: set) -> Iterator[Tuple[str, str]]:
    """(Czech, English) pairs of CzEng 1.7: CzEng 1.6's training files (lines
    ``ID<TAB>score<TAB>Czech<TAB>English``) without the pairs in ``bad_blocks``."""
    malformed = pairs = dropped = 0
    for f in czeng_files(path):
        if tarfile.is_tarfile(f):
            raise PrepareError(
                f"{f} is a tar archive: extract it and pass the directory to --czeng"
            )
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt", encoding="utf-8", errors="replace", newline="\n") as fin:
            for line in fin:
                if not line.strip():
                    continue
                cols = line.rstrip("\n").split("\t")
                if len(cols) != 4:
                    malformed += 1
                    continue
                block = CZENG_BLOCK.match(cols[0])
                if block and block.group(1) in bad_blocks:
                    dropped += 1
                    continue
                pairs += 1
                yield cols[2], cols[3]
    if bad_blocks:
        log(f"czeng: dropped {dropped} pairs of {len(bad_blocks)} CzEng 1.7 blocks"
            " (UFAL's convert_czeng16_to_17.pl)")
    if malformed:
        log(f"czeng: skipped {malformed} lines without 4 tab-separated columns "
            "(ID, score, Czech, English)")
    if pairs == 0:
        raise PrepareError(
            f"--czeng {path}: no sentence pairs found. Expected CzEng 1.6 plain text: files "
            "(.gz or plain) with lines ID<TAB>score<TAB>Czech<TAB>English."
        )


def czeng_fingerprint(path: Path) -> list:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [[str(p), p.stat().st_size, int(p.stat().st_mtime)] for p in files]


@dataclasses.dataclass
class Options:
    dest: Path
    download_dir: Path
    mirror: Optional[str]
    sacrebleu_dir: Path
    bpe: str
    bpe_size: int
    vocab_threshold: int
    spm_model_type: str
    spm_sample: int
    # the dataset's cleaning where None (Cleaning: its paper's rule)
    min_len: Optional[int]
    max_len: Optional[int]
    max_ratio: Optional[float]
    paracrawl: bool
    czeng: Optional[Path]
    workers: int
    retries: int
    retry_wait: float
    timeout: float
    download_only: bool
    # check archives from the official URLs against PUBLISHED_ARCHIVES (a --mirror vouches
    # for its files with its own SHA256SUMS)
    check_published: bool = True
    czeng_release: str = "1.7"  # "1.6": without the 1.7 block list


class Preparation:
    def __init__(self, spec: DatasetSpec, opts: Options):
        self.spec = spec
        self.o = opts
        self.dest = opts.dest
        self.work = opts.dest / "work"
        self.stamps = Stamps(opts.dest)
        self.src, self.tgt = spec.langs
        self.sha256: Dict[str, str] = {}
        self.md5: Dict[str, str] = {}
        if opts.mirror:
            self.sha256 = parse_sums(read_url_text(f"{opts.mirror}/SHA256SUMS", opts.timeout))
            self.md5 = parse_sums(read_url_text(f"{opts.mirror}/MD5SUMS", opts.timeout))
        self.downloader = Downloader(
            opts.download_dir,
            mirror=opts.mirror,
            expected_sha256={
                u: self.sha256[mirror_relpath(u)]
                for u in self._urls()
                if mirror_relpath(u) in self.sha256
            },
            retries=opts.retries,
            retry_wait=opts.retry_wait,
            timeout=opts.timeout,
            published=PUBLISHED_ARCHIVES if opts.check_published and not opts.mirror else None,
        )

    # -- helpers ------------------------------------------------------------------------
    def corpora(self) -> List[str]:
        names = list(self.spec.corpora)
        if self.o.paracrawl:
            names.append("paracrawl_v1")
        return names

    def _urls(self) -> List[str]:
        urls = {CORPORA[c].files[self.spec.pair][0] for c in self.corpora()}
        if self.o.czeng and self.o.czeng_release == "1.7":
            urls.add(CZENG17_FILTER)
        return sorted(urls)

    def eval_sets(self) -> List[EvalSet]:
        seen, out = set(), []
        for e in (self.spec.valid, *self.spec.tests):
            if e.testset not in seen:
                seen.add(e.testset)
                out.append(e)
        return out

    def _skip(self, step: str, key: str) -> Optional[dict]:
        stamp = self.stamps.done(step, key)
        if stamp:
            log(f"{step}: done, skipping")
        return stamp

    # -- steps --------------------------------------------------------------------------
    def run(self) -> dict:
        log(f"dataset {self.spec.name} -> {self.dest} ({self.spec.paper})")
        self.dest.mkdir(parents=True, exist_ok=True)
        if self.o.download_only:
            for url in self._urls():
                self.downloader.fetch(url)
            self.step_eval_sets()
            log("downloads complete (--download-only)")
            return {}
        extract_keys = [self.step_extract(c) for c in self.corpora()]
        gather = self.step_gather(extract_keys)
        refs = self.step_eval_sets()
        tok = self.step_tokenize_train(gather["key"])
        clean = self.step_clean(tok, gather)
        eval_tok = {
            e.testset: self.step_tokenize_eval(e, refs[e.testset]["key"]) for e in self.eval_sets()
        }
        model = self.step_learn_bpe(clean["key"])
        bpe = self.step_apply_bpe(model["key"], clean["key"], eval_tok)
        binarized = self.step_binarize(bpe)
        return self.write_manifest(gather, clean, refs, model, binarized)

    def step_extract(self, corpus: str) -> str:
        url, prefix = CORPORA[corpus].files[self.spec.pair]
        outputs = {
            f"{prefix}.{lang}": self.work / "extracted" / corpus / f"{prefix}.{lang}"
            for lang in self.spec.langs
        }
        step = f"extract.{corpus}"
        key = key_of({"url": url, "members": sorted(outputs)})
        if self._skip(step, key):
            return key
        archive, digest = self.downloader.fetch(url)
        log(f"{step}: {', '.join(outputs)} from {archive.name}")
        extract_members(archive, outputs)
        files = [outputs[f"{prefix}.{lang}"] for lang in self.spec.langs]
        n = check_parallel(files, f"{CORPORA[corpus].title} in {archive.name}")
        self.stamps.mark(step, key, files, {"archive": archive.name, "sha256": digest, "pairs": n})
        return key

    def _raw_train(self) -> List[Path]:
        return [self.work / f"train.raw.{lang}" for lang in self.spec.langs]

    def step_gather(self, extract_keys: List[str]) -> dict:
        czeng = self.o.czeng
        release = self.o.czeng_release
        czeng_filter = (self.downloader.fetch(CZENG17_FILTER)
                        if czeng and release == "1.7" else None)
        key = key_of({
            "extract": extract_keys,
            "czeng": czeng_fingerprint(czeng) if czeng else None,
            "czeng_release": release if czeng else None,
            "czeng17_filter": czeng_filter[1] if czeng_filter else None,
            "v": 2,
        })
        outs = self._raw_train()
        stamp = self._skip("gather", key)
        if stamp:
            return stamp
        counts = {}
        with contextlib.ExitStack() as stack:
            tmps = [stack.enter_context(atomic_output(o)) for o in outs]
            fouts = [stack.enter_context(open_text(t, "w")) for t in tmps]
            for corpus in self.corpora():
                info = self.stamps.get(f"extract.{corpus}")
                files = [self.dest / o for o in info["outputs"]]
                n = check_parallel(files, CORPORA[corpus].title)
                for f, fout in zip(files, fouts):
                    with open_text(f) as fin:
                        for line in fin:
                            fout.write(sanitize(line) + "\n")
                counts[corpus] = n
                log(f"gather: {corpus}: {n} pairs")
            if czeng:
                n = 0
                blocks = czeng17_bad_blocks(czeng_filter[0]) if czeng_filter else set()
                for cs, en in iter_czeng(czeng, blocks):
                    fouts[0].write(sanitize(en) + "\n")
                    fouts[1].write(sanitize(cs) + "\n")
                    n += 1
                counts[f"czeng_{release}"] = n
                log(f"gather: CzEng {release} ({czeng}): {n} pairs")
            for f in fouts:
                f.close()
            total = check_parallel(tmps, "gathered training data")
        return self.stamps.mark("gather", key, outs, {"pairs": counts, "total": total})

    def step_eval_sets(self) -> Dict[str, dict]:
        """refs/{testset}.{lang} for the validation and test sets, through sacreBLEU."""
        x = self.spec.other
        fwd, rev = f"en-{x}", f"{x}-en"
        todo, results = [], {}
        for e in self.eval_sets():
            urls = self._sacrebleu_urls(e.sacrebleu)
            # The key holds the md5s, not the mirror's address (a test server's port changes).
            md5s = [m for _, m in urls] if urls else None
            key = key_of({"sacrebleu": e.sacrebleu, "langpairs": [fwd, rev], "md5": md5s})
            stamp = self._skip(f"refs.{e.testset}", key)
            if stamp:
                results[e.testset] = stamp
            else:
                todo.append((e, key, urls))
        if not todo:
            return results
        requests = []
        for e, _key, urls in todo:
            item = {"name": e.sacrebleu, "langpairs": [fwd, rev]}
            if urls:
                item.update(urls=[u for u, _ in urls], md5=[m for _, m in urls])
            requests.append(item)
        cache = self.o.sacrebleu_dir
        log(f"sacreBLEU: {', '.join(r['name'] for r in requests)} (cache {cache})")
        got = sacrebleu_fetch(requests, cache)
        for e, key, _urls in todo:
            files = got[e.sacrebleu]
            src_f, ref_f = Path(files[fwd]["src"]), Path(files[fwd]["refs"][0])
            n = check_parallel([src_f, ref_f], f"sacreBLEU {e.sacrebleu} {fwd}")
            if n == 0:
                raise PrepareError(
                    f"sacreBLEU gave an empty {e.sacrebleu} {fwd} ({src_f}); "
                    f"delete {cache / e.sacrebleu} and rerun"
                )
            rsrc = read_lines(Path(files[rev]["src"]))
            rref = read_lines(Path(files[rev]["refs"][0]))
            same = rsrc == read_lines(ref_f) and rref == read_lines(src_f)
            if not same:
                log(
                    f"WARNING: sacreBLEU's {e.sacrebleu} {rev} is not the reverse of {fwd}; "
                    f"refs/{e.testset}.* hold the {fwd} set"
                )
            outs = []
            for lang, f in ((self.src, src_f), (self.tgt, ref_f)):
                out = self.dest / "refs" / f"{e.testset}.{lang}"
                with atomic_output(out) as tmp:
                    shutil.copyfile(f, tmp)
                outs.append(out)
            results[e.testset] = self.stamps.mark(
                f"refs.{e.testset}",
                key,
                outs,
                {"sacrebleu": e.sacrebleu, "sentences": n, "reverse_identical": same},
            )
            log(f"refs.{e.testset}: {n} sentences (sacreBLEU {e.sacrebleu} {fwd})")
        return results

    def _sacrebleu_urls(self, name: str) -> Optional[List[Tuple[str, Optional[str]]]]:
        """In mirror mode: (mirror URL, md5) per sacreBLEU URL of the test set."""
        if not self.o.mirror:
            return None
        from sacrebleu.dataset import DATASETS as SB

        ds = SB[name]
        md5s = ds.md5 or [None] * len(ds.data)
        return [
            (f"{self.o.mirror}/{mirror_relpath(u)}", self.md5.get(mirror_relpath(u), m))
            for u, m in zip(ds.data, md5s)
        ]

    @property
    def _tokenize(self) -> bool:
        return self.o.bpe == "subword-nmt"

    def _text_settings(self) -> dict:
        return {
            "moses_tokenize": self._tokenize,
            "tokenizer": TOKENIZER if self._tokenize else None,
            "v": 2,
        }

    def step_tokenize_train(self, gather_key: str) -> str:
        key = key_of({"gather": gather_key, **self._text_settings()})
        outs = [self.work / f"train.tok.{lang}" for lang in self.spec.langs]
        if self._skip("tokenize.train", key):
            return key
        for lang, src, out in zip(self.spec.langs, self._raw_train(), outs):
            what = "tokenize" if self._tokenize else "clean up whitespace in"
            log(f"tokenize.train: {what} {src.name} ({self.o.workers} workers)")
            moses_process_file(src, out, lang, self._tokenize, self.o.workers)
        check_parallel(outs, "tokenized training data")
        self.stamps.mark("tokenize.train", key, outs)
        return key

    @property
    def cleaning(self) -> Cleaning:
        """The dataset's cleaning (its paper's), with the values given on the command line."""
        o = self.o
        given = {k: v for k, v in (("min_len", o.min_len), ("max_len", o.max_len),
                                   ("max_ratio", o.max_ratio)) if v is not None}
        return dataclasses.replace(self.spec.cleaning, **given)

    def step_clean(self, tok_key: str, gather: dict) -> dict:
        c = self.cleaning
        key = key_of({"tok": tok_key, "cleaning": dataclasses.asdict(c), "v": 2})
        ins = [self.work / f"train.tok.{lang}" for lang in self.spec.langs]
        outs = [self.work / f"train.clean.{lang}" for lang in self.spec.langs]
        stamp = self._skip("clean", key)
        if stamp:
            return stamp
        read, kept, per_corpus = clean_corpus(tuple(ins), tuple(outs), c,
                                              list(gather["info"]["pairs"].items()))
        paper = f"; the paper: {c.paper_pairs:,}" if c.paper_pairs else ""
        log(f"clean: kept {kept:,} of {read:,} pairs{paper} ({c.rule or 'as given'}; tokens "
            f"{c.min_len}..{c.max_len or 'any'}, ratio <= {c.max_ratio or 'any'})")
        for corpus, counts in per_corpus.items():
            log(f"clean: {corpus}: kept {counts['kept']:,} of {counts['raw']:,}")
        if kept == 0:
            raise PrepareError(
                f"cleaning kept no training pair of {read}: check {ins[0]} and {ins[1]}"
            )
        return self.stamps.mark("clean", key, outs,
                                {"raw": read, "clean": kept, "per_corpus": per_corpus})

    def step_tokenize_eval(self, e: EvalSet, refs_key: str) -> str:
        key = key_of({"refs": refs_key, **self._text_settings()})
        step = f"tokenize.{e.testset}"
        outs = [self.work / f"{e.testset}.tok.{lang}" for lang in self.spec.langs]
        if self._skip(step, key):
            return key
        for lang, out in zip(self.spec.langs, outs):
            src = self.dest / "refs" / f"{e.testset}.{lang}"
            moses_process_file(src, out, lang, self._tokenize, 1)
        self.stamps.mark(step, key, outs)
        return key

    def _bpe_settings(self) -> dict:
        o = self.o
        if o.bpe == "subword-nmt":
            return {"bpe": o.bpe, "merges": o.bpe_size, "vocabulary_threshold": o.vocab_threshold}
        return {
            "bpe": o.bpe,
            "vocab_size": o.bpe_size,
            "model_type": o.spm_model_type,
            "sample": o.spm_sample,
        }

    def step_learn_bpe(self, clean_key: str) -> dict:
        o = self.o
        key = key_of({"clean": clean_key, **self._bpe_settings()})
        stamp = self._skip("bpe.learn", key)
        if stamp:
            return stamp
        bdir = self.dest / "bpe"
        ins = [self.work / f"train.clean.{lang}" for lang in self.spec.langs]
        if o.bpe == "subword-nmt":
            codes = bdir / "codes"
            vocabs = [bdir / f"vocab.{lang}" for lang in self.spec.langs]
            log(f"bpe.learn: subword-nmt, {o.bpe_size} merges")
            learned = learn_subword_nmt(ins, codes, vocabs, o.bpe_size, o.workers)
            outs = [codes, *vocabs]
            info = {"learned_merges": learned}
        else:
            model = bdir / "spm.model"
            log(f"bpe.learn: sentencepiece {o.spm_model_type}, vocabulary {o.bpe_size}")
            train_sentencepiece(ins, model, o.bpe_size, o.spm_model_type, o.spm_sample, o.workers)
            outs = [model, model.with_suffix(".vocab")]
            info = {}
        settings = {
            **self._bpe_settings(),
            "langs": list(self.spec.langs),
            "moses_tokenize": self._tokenize,
            "tokenizer": TOKENIZER if self._tokenize else None,
            "sacremoses": {
                "normalizer": None,
                "tokenizer": (
                    "MosesTokenizer(lang).tokenize(aggressive_dash_splits=True, escape=False), "
                    f"attached tokens marked with {JOINER}"
                    if self._tokenize
                    else None
                ),
            },
        }
        write_text_atomic(bdir / "bpe.json", json.dumps(settings, indent=1) + "\n")
        write_text_atomic(bdir / "README", self._bpe_readme())
        return self.stamps.mark("bpe.learn", key, [*outs, bdir / "bpe.json", bdir / "README"], info)

    def _bpe_readme(self) -> str:
        s, o = self.spec, self.o
        if o.bpe == "subword-nmt":
            how = (
                f"Joint BPE (subword-nmt, {o.bpe_size} merges) over sacremoses tokens "
                f"(tokenize -a -x), each token that was attached to the previous one in the raw "
                f"text marked with a leading {JOINER}, so that the tokens join back to exactly "
                "that text. No punctuation normalization.\n"
                "To encode new text in language L (en or {x}) as the training data was, use\n"
                "prepare.encode (below). Decode fairseq output with --remove-bpe (or\n"
                "--post-process subword_nmt), then\n"
                "  python examples/wmt/prepare.py detokenize --lang L\n"
            ).replace("{x}", s.other)
        else:
            how = (
                f"One SentencePiece model ({o.spm_model_type}, vocabulary {o.bpe_size}) for both "
                "languages, over the raw text (whitespace cleaned up; no Moses step, no\n"
                "Unicode normalization: tensor2tensor's subwords are learned on raw text).\n"
                "To encode new text:\n\n"
                "  spm_encode --model spm.model --output_format piece\n\n"
                "(spm_encode: SentencePiece's command-line tools; or prepare.encode below).\n"
                "Decode fairseq output with --remove-bpe sentencepiece (or --post-process\n"
                "sentencepiece): that is already detokenized text.\n"
            )
        return (
            f"BPE of {s.name} (made by examples/wmt/prepare.py; settings in bpe.json)\n\n{how}\n"
            "In Python: prepare.encode(lines, lang, this_directory) and\n"
            "prepare.detokenize(lines, lang, bpe) (examples/wmt/prepare.py) do the same.\n"
        )

    def step_apply_bpe(
        self, model_key: str, clean_key: str, eval_tok: Dict[str, str]
    ) -> Dict[str, Tuple[List[Path], str]]:
        o = self.o
        bdir = self.dest / "bpe"
        jobs = [("train", self.work / "train.clean", clean_key)]
        jobs += [(t, self.work / f"{t}.tok", k) for t, k in eval_tok.items()]
        result = {}
        for name, prefix, in_key in jobs:
            step = f"bpe.apply.{name}"
            key = key_of({"model": model_key, "input": in_key})
            outs = [self.work / "bpe" / f"{name}.{lang}" for lang in self.spec.langs]
            result[name] = (outs, key)
            if self._skip(step, key):
                continue
            for lang, out in zip(self.spec.langs, outs):
                src = Path(f"{prefix}.{lang}")
                if o.bpe == "subword-nmt":
                    apply_subword_nmt(
                        src,
                        out,
                        bdir / "codes",
                        bdir / f"vocab.{lang}",
                        o.vocab_threshold,
                        o.workers if name == "train" else 1,
                    )
                else:
                    apply_sentencepiece(src, out, bdir / "spm.model", o.workers)
            check_parallel(outs, f"BPE-encoded {name}")
            self.stamps.mark(step, key, outs)
        log(f"bpe.apply: {', '.join(result)} ready")
        return result

    def step_binarize(self, bpe: Dict[str, Tuple[List[Path], str]]) -> dict:
        s = self.spec
        prefix = lambda name: str(self.work / "bpe" / name)  # noqa: E731
        tests = [e.testset for e in s.tests]
        key = key_of(
            {
                "inputs": {n: k for n, (_, k) in bpe.items()},
                "valid": s.valid.testset,
                "tests": tests,
            }
        )
        stamp = self._skip("binarize", key)
        if stamp:
            return stamp
        bin_dir = self.dest / "bin"
        cmd = [
            sys.executable, "-m", "fairseq_cli.preprocess",
            "--source-lang", self.src, "--target-lang", self.tgt,
            "--trainpref", prefix("train"),
            "--validpref", prefix(s.valid.testset),
            "--testpref", ",".join(prefix(t) for t in tests),
            "--joined-dictionary", "--workers", str(self.o.workers),
        ]  # fmt: skip
        logfile = self.work / "preprocess.log"
        log(f"binarize: fairseq-preprocess -> {bin_dir} (log {logfile})")
        with atomic_output(bin_dir) as tmp:
            with open(logfile, "w") as lf:
                proc = subprocess.run(
                    [*cmd, "--destdir", str(tmp)], stdout=lf, stderr=subprocess.STDOUT
                )
            if proc.returncode != 0:
                tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-20:])
                raise PrepareError(
                    f"fairseq-preprocess failed (exit {proc.returncode}); "
                    f"{logfile} ends with:\n{tail}"
                )
        splits = {"train": "train", "valid": s.valid.testset}
        splits.update({("test" if i == 0 else f"test{i}"): t for i, t in enumerate(tests)})
        sizes = {}
        for split, name in splits.items():
            n = count_lines(bpe[name][0][0])
            sizes[split] = n
        outs = [
            bin_dir / f"{sp}.{self.src}-{self.tgt}.{lang}.{ext}"
            for sp in splits
            for lang in s.langs
            for ext in ("bin", "idx")
        ]
        outs += [bin_dir / f"dict.{lang}.txt" for lang in s.langs]
        return self.stamps.mark("binarize", key, outs, {"splits": splits, "sizes": sizes})

    def write_manifest(self, gather, clean, refs, model, binarized) -> dict:
        s, o = self.spec, self.o
        import sacrebleu

        sizes = binarized["info"]["sizes"]

        def entry(split: str, e: EvalSet) -> dict:
            info = refs[e.testset]["info"]
            return {
                "split": split,
                "testset": e.testset,
                "sacrebleu": e.sacrebleu,
                "sentences": sizes[split],
                "reverse_identical": info.get("reverse_identical"),
            }

        manifest = {
            "dataset": s.name,
            "langs": list(s.langs),
            "directions": [f"en-{s.other}", f"{s.other}-en"],
            "bpe": o.bpe,
            "bpe_size": o.bpe_size,
            "remove_bpe": "subword_nmt" if o.bpe == "subword-nmt" else "sentencepiece",
            "detokenize": "joiners" if o.bpe == "subword-nmt" else "none",
            "tokenizer": TOKENIZER if o.bpe == "subword-nmt" else None,
            "valid": entry("valid", s.valid),
            "tests": [entry("test" if i == 0 else f"test{i}", e) for i, e in enumerate(s.tests)],
            "train_corpora": list(gather["info"]["pairs"]),
            "train_pairs": {
                "raw": clean["info"]["raw"],
                "clean": clean["info"]["clean"],
                "binarized": sizes["train"],
            },
            "train_pairs_per_corpus": gather["info"]["pairs"],
            "train_pairs_kept_per_corpus": clean["info"].get("per_corpus"),
            "cleaning": {
                **dataclasses.asdict(self.cleaning),
                "as_the_paper": self.cleaning == s.cleaning,
                "applied_to": (
                    "Moses tokens" if self._tokenize else "whitespace words of the raw text"
                ),
            },
            "bpe_settings": json.loads((self.dest / "bpe" / "bpe.json").read_text()),
            "paper": s.paper,
            "sacrebleu_version": sacrebleu.__version__,
            "mirror": o.mirror,
            "paths": {"bin": "bin", "refs": "refs", "bpe": "bpe"},
        }
        write_text_atomic(self.dest / "manifest.json", json.dumps(manifest, indent=1) + "\n")
        tests = ", ".join(e.testset for e in s.tests)
        log(
            f"done: {self.dest / 'manifest.json'} (train {sizes['train']} pairs; "
            f"valid {s.valid.testset}; tests {tests})"
        )
        return manifest


# --------------------------------------------------------------------------------------
# Helpers for the recipes
# --------------------------------------------------------------------------------------

_DETOK: dict = {}


def detokenize(lines: Iterable[str], lang: str, bpe: str = "subword-nmt",
               tokenizer: Optional[str] = TOKENIZER) -> List[str]:
    """Detokenize fairseq-generate hypotheses (after ``--remove-bpe``/``--post-process``).

    ``bpe`` is the manifest's ``bpe`` ("subword-nmt": the tokens are joined as their
    joiners say, the exact inverse of the preparation's tokenizer; "sentencepiece": the
    text is already detokenized by fairseq's sentencepiece post-processing and only
    stripped). ``tokenizer``: the manifest's; None for datasets prepared before joiners,
    which sacremoses detokenizes (lossy: „ “ and times do not come back)."""
    if bpe in ("sentencepiece", "spm"):
        return [line.strip() for line in lines]
    if bpe not in ("subword-nmt", "subword_nmt"):
        raise ValueError(f"unknown bpe {bpe!r}: expected 'subword-nmt' or 'sentencepiece'")
    if tokenizer == TOKENIZER:
        return [join_marked(line.split()) for line in lines]
    if lang not in _DETOK:
        from sacremoses import MosesDetokenizer

        _DETOK[lang] = MosesDetokenizer(lang=lang)
    detok = _DETOK[lang]
    return [detok.detokenize(line.split(), unescape=False) for line in lines]


def encode(lines: Iterable[str], lang: str, bpe_dir: str | os.PathLike) -> List[str]:
    """Encode raw text as the preparation encoded the data in ``bpe_dir``'s dataset."""
    bpe_dir = Path(bpe_dir)
    settings = json.loads((bpe_dir / "bpe.json").read_text())
    text = moses_process_lines([sanitize(x) for x in lines], lang, settings["moses_tokenize"])
    if settings["bpe"] == "subword-nmt":
        from subword_nmt.apply_bpe import BPE, read_vocabulary

        with open(bpe_dir / "codes", encoding="utf-8") as c, open(
            bpe_dir / f"vocab.{lang}", encoding="utf-8"
        ) as v:
            bpe = BPE(c, vocab=read_vocabulary(v, settings["vocabulary_threshold"]))
        return [bpe.process_line(t) for t in text]
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(bpe_dir / "spm.model"))
    return [" ".join(p) for p in sp.encode(text, out_type=str)]


def load_manifest(dest: str | os.PathLike) -> dict:
    path = Path(dest) / "manifest.json"
    if not path.exists():
        raise PrepareError(f"{path} does not exist: run examples/wmt/prepare.py first")
    return json.loads(path.read_text())


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="prepare.py",
        description="Download and prepare a WMT dataset for fairseq (see the module docstring "
        "and examples/wmt/README.md). Also: 'prepare.py detokenize --lang L [--bpe B]' "
        "detokenizes stdin.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("dataset", nargs="?", choices=sorted(DATASETS), help="dataset to prepare")
    p.add_argument("--list", action="store_true", help="list the datasets and exit")
    p.add_argument("--dest", type=Path, help="output directory (required)")
    p.add_argument("--download-dir", type=Path, help="where archives go (default DEST/downloads; "
                   "share one between datasets to download each corpus once)")
    p.add_argument("--mirror", help="fetch every URL from BASE/<host>/<path> (URL or directory; "
                   "SHA256SUMS / MD5SUMS there are used), e.g. fake_archives.py's output")
    p.add_argument("--ignore-published-checksums", action="store_true",
                   help="accept a downloaded archive whose size or hash is not the published "
                        "one (then the data may not be the papers')")
    p.add_argument("--sacrebleu-dir", type=Path, help="sacreBLEU's cache ($SACREBLEU); default "
                   "sacreBLEU's own ($SACREBLEU or ~/.sacrebleu), or DEST/sacrebleu with --mirror")
    p.add_argument("--bpe", choices=("subword-nmt", "sentencepiece"), default="subword-nmt")
    p.add_argument("--bpe-size", type=int, default=32000,
                   help="subword-nmt merge operations, or sentencepiece vocabulary size")
    p.add_argument("--vocab-threshold", type=int, default=50,
                   help="subword-nmt apply-bpe --vocabulary-threshold")
    p.add_argument("--spm-model-type", choices=("unigram", "bpe"), default="unigram")
    p.add_argument("--spm-sample", type=int, default=10_000_000,
                   help="sentences sampled to train sentencepiece (0 = all)")
    p.add_argument("--min-len", type=int, help="cleaning: minimum tokens per side (default: "
                   "the dataset's paper's, 1)")
    p.add_argument("--max-len", type=int, help="cleaning: maximum tokens per side (default: "
                   "the paper's: none for tensor2tensor's papers, 120 for AT5)")
    p.add_argument("--max-ratio", type=float, help="cleaning: maximum length ratio (default: "
                   "none, as in every paper; fairseq's recipe uses 1.5)")
    p.add_argument("--paracrawl", action="store_true", help="add ParaCrawl v1 (wmt18_* only)")
    p.add_argument("--czeng", type=Path, help="local CzEng 1.6 plain-text export, the directory "
                   "that holds data.plaintext-format/ (wmt18_en_cs)")
    p.add_argument("--czeng-release", choices=("1.7", "1.6"), default="1.7",
                   help="1.7 (default): WMT18's corpus, CzEng 1.6 less the blocks of UFAL's "
                        "converter; 1.6: all of it, as tensor2tensor's translate_encs_wmt32k "
                        "(Chen 2021a) reads it")
    p.add_argument("--workers", type=int, default=default_workers(),
                   help="processes for sacremoses, subword-nmt, sentencepiece, fairseq-preprocess")
    p.add_argument("--retries", type=int, default=3, help="download retries (each resumes)")
    p.add_argument("--retry-wait", type=float, default=5.0,
                   help="seconds before the first retry (doubles each time)")
    p.add_argument("--timeout", type=float, default=60.0, help="network timeout in seconds")
    p.add_argument("--download-only", action="store_true",
                   help="only download (and verify) the archives and the sacreBLEU test sets")
    return p


def options_from_args(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> Tuple[DatasetSpec, Options]:
    if not args.dataset:
        parser.error("give a dataset (one of: " + ", ".join(sorted(DATASETS)) + ") or --list")
    if args.dest is None:
        parser.error("--dest DIR is required")
    spec = DATASETS[args.dataset]
    if args.paracrawl and not spec.paracrawl:
        parser.error(f"--paracrawl is for wmt18_en_de and wmt18_en_cs, not {spec.name}")
    if args.czeng is not None:
        if not spec.czeng:
            parser.error(f"--czeng is for wmt18_en_cs, not {spec.name}")
        if not args.czeng.exists():
            parser.error(f"--czeng {args.czeng}: no such file or directory")
    min_len = args.min_len if args.min_len is not None else spec.cleaning.min_len
    max_len = args.max_len if args.max_len is not None else spec.cleaning.max_len
    if (min_len < 1 or (max_len is not None and max_len < min_len)
            or (args.max_ratio is not None and args.max_ratio < 1)):
        parser.error("need 1 <= --min-len <= --max-len and --max-ratio >= 1")
    if args.bpe_size < 1 or args.workers < 1:
        parser.error("--bpe-size and --workers must be positive")
    dest = args.dest.expanduser().resolve()
    mirror = normalize_mirror(args.mirror) if args.mirror else None
    if args.sacrebleu_dir:
        sb = args.sacrebleu_dir.expanduser().resolve()
    elif mirror:
        sb = dest / "sacrebleu"
    else:
        sb = Path(os.environ.get("SACREBLEU", Path.home() / ".sacrebleu")).expanduser()
    opts = Options(
        dest=dest,
        download_dir=(args.download_dir or dest / "downloads").expanduser().resolve(),
        mirror=mirror,
        sacrebleu_dir=sb,
        bpe=args.bpe,
        bpe_size=args.bpe_size,
        vocab_threshold=args.vocab_threshold,
        spm_model_type=args.spm_model_type,
        spm_sample=args.spm_sample,
        min_len=args.min_len,
        max_len=args.max_len,
        max_ratio=args.max_ratio,
        paracrawl=args.paracrawl,
        czeng=args.czeng.expanduser().resolve() if args.czeng else None,
        czeng_release=args.czeng_release,
        workers=args.workers,
        retries=args.retries,
        retry_wait=args.retry_wait,
        timeout=args.timeout,
        download_only=args.download_only,
        check_published=not args.ignore_published_checksums,
    )
    return spec, opts


def detokenize_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="prepare.py detokenize", description="detokenize stdin to stdout"
    )
    p.add_argument("--lang", required=True)
    p.add_argument("--bpe", default="subword-nmt", choices=("subword-nmt", "sentencepiece"))
    p.add_argument("--sacremoses", action="store_true",
                   help="a dataset prepared before joiners (its manifest has no tokenizer): "
                        "detokenize with sacremoses")
    args = p.parse_args(argv)
    lines = [line.rstrip("\n") for line in sys.stdin]
    for line in detokenize(lines, args.lang, args.bpe, None if args.sacremoses else TOKENIZER):
        print(line)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["detokenize"]:
        return detokenize_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        for name, spec in DATASETS.items():
            extra = " [--paracrawl]" if spec.paracrawl else ""
            extra += " [--czeng PATH]" if spec.czeng else ""
            print(
                f"{name}: {', '.join(spec.corpora)}{extra}; valid {spec.valid.testset}; "
                f"tests {', '.join(e.testset for e in spec.tests)}. {spec.paper}"
            )
        return 0
    spec, opts = options_from_args(args, parser)
    try:
        Preparation(spec, opts).run()
    except PrepareError as e:
        log(f"ERROR: {e}")
        return 1
    except KeyboardInterrupt:
        log(
            "interrupted; rerun the same command to continue "
            "(finished steps and partial downloads are kept)"
        )
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
