"""The pinned Debian packages of the gettext corpus and their verified download.

A package is pinned by name, version, its file's path in the archive's pool, size and
SHA-256, so that the corpus is rebuilt from the same bytes: a file whose size or SHA-256
differs is refused, whichever mirror served it. :data:`PINNED` is the corpus of
docs/real-corpus.md: Debian 12 ("bookworm") packages from the main archive, chosen for the
number of German messages in their catalogs (the page has the measurements). ``--packages
FILE`` reads another list, in the format of :func:`read_packages`.

Any Debian mirror serves the files, and the repository names none: the mirrors are
``--mirror``'s or the one of the machine's apt sources (:mod:`.mirrors`), tried in order for
each file. Once Debian 12 is archived, its pool moves, with the same paths, to Debian's
archive mirror: name it with ``--mirror`` after the usual one, the same way.
"""

from __future__ import annotations

import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..textprep.files import PrepareError, progress, sha256_file

USER_AGENT = "fairseq_posenc-gettext-corpus/1.0"


@dataclass(frozen=True)
class Package:
    """One pinned package file; ``path`` is relative to a mirror's root (``pool/...``)."""

    name: str
    version: str
    path: str
    size: int
    sha256: str

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]


PINNED = (
    Package("coreutils", "9.1-1",
            "pool/main/c/coreutils/coreutils_9.1-1_amd64.deb",
            2896560, "61038f857e346e8500adf53a2a0a20859f4d3a3b51570cc876b153a2d51a3091"),
    Package("digikam-data", "4:7.9.0-1",
            "pool/main/d/digikam/digikam-data_7.9.0-1_all.deb",
            11000040, "a941a504ba7bdf9d276a43ca3c2a0b2b5b74a55420d8c4b4f29d681e96cbf450"),
    Package("e2fsprogs-l10n", "1.47.0-2",
            "pool/main/e/e2fsprogs/e2fsprogs-l10n_1.47.0-2_all.deb",
            505396, "30830c185a0d02d444ad7b900ee5353d13f442dc5479847ce700ba34136a2df8"),
    Package("evolution-common", "3.46.4-2+deb12u1",
            "pool/main/e/evolution/evolution-common_3.46.4-2+deb12u1_all.deb",
            8545480, "52e3a67ba3f2815fa864f600f5e3c2afd6ebc0b3487b50525df75006d4172b46"),
    Package("freeciv-data", "3.0.6-1+deb12u1",
            "pool/main/f/freeciv/freeciv-data_3.0.6-1+deb12u1_all.deb",
            20085120, "278bed022b87408ca9923aa727bef3d6c97875c811723e93ff95dded1b9b76b2"),
    Package("gimp-data", "2.10.34-1+deb12u10",
            "pool/main/g/gimp/gimp-data_2.10.34-1+deb12u10_all.deb",
            14214540, "89007a69d4ef2b0440e5419e75d4112cfd1c49e97db38220d210b9f86322be7c"),
    Package("git", "1:2.39.5-0+deb12u3",
            "pool/main/g/git/git_2.39.5-0+deb12u3_amd64.deb",
            7264380, "637a85ddd6247fab13bdd0592f2f39aff04ce4dbf0655d3ab553ac359a38ce6f"),
    Package("gnucash-common", "1:4.13-1",
            "pool/main/g/gnucash/gnucash-common_4.13-1_all.deb",
            5194912, "8477b415856eb671125ee63ac6a4ee1d23efeca3de6e55e5a14c6ebb32642b31"),
    Package("gnupg-l10n", "2.2.40-1.1+deb12u2",
            "pool/main/g/gnupg2/gnupg-l10n_2.2.40-1.1+deb12u2_all.deb",
            1092644, "c985452d06cc7b3b1044cd1eb3f2acac773836d34cafb35b5a4bebae02c1caa0"),
    Package("gramps", "5.1.5-1",
            "pool/main/g/gramps/gramps_5.1.5-1_all.deb",
            6748788, "77875e0983e97498e91a14b4fd4033998146a582c7932a993cf268929a9fda6b"),
    Package("libc-l10n", "2.36-9+deb12u14",
            "pool/main/g/glibc/libc-l10n_2.36-9+deb12u14_all.deb",
            676384, "95285badd0b02ca7e90e8f20d17c912170ffaeb48db10f113d1ece042b59248d"),
    Package("util-linux-locales", "2.38.1-5+deb12u3",
            "pool/main/u/util-linux/util-linux-locales_2.38.1-5+deb12u3_all.deb",
            1211952, "2cb091d6fdc2f38d3ce414102877dcc7434e4d42f18b58e73708219c2b9ec18e"),
    Package("vim-runtime", "2:9.0.1378-2+deb12u2",
            "pool/main/v/vim/vim-runtime_9.0.1378-2+deb12u2_all.deb",
            7026844, "6a3dd2317a593742cb247f3494d986b3127887dbe1449253b8efa6112289854e"),
)


