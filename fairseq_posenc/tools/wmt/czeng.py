"""CzEng for ``wmt18_en_cs --czeng PATH``: reading a local CzEng 1.6 plain-text export,
less the blocks that CzEng 1.7 leaves out.

CzEng needs registration, so the data is never downloaded; only UFAL's public converter
``convert_czeng16_to_17.pl.zip`` is (:data:`~fairseq_posenc.tools.wmt.catalog.CZENG17_FILTER`).
CzEng 1.7, WMT18's corpus, is CzEng 1.6 less the blocks its ``qw{...}`` list names, as TFDS
applies it; ``--czeng-release 1.6`` keeps them all, as tensor2tensor's
translate_encs_wmt32k (Chen 2021a) reads it. Only the training files are read (the
``dtest``/``etest`` files are CzEng's own dev and test sets).
"""

from __future__ import annotations

import gzip
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Iterator, List, Tuple

from .common import log

from ..textprep.files import PrepareError

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
