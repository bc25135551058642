"""Resumable, verified downloads of the training archives, and extraction of their members.

Decisions:

* A download goes to ``NAME.part`` and resumes with HTTP Range, also after a killed run; its
  size is checked against Content-Length / Content-Range.
* Every archive is read through completely (gzip's CRC, zip's member CRCs) before use; a
  corrupt one is deleted and fetched once more, then the run stops saying what to do.
* ``NAME.sha256`` records the digest of a finished download; a rerun that needs the file
  checks it. A download from an official URL must also have the published size and hash
  (:data:`~fairseq_posenc.tools.wmt.catalog.PUBLISHED_ARCHIVES`).
* ``--mirror BASE`` fetches every URL from ``BASE/<host>/<path>`` (the layout of ``wget
  -x``), which is how the tests run offline (:mod:`fairseq_posenc.tools.wmt.fake_archives`).
* A lock file per archive lets several preparations share one download directory.
"""

from __future__ import annotations

import bz2
import fcntl
import gzip
import http.client
import lzma
import os
import re
import shutil
import socket
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..textprep.files import (PrepareError, atomic_output, file_digest, progress, sha256_file,
                              write_text_atomic)
from .catalog import PublishedArchive
from .common import LOG_PREFIX, log

USER_AGENT = "fairseq_posenc-wmt-prepare/1.0"


class CorruptArchive(Exception):
    pass


class IncompleteDownload(Exception):
    pass


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
            sha1 = file_digest(path, "sha1")
            if sha1 != known.sha1:
                return f"sha1 {sha1}, the published archive has {known.sha1}"
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
        with open(part, mode) as out, progress(total, f"{LOG_PREFIX} download {name}", unit="B",
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