def read_packages(path: Path) -> list[Package]:
    """A list of packages: one line each, five tab-separated fields (name, version, path in
    the pool, size in bytes, SHA-256); blank lines and lines starting with ``#`` are
    skipped."""
    if not path.is_file():
        raise PrepareError(f"--packages {path}: no such file (a list of packages: name, version, "
                              "pool path, size, SHA-256, tab-separated, one package a line)")
    packages, seen = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
               continue
        fields = line.split("\t")
        where = f"{path}, line {number}"
        if len(fields) != 5:
               raise PrepareError(f"{where}: expected 5 tab-separated fields (name, version, pool "
                                  f"path, size, SHA-256), got {len(fields)}: {line!r}")
        name, version, pool, size, sha = (field.strip() for field in fields)
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
               raise PrepareError(f"{where}: the SHA-256 of {name} must be 64 lowercase hex "
                                  f"digits, got {sha!r}")
        if not size.isdigit():
               raise PrepareError(f"{where}: the size of {name} must be a number of bytes, "
                                  f"got {size!r}")
        if not re.fullmatch(r"pool/[^\s]+\.deb", pool) or "/../" in pool:
               raise PrepareError(f"{where}: the path of {name} must be a .deb under pool/, "
                                  f"got {pool!r}")
        if pool in seen:
               raise PrepareError(f"{where}: {pool} is listed twice")
        seen.add(pool)
        packages.append(Package(name, version, pool, int(size), sha))
    if not packages:
        raise PrepareError(f"--packages {path} lists no package")
    return packages


def _download(url: str, part: Path, name: str, size: int) -> None:
    """``url`` into ``part``, with a progress bar on a terminal."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    with urllib.request.urlopen(request, timeout=60) as response, open(part, "wb") as out, \
               progress(size, f"download {name}", unit="B", unit_scale=True,
                        unit_divisor=1024) as bar:
        while block := response.read(1 << 20):
               out.write(block)
               bar.update(len(block))


def cached(package: Package, cache: Path, log: Callable[[str], None]) -> Optional[Path]:
    """``package``'s file in ``cache`` when its SHA-256 is the pinned one, else None (a
    cached file that is not the pinned one is said, and downloaded again)."""
    target = cache / package.filename
    if not target.is_file():
        return None
    label = f"{package.name} {package.version}"
    if sha256_file(target) == package.sha256:
        log(f"{label}: cached ({target.stat().st_size / 1e6:.1f} MB)")
        return target
    log(f"{label}: the cached {target} is not the pinned file; downloading it again")
    return None


def download(package: Package, cache: Path, mirrors: tuple[str, ...],
             log: Callable[[str], None]) -> Path:
    """``package``'s file into ``cache`` from the first mirror that serves it. A download
    whose size or SHA-256 is not the pinned one is deleted and refused."""
    target = cache / package.filename
    label = f"{package.name} {package.version}"
    part = target.with_name(f".{target.name}.part{os.getpid()}")
    errors: list[str] = []
    for mirror in mirrors:
        url = f"{mirror.rstrip('/')}/{urllib.parse.quote(package.path)}"
        start = time.monotonic()
        try:
            _download(url, part, package.filename, package.size)
        except (urllib.error.URLError, OSError, ValueError) as error:
            part.unlink(missing_ok=True)
            errors.append(f"{url}: {getattr(error, 'reason', None) or error}")
            continue
        size, sha = part.stat().st_size, sha256_file(part)
        if (size, sha) != (package.size, package.sha256):
            part.unlink()
            raise PrepareError(
                f"{label} from {url} is not the pinned file: {size} bytes, SHA-256 {sha}; the "
                f"list pins {package.size} bytes, SHA-256 {package.sha256}. Nothing was kept. "
                "The mirror serves another file under this name: pass another --mirror, or "
                "correct the list's entry if it is the package that changed")
        os.replace(part, target)
        seconds = time.monotonic() - start
        log(f"{label}: downloaded {size / 1e6:.1f} MB in {seconds:.1f} s from {mirror}")
        return target
    raise PrepareError(
        f"could not download {label} ({package.path}):\n  " + "\n  ".join(errors) +
        f"\nCheck the network; or pass --mirror with a Debian mirror that has this version "
        "(once the release is archived: Debian's archive mirror, as a further --mirror); or "
        f"put its file {package.filename} (SHA-256 {package.sha256}) into {cache}. The "
        "packages downloaded before it stay in the cache and are not fetched again")
