"""The corpus build (``scripts/make_gettext_corpus.py``): download and verify the pinned
packages, read their catalogs, clean the messages into pairs, remove duplicate pairs, split.

    python scripts/make_gettext_corpus.py --out data/gettext
    python scripts/make_gettext_corpus.py --out data/gettext --cache ~/debs --valid 500

``OUT`` gets ``train``, ``valid`` and ``test`` as ``SPLIT.en`` / ``SPLIT.de`` (a sentence
per line, the raw text ``posenc-compare --data`` and ``posenc-prepare-corpus`` read) and
``corpus.json``: the packages, their catalogs, the messages and pairs of each, what each
cleaning rule did (joined, paired or dropped, by rule), and the pairs per split. The packages' files are kept in
``--cache`` (default ``OUT/downloads``); a rerun reads them from there.

The split: valid and test take English sentences that have one translation in the corpus,
in the order of their SHA-256 (a fixed draw that does not depend on the packages' order);
an English sentence translated in several ways (``Open``: "Öffnen", "Offen") stays in train
with all of them. So no English sentence is in two splits, and every reference of valid and
test is the corpus's only translation of its source.

The packages come from ``--mirror`` (repeated: tried in order), else from the Debian mirror of
this machine's apt sources (:mod:`.mirrors`); a build whose files are all in ``--cache``
needs neither, nor the network.

Everything that can be wrong with the command (the destination, the list, the mirrors) is
refused before the first download, and every package is downloaded and verified before any
is read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import re
import sys
import tarfile
import zlib
from collections import Counter, defaultdict
from pathlib import Path
from typing import Optional, Sequence

from ..textprep.files import PrepareError, write_text_atomic
from .catalogs import deb_catalogs
from .cleaning import catalog_pairs
from ..wmt.download import normalize_mirror
from .mirrors import from_apt
from .packages import PINNED, Package, cached, download, read_packages

PROG = "make_gettext_corpus"
Pair = tuple[str, str]


def log(message: str) -> None:
    print(f"[gettext-corpus] {message}", file=sys.stderr, flush=True)


def writable_dir(path: Path, what: str) -> None:
    """Create ``path`` if needed and check that files can be written there."""
    if path.exists() and not path.is_dir():
        raise PrepareError(f"{what} {path} is a file, not a directory: give a directory")
    probe = path / f".write-test.{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise PrepareError(f"{what} {path}: cannot write there ({error.strerror or error}); "
                           "give a directory you can write to") from error


def read_package(package: Package, deb: Path, lang: str, max_words: int,
                 stats: Counter) -> tuple[list[Pair], dict]:
    """The cleaned pairs of one package's catalogs of ``lang``, and what it held."""
    try:
        catalogs = deb_catalogs(deb.read_bytes(), lang)
    except (ValueError, tarfile.TarError, lzma.LZMAError, zlib.error, EOFError) as error:
        raise PrepareError(f"{package.name} {package.version}: {deb} is not a readable .deb "
                           f"({error}); delete it and rerun to download it again") from error
    pairs: list[Pair] = []
    info = {"name": package.name, "version": package.version, "path": package.path,
            "sha256": package.sha256, "catalogs": [], "messages": 0, "pairs": 0}
    for path, data in catalogs:
        own: Counter = Counter()
        try:
            found = catalog_pairs(data, max_words, own)
        except ValueError as error:
            log(f"{package.name}: {path} skipped, it cannot be read: {error}")
            stats["catalogs that cannot be read"] += 1
            continue
        stats.update(own)
        pairs += found
        info["catalogs"].append(path)
        info["messages"] += own["messages"]
        info["pairs"] += len(found)
    if not catalogs:
        log(f"{package.name}: no {lang} catalogs (.../{lang}/LC_MESSAGES/*.mo)")
    return pairs, info


def unique(pairs: list[Pair]) -> list[Pair]:
    """The pairs without repeats, each where it first occurs."""
    return list(dict.fromkeys(pairs))


