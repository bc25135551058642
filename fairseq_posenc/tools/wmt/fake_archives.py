"""Small fake copies of the WMT archives, for offline tests and CI smoke runs.

``build_fake_mirror(root)`` writes, under ``root/<host>/<path>`` (the layout ``prepare.py
--mirror`` reads, the one ``wget -x`` makes), one small archive for every URL that
the preparation (:mod:`fairseq_posenc.tools.wmt`) downloads -- the training corpora of
:mod:`fairseq_posenc.tools.wmt.catalog` (examples/wmt/README.md, "Training corpora") and the
sacreBLEU test-set tarballs of wmt13, wmt14/full, wmt15, wmt16, wmt17, wmt18 -- with the real
member names inside (``training/europarl-v7.de-en.de``, ``test/newstest2015-ende-src.en.sgm``
in WMT's SGML, ...; the test-set member names are taken from sacreBLEU's own table, so they
are what sacreBLEU's FakeSGMLDataset processing opens). Each corpus holds a handful of
English/German/Czech sentence pairs, plus the kind of lines the cleaning must drop (an empty
pair, a pair with a bad length ratio, a too-long pair) and a ``\\r`` inside a line (Common
Crawl has such lines). ``root/SHA256SUMS`` and ``root/MD5SUMS`` list every archive: prepare.py
checks the training archives against the first, and hands the md5s of the fake test-set
tarballs to sacreBLEU in place of the real ones.

Use::

    python -m fairseq_posenc.tools.wmt.fake_archives DIR          # build the mirror, say where
    python -m fairseq_posenc.tools.wmt.fake_archives DIR --serve  # ... and serve it on 127.0.0.1
    python examples/wmt/prepare.py wmt18_en_de --dest OUT --mirror DIR --bpe-size 50 \\
        --vocab-threshold 1

(``--mirror`` takes the directory itself or the served URL.) ``build_fake_czeng(root)``
writes a small CzEng 1.6 export for ``--czeng`` (the mirror has a converter);
``prepare_flags(mirror)`` gives
the prepare.py flags that suit the fakes (``--mirror ... --vocab-threshold 1``).
:class:`MirrorServer` serves a mirror
over HTTP on the loopback interface with Range support, and can inject faults for tests
(cut a transfer half-way, send corrupt or truncated bytes, ignore Range).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import http.server
import io
import random
import sys
import tarfile
import threading
import urllib.parse
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .catalog import CORPORA, CZENG17_FILTER, DATASETS
from .download import mirror_relpath

# --------------------------------------------------------------------------------------
# Sentences
# --------------------------------------------------------------------------------------

# (en, de, cs) phrase tables; a sentence is subject + verb + object + adverbial.
SUBJECTS = [
    ("the committee", "der Ausschuss", "výbor"),
    ("the president", "der Präsident", "předseda"),
    ("the government", "die Regierung", "vláda"),
    ("the parliament", "das Parlament", "parlament"),
    ("our well-known colleague", "unser bekannter Kollege", "náš známý kolega"),
    ("the commission", "die Kommission", "komise"),
]
VERBS = [
    ("supports", "unterstützt", "podporuje"),
    ("discusses", "diskutiert", "projednává"),
    ("needs", "braucht", "potřebuje"),
    ("welcomes", "begrüßt", "vítá"),
    ("criticises", "kritisiert", "kritizuje"),
]
OBJECTS = [
    ("the new proposal", "den neuen Vorschlag", "nový návrh"),
    ("this report", "diesen Bericht", "tuto zprávu"),
    ("the budget", "den Haushalt", "rozpočet"),
    ('a "clear" answer', 'eine „klare“ Antwort', "jasnou odpověď"),
    ("the e-mail", "die E-Mail", "e-mail"),
]
ADVERBIALS = [
    ("today", "heute", "dnes"),
    ("in Brussels", "in Brüssel", "v Bruselu"),
    ("once again", "erneut", "opět"),
    ("at 3.5 percent", "bei 3,5 Prozent", "při 3,5 procenta"),
    ("", "", ""),
]
LANGS = ("en", "de", "cs")


def sentences(rng: random.Random, n: int) -> List[Dict[str, str]]:
    """``n`` parallel sentences as {lang: text}."""
    out = []
    for _ in range(n):
        parts = [rng.choice(t) for t in (SUBJECTS, VERBS, OBJECTS, ADVERBIALS)]
        sent = {}
        for i, lang in enumerate(LANGS):
            text = " ".join(p[i] for p in parts if p[i])
            sent[lang] = text[0].upper() + text[1:] + rng.choice([".", ".", "!", "?"])
        out.append(sent)
    return out


def quirky_pairs(kind: str) -> List[Dict[str, str]]:
    """Lines the cleaning must drop (or survive), by corpus."""
    if kind == "europarl":
        return [{lang: "" for lang in LANGS}]  # Europarl has empty lines
    if kind == "commoncrawl":
        return [
            {  # bad length ratio
                "en": "Click here .",
                "de": "Klicken Sie hier , um die vollständige Liste aller Produkte zu sehen .",
                "cs": "Klikněte sem a uvidíte úplný seznam všech výrobků v našem obchodě .",
            },
            {  # a carriage return inside a line (kept as one line, \r becomes a space)
                "en": "The price\ris low.",
                "de": "Der Preis\rist niedrig.",
                "cs": "Cena\rje nízká.",
            },
        ]
    if kind == "news":
        return [{lang: " ".join(["word"] * 260) for lang in LANGS}]  # longer than 250 tokens
    return []


# --------------------------------------------------------------------------------------
# Archives
# --------------------------------------------------------------------------------------


def write_tgz(path: Path, members: Dict[str, bytes]) -> None:
    """A reproducible .tgz with the given members (and their directories)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs = sorted({str(Path(m).parent) for m in members if "/" in m})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
        gz.write(buf.getvalue())


