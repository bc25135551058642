"""What every preparation of text shares (``posenc-prepare-wmt``, ``posenc-prepare-corpus``,
``posenc-compare``): the error a user can act on, progress bars, atomic outputs, line
counting and hygiene, checksums, and the step stamps.

Decisions:

* Every output is written under a temporary name and renamed (:func:`atomic_output`), so a
  killed run never leaves a half-written file that a rerun would take as finished.
* Text is read as UTF-8 with ``\\n`` as the only line separator (:func:`open_text`) and
  the characters other readers take as line breaks become spaces (:func:`sanitize`), so
  every tool of the chain counts the same lines. A raw corpus in another encoding is
  refused before anything is prepared from it (:mod:`.encoding`); a UTF-8 byte-order mark
  at the start of a file is dropped.
* A finished step writes ``DEST/.stamps/STEP.json`` with a key of its inputs and settings
  (:class:`Stamps`); a rerun skips it while the key matches and its outputs exist.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

class PrepareError(Exception):
    """An error the user can act on; the message says what to do."""


def progress(total: Optional[int], desc: str, unit: str = "lines", file=None, **kwargs):
    """A tqdm progress bar (size, rate, ETA) on stderr while it is a terminal, silent
    otherwise (tqdm's ``disable=None``): logs and CI output keep the log lines alone."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=None, leave=False,
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
    not split it); when reading, a UTF-8 byte-order mark at the start is dropped and invalid
    bytes are replaced (a raw corpus is checked before: :mod:`.encoding`)."""
    if "r" in mode:
        return open(path, mode, encoding="utf-8-sig", errors="replace", newline="\n")
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


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """The hex digest of a file, read in blocks (archives are gigabytes)."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    return file_digest(path, "sha256")


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


def read_lines(path: Path) -> List[str]:
    with open_text(path) as f:
        return [line.rstrip("\n") for line in f]


def last_lines(path: Path, n: int) -> List[str]:
    """The last ``n`` lines of a log, bytes that are not UTF-8 replaced: what an error
    message quotes of a failed command's output."""
    return path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:]