def split(pairs: list[Pair], n_valid: int, n_test: int) -> dict[str, list[Pair]]:
    """train / valid / test by the module's rule (pairs without repeats in)."""
    translations: dict[str, list[str]] = defaultdict(list)
    for en, de in pairs:
        translations[en].append(de)
    held = sorted((en for en, des in translations.items() if len(des) == 1),
                  key=lambda en: hashlib.sha256(en.encode("utf-8")).hexdigest())
    if len(held) <= n_valid + n_test:
        raise PrepareError(f"only {len(held)} English sentences have one translation, too few "
                           f"for --valid {n_valid} and --test {n_test} with training pairs "
                           "left: lower them or add packages")
    test, valid = held[:n_test], held[n_test:n_test + n_valid]
    out = set(test) | set(valid)
    return {"train": [(en, de) for en, de in pairs if en not in out],
            "valid": [(en, translations[en][0]) for en in valid],
            "test": [(en, translations[en][0]) for en in test]}


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=PROG, description="An English-German parallel corpus (train, valid, test) from the "
        "German gettext catalogs of pinned Debian packages (docs/real-corpus.md).")
    p.add_argument("--out", type=Path, required=True,
                   help="output directory: SPLIT.en, SPLIT.LANG and corpus.json")
    p.add_argument("--cache", type=Path,
                   help="directory of the downloaded packages (default OUT/downloads)")
    p.add_argument("--packages", type=Path, metavar="FILE",
                   help="another list of packages: name, version, pool path, size, SHA-256, "
                        "tab-separated, one package a line (default: the pinned list)")
    p.add_argument("--mirror", action="append", metavar="URL",
                   help="a Debian mirror (its root, above pool/) or a directory laid out like "
                        "one; repeat to try several in order, such as Debian's archive mirror "
                        "after another once the release is archived (default: the Debian "
                        "mirror of this machine's apt sources; none is needed when every "
                        "file is in --cache)")
    p.add_argument("--lang", default="de",
                   help="the translations' language, as in LANG/LC_MESSAGES (default de; the "
                        "pinned list was chosen and measured for de)")
    p.add_argument("--valid", type=int, default=1000, help="validation pairs (default 1000)")
    p.add_argument("--test", type=int, default=1000, help="test pairs (default 1000)")
    p.add_argument("--max-words", type=int, default=100,
                   help="drop lines of more English words (default 100)")
    args = p.parse_args(argv)
    if not re.fullmatch(r"[a-z]{2,3}(_[A-Z]{2})?(@[a-z]+)?", args.lang) or args.lang == "en":
        p.error(f"--lang {args.lang!r}: a gettext language other than en, such as de, fr, "
                "pt_BR or sr@latin")
    for name in ("valid", "test", "max_words"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return args


def main(argv: Optional[Sequence[str]] = None, apt_root: Path = Path("/")) -> int:
    """The command; ``apt_root``: where apt's ``etc/apt`` lies, whose sources give the mirror
    without ``--mirror``."""
    args = parse_args(argv)
    try:
        build(args, apt_root)
    except PrepareError as error:
        raise SystemExit(f"{PROG}: {error}") from None
    return 0


def build(args: argparse.Namespace, apt_root: Path = Path("/")) -> None:
    """Check the destination, the list and the mirrors; download and verify every package
    not in the cache; then read, clean, remove repeats, split and write."""
    cache = args.cache or args.out / "downloads"
    writable_dir(args.out, "--out")
    writable_dir(cache, "--cache")
    packages = read_packages(args.packages) if args.packages else list(PINNED)
    mirrors = tuple(normalize_mirror(m) for m in args.mirror or ())  # checked before any read
    total = sum(p.size for p in packages)
    log(f"{len(packages)} packages, {total / 1e6:.0f} MB; cache {cache}")

    def say(number: int):
        return lambda m: log(f"[{number}/{len(packages)}] {m}")

    files = [cached(package, cache, say(n)) for n, package in enumerate(packages, 1)]
    missing = [n for n, found in enumerate(files) if found is None]
    if missing and not mirrors:
        mirrors = from_apt(apt_root, [packages[n].filename for n in missing], log)
    for n in missing:
        files[n] = download(packages[n], cache, mirrors, say(n + 1))

    stats: Counter = Counter()
    pairs: list[Pair] = []
    infos = []
    for package, deb in zip(packages, files):
        found, info = read_package(package, deb, args.lang, args.max_words, stats)
        log(f"{package.name}: {len(info['catalogs'])} catalogs, {info['messages']} messages, "
            f"{len(found)} pairs")
        pairs += found
        infos.append(info)
    kept = unique(pairs)
    stats["repeated pairs"] = len(pairs) - len(kept)
    splits = split(kept, args.valid, args.test)
    for name, split_pairs in splits.items():
        for side, lang in ((0, "en"), (1, args.lang)):
            write_text_atomic(args.out / f"{name}.{lang}",
                              "".join(pair[side] + "\n" for pair in split_pairs))
        log(f"{name}: {len(split_pairs)} pairs -> {args.out}/{name}.{{en,{args.lang}}}")
    summary = {"lang": args.lang, "max_words": args.max_words, "packages": infos,
               "messages": stats.pop("messages", 0), "cleaning": dict(sorted(stats.items())),
               "pairs": {name: len(split_pairs) for name, split_pairs in splits.items()}}
    write_text_atomic(args.out / "corpus.json", json.dumps(summary, indent=1,
                                                           ensure_ascii=False) + "\n")