def lines_bytes(lines: Sequence[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def training_archives(n_train: int = 16, seed: int = 1) -> Dict[str, Dict[str, bytes]]:
    """mirror relpath -> {member: bytes} for every training-corpus URL of prepare.py."""
    archives: Dict[str, Dict[str, bytes]] = {}
    for i, (name, corpus) in enumerate(sorted(CORPORA.items())):
        kind = {"europarl_v7": "europarl", "commoncrawl": "commoncrawl"}.get(name, "news")
        for pair, (url, prefix) in sorted(corpus.files.items()):
            other = pair.split("-")[0]
            rng = random.Random(f"{seed}-{name}-{pair}")
            pairs = sentences(rng, n_train) + quirky_pairs(kind)
            members = archives.setdefault(mirror_relpath(url), {})
            for lang in (other, "en"):
                members[f"{prefix}.{lang}"] = lines_bytes([p[lang] for p in pairs])
            if name == "commoncrawl":
                urls = [f"http://example.com/{k}" for k in range(len(pairs))]
                members[f"{prefix}.annotation"] = lines_bytes(urls)
        # another language pair that the preparation must ignore, as in the real archives
        if name in ("europarl_v7", "commoncrawl"):
            url, prefix = corpus.files["de-en"]
            fr = prefix.replace("de-en", "fr-en")
            members = archives[mirror_relpath(url)]
            members[f"{fr}.fr"] = lines_bytes(["Bonjour ."] * (3 + i))
            members[f"{fr}.en"] = lines_bytes(["Hello ."] * (3 + i))
    return archives


def sgm(kind: str, setid: str, lang: str, texts: Sequence[str], origlang: str) -> bytes:
    """WMT's pseudo-SGML (what sacreBLEU's FakeSGMLDataset parses)."""
    if kind == "src":
        head = f'<srcset setid="{setid}" srclang="any">'
        tail = "</srcset>"
    else:
        head = f'<refset setid="{setid}" srclang="any" trglang="{lang}">'
        tail = "</refset>"
    out = [head]
    half = (len(texts) + 1) // 2
    for d, chunk in enumerate((texts[:half], texts[half:])):
        if not chunk:
            continue
        start = 1 if d == 0 else half + 1
        out.append(
            f'<doc sysid="ref" docid="fake-news.{d + 1}" genre="news" origlang="{origlang}">'
        )
        out.append("<p>")
        for k, text in enumerate(chunk):
            out.append(f'<seg id="{start + k}">{text}</seg>')
        out.append("</p>")
        out.append("</doc>")
    out.append(tail)
    return lines_bytes(out)


def test_archives(seed: int = 1) -> Dict[str, Dict[str, bytes]]:
    """mirror relpath -> {member: bytes} for the sacreBLEU test sets prepare.py uses.

    Member names come from sacreBLEU's table (``DATASETS[name].langpairs``). One set of
    sentences per test set serves all four directions, as in newstest2013-2018."""
    from sacrebleu.dataset import DATASETS as SB

    names = sorted({e.sacrebleu for d in DATASETS.values() for e in (d.valid, *d.tests)})
    archives: Dict[str, Dict[str, bytes]] = {}
    for name in names:
        ds = SB[name]
        year = int("".join(ch for ch in name.split("/")[0] if ch.isdigit()))
        setid = f"newstest20{year}"
        rng = random.Random(f"{seed}-{name}")
        n = 5 + year % 4  # 5-8 sentences, different per year
        sents = sentences(rng, n)
        members: Dict[str, bytes] = {}
        for lp in ("en-de", "de-en", "en-cs", "cs-en"):
            src_lang, tgt_lang = lp.split("-")
            src_path, ref_path = ds.langpairs[lp][:2]
            texts = {lang: [s[lang] for s in sents] for lang in (src_lang, tgt_lang)}
            kind_ref = "src" if "-src." in ref_path else "ref"  # wmt13 ships only -src files
            members[src_path] = sgm("src", setid, src_lang, texts[src_lang], "en")
            members[ref_path] = sgm(kind_ref, setid, tgt_lang, texts[tgt_lang], "en")
        assert len(ds.data) == 1, name
        archives[mirror_relpath(ds.data[0])] = members
    return archives


def write_checksums(root: Path) -> None:
    """``SHA256SUMS`` and ``MD5SUMS`` (sha256sum / md5sum format) of every archive under root."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".tgz", ".zip"))
    for algo, name in (("sha256", "SHA256SUMS"), ("md5", "MD5SUMS")):
        lines = [
            f"{hashlib.new(algo, p.read_bytes()).hexdigest()}  {p.relative_to(root).as_posix()}"
            for p in files
        ]
        (root / name).write_text("".join(line + "\n" for line in lines))


def build_fake_mirror(root: Path, n_train: int = 16, seed: int = 1) -> Path:
    """Write the fake mirror under ``root`` and return ``root``, which ``prepare.py --mirror``
    accepts as it is (or served, see :class:`MirrorServer`)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for relpath, members in {**training_archives(n_train, seed), **test_archives(seed)}.items():
        write_tgz(root / relpath, members)
    write_zip(root / mirror_relpath(CZENG17_FILTER), czeng_filter_archive())
    write_checksums(root)
    return root


def prepare_flags(mirror: Path | str) -> List[str]:
    """The prepare.py flags for a fake mirror (built or served): ``--mirror`` and a
    vocabulary threshold that suits a few dozen sentences. Add ``--bpe-size`` (e.g. 50)."""
    return ["--mirror", str(mirror), "--vocab-threshold", "1"]


#: Blocks that the fake ``convert_czeng16_to_17.pl`` removes (CzEng 1.6 -> 1.7).
FAKE_CZENG_BAD_BLOCKS = (3, 7)


def build_fake_czeng(root: Path, n: int = 12, seed: int = 1) -> Path:
    """A small CzEng 1.6 plain-text export under ``root`` (returned): as the real one,
    ``data.plaintext-format/NNtrain.gz`` and the dev/test files ``98dtest.gz``,
    ``99etest.gz`` (which the preparation must not read), lines
    ``ID<TAB>score<TAB>cs<TAB>en`` whose ID holds the block number (``-b<block>-``). Sentence
    ``k`` is in block ``k``; blocks :data:`FAKE_CZENG_BAD_BLOCKS` are in CzEng 1.6 only."""
    rng = random.Random(f"{seed}-czeng")
    data = Path(root) / "data.plaintext-format"
    data.mkdir(parents=True, exist_ok=True)
    rows = [
        f"subtitlesM-b{k}-00train-f00001-s{k}\t0.9{k}\t{s['cs']}\t{s['en']}"
        for k, s in enumerate(sentences(rng, n))
    ]
    half = len(rows) // 2
    for name, part in (("00train.gz", rows[:half]), ("01train.gz", rows[half:]),
                       ("98dtest.gz", ["news-b999-00dtest-f1-s1\t1\tNe.\tNot this."]),
                       ("99etest.gz", ["news-b998-00etest-f1-s1\t1\tAni.\tNor this."])):
        with gzip.open(data / name, "wt", encoding="utf-8") as f:
            f.write("".join(r + "\n" for r in part))
    return Path(root)


def czeng_filter_archive() -> Dict[str, bytes]:
    """The members of a fake ``convert_czeng16_to_17.pl.zip``: a Perl script whose
    ``qw{...}`` lists the blocks to drop, as the real one does."""
    blocks = " ".join(str(b) for b in FAKE_CZENG_BAD_BLOCKS)
    script = ("#!/usr/bin/perl\n# fake: the blocks CzEng 1.7 drops from CzEng 1.6\n"
              f"my %bad = map {{ $_ => 1 }} qw{{ {blocks} }};\n")
    return {"convert_czeng16_to_17.pl": script.encode("utf-8")}


def write_zip(path: Path, members: Dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in sorted(members.items()):
            zf.writestr(zipfile.ZipInfo(name, date_time=(2017, 1, 1, 0, 0, 0)), data)


# --------------------------------------------------------------------------------------
# Serving a mirror on the loopback interface
# --------------------------------------------------------------------------------------


class MirrorHandler(http.server.BaseHTTPRequestHandler):
    """GET with single-range ``Range: bytes=N-`` support. ``server.faults[relpath]`` is a
    list of faults applied to successive requests of that file: "cut" (send the headers
    of the whole file, half the body, then close), "corrupt" (flip bytes in the middle),
    "truncate" (a complete response of only the first half), "norange" (ignore Range),
    "404"."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802
        root: Path = self.server.root  # type: ignore[attr-defined]
        rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        rng = self.headers.get("Range")
        self.server.requests.append((rel, rng))  # type: ignore[attr-defined]
        faults = self.server.faults.get(rel) or []  # type: ignore[attr-defined]
        fault = faults.pop(0) if faults else None
        path = (root / rel).resolve()
        if fault == "404" or root.resolve() not in path.parents or not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        if fault == "corrupt":
            mid = len(data) // 2
            data = data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + 64]) + data[mid + 64 :]
        if fault == "truncate":
            data = data[: len(data) // 2]
        start = 0
        if rng and fault != "norange":
            try:
                start = int(rng.split("=", 1)[1].split("-", 1)[0])
            except (IndexError, ValueError):
                start = 0
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if fault == "cut":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


class MirrorServer:
    """``with MirrorServer(root) as srv: srv.url`` -- a threaded HTTP server on 127.0.0.1.

    ``srv.requests``: (relpath, Range header) of every request; ``srv.faults``: see
    :class:`MirrorHandler`."""

    def __init__(self, root: Path, port: int = 0):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), MirrorHandler)
        self.httpd.daemon_threads = True
        self.httpd.root = Path(root)  # type: ignore[attr-defined]
        self.httpd.requests = []  # type: ignore[attr-defined]
        self.httpd.faults = {}  # type: ignore[attr-defined]
        self.thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> List[Tuple[str, Optional[str]]]:
        return self.httpd.requests  # type: ignore[attr-defined]

    @property
    def faults(self) -> Dict[str, List[str]]:
        return self.httpd.faults  # type: ignore[attr-defined]

    def start(self) -> "MirrorServer":
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "MirrorServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path, help="directory to write the fake mirror into")
    p.add_argument("--sentences", type=int, default=16, help="sentence pairs per corpus")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--czeng", type=Path,
                   help="also write a fake CzEng 1.6 export (a directory) here")
    p.add_argument("--serve", action="store_true",
                   help="serve the mirror on 127.0.0.1 until Ctrl-C")
    p.add_argument("--port", type=int, default=0, help="port for --serve (0 = any free port)")
    args = p.parse_args(argv)
    root = build_fake_mirror(args.root, args.sentences, args.seed)
    if args.czeng:
        build_fake_czeng(args.czeng, seed=args.seed)
    print(root.resolve())
    if args.serve:
        with MirrorServer(root, args.port) as srv:
            print(f"serving {root} at {srv.url} (use --mirror {srv.url}); Ctrl-C stops", flush=True)
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
