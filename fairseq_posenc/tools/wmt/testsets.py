"""The validation and test sets, from sacreBLEU: its download (with its md5 check), its
extraction and its SGML processing, as ``sacrebleu -t wmt18 -l en-de --echo src`` would.

Decisions:

* sacreBLEU reads its cache directory (``$SACREBLEU``) once, when it is imported, and the
  preparation may run where sacreBLEU is already imported with another cache (the tests,
  the recipes). So :func:`sacrebleu_fetch` runs :func:`provide` in a fresh interpreter,
  ``python -m fairseq_posenc.tools.wmt.testsets REQUESTS``, with ``$SACREBLEU`` set, and reads
  its answer (JSON) from the last line of its stdout.
* Nothing of sacreBLEU's is reimplemented. Only in mirror mode are a set's URLs (and, where
  the mirror lists them, md5s: :func:`mirror_sources`) replaced before sacreBLEU uses them.
* A set that sacreBLEU cannot prepare (a cut download, a bad extraction) has its cache
  removed and is downloaded once more; a second failure stops the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .common import log

from ..textprep.files import PrepareError
from .download import mirror_relpath

#: Exit status of ``python -m fairseq_posenc.tools.wmt.testsets`` when sacreBLEU fails twice.
FAILED = 3
#: The first words of the lines the helper writes to stderr, which the parent logs.
NOTE = "sacreBLEU could not prepare"


class SacrebleuFailed(Exception):
    pass


def provide(requests: Sequence[dict]) -> Dict[str, Dict[str, dict]]:
    """sacreBLEU's source and reference files of each requested set, in this interpreter
    (whose ``$SACREBLEU`` was set before sacreBLEU was imported).

    ``requests``: ``{"name": sacreBLEU set, "langpairs": [...]}``, with ``"urls"`` and
    ``"md5"`` in mirror mode. Returns ``{name: {langpair: {"src": path, "refs": [paths]}}}``;
    raises :class:`SacrebleuFailed` after a second failure."""
    from sacrebleu.dataset import DATASETS
    from sacrebleu.utils import SACREBLEU_DIR

    out = {}
    for item in requests:
        ds = DATASETS[item["name"]]
        if item.get("urls"):
            ds.data = item["urls"]
            ds.md5 = item["md5"]
        for attempt in (1, 2):
            try:
                files = {lp: {"src": ds.get_source_file(lp), "refs": ds.get_reference_files(lp)}
                         for lp in item["langpairs"]}
                break
            except (Exception, SystemExit) as e:  # sacreBLEU exits on a bad md5
                raw = os.path.join(SACREBLEU_DIR, ds.name, "raw")
                if attempt == 2 or not os.path.isdir(raw):
                    raise SacrebleuFailed(f"{NOTE} {ds.name}: {e!r}") from e
                sys.stderr.write(f"{NOTE} {ds.name} ({e!r}): removing its cache "
                                 f"{os.path.dirname(raw)} and downloading it again\n")
                shutil.rmtree(os.path.dirname(raw))
        out[item["name"]] = files
    return out


def sacrebleu_fetch(
    requests: List[dict], cache: Path, timeout: float = 3600
) -> Dict[str, Dict[str, dict]]:
    """:func:`provide` in a fresh interpreter whose sacreBLEU cache is ``cache``."""
    env = dict(os.environ, SACREBLEU=str(cache))
    proc = subprocess.run(
        [sys.executable, "-m", __name__, json.dumps(requests)],
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
        if line.startswith(NOTE):
            log(line)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mirror_sources(
    name: str, mirror: Optional[str], md5s: Mapping[str, str]
) -> Optional[List[Tuple[str, Optional[str]]]]:
    """In mirror mode, (mirror URL, md5) for each of sacreBLEU's URLs of the set ``name``:
    the md5 the mirror lists (``md5s``: its MD5SUMS) or else sacreBLEU's. None without a
    mirror (sacreBLEU's own URLs)."""
    if not mirror:
        return None
    from sacrebleu.dataset import DATASETS

    ds = DATASETS[name]
    known = ds.md5 or [None] * len(ds.data)
    return [(f"{mirror}/{mirror_relpath(u)}", md5s.get(mirror_relpath(u), m))
            for u, m in zip(ds.data, known)]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The helper's command line: one argument, the JSON list of requests; prints the
    answer as one JSON line."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        answer = provide(json.loads(args[0]))
    except SacrebleuFailed as e:
        sys.stderr.write(f"{e}\n")
        return FAILED
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
