"""scripts/make_gettext_corpus.py (fairseq_posenc/tools/gettext_corpus): Debian packages to
an English-German corpus, offline.

The catalogs and packages are written in the test from their documented formats
(tests/support/gettext_files.py; ``dpkg-deb --build`` makes one more where it exists), and
Python's own ``gettext.GNUTranslations`` reads the same catalogs as a second reader. The
expected pairs are written out by hand from the rules of docs/real-corpus.md. The downloads
come from a mirror directory laid out like Debian's (``pool/...``), named by ``--mirror`` or
by apt sources written in the test (in both of apt's formats, as sources.list(5) describes
them; never this machine's), whose Debian mirrors are listed by hand.
"""

from __future__ import annotations

import gettext
import hashlib
import io
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fairseq_posenc.tools.gettext_corpus import catalogs, cleaning, corpus_build, mirrors, packages
from tests.support.gettext_files import (dpkg_deb_build, mo_entry, write_ar_deb, write_mo)

ROOT = Path(__file__).resolve().parents[2]
HEADER = ("Project-Id-Version: test 1.0\nLanguage: de\nMIME-Version: 1.0\n"
          "Content-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n"
          "Plural-Forms: nplurals=2; plural=(n != 1);\n")
NBSP = "\u00a0"
# (entry, the pairs the rules make of it)
CASES = [
    (mo_entry("Open", "Öffnen", context="menu"), [("Open", "Öffnen")]),
    (mo_entry("%d file", ["%d Datei", "%d Dateien"], plural="%d files"),
     [("%d file", "%d Datei"), ("%d files", "%d Dateien")]),
    (mo_entry("  -a, --all     show all\n  -q, --quiet   say nothing\n",
              "  -a, --all     alle zeigen\n  -q, --quiet   nichts sagen\n"),
     [("-a, --all show all", "-a, --all alle zeigen"),
      ("-q, --quiet say nothing", "-q, --quiet nichts sagen")]),
    (mo_entry("Generally this means that you gave a pattern\nthat matched nothing.",
              "Im Allgemeinen bedeutet das, dass Sie ein Muster angegeben haben,\nauf das "
              "nichts passte.\n"),
     [("Generally this means that you gave a pattern that matched nothing.",
       "Im Allgemeinen bedeutet das, dass Sie ein Muster angegeben haben, auf das nichts "
       "passte.")]),
    (mo_entry("First paragraph.\n\nSecond one.", "Erster Absatz.\n\nZweiter."),
     [("First paragraph.", "Erster Absatz."), ("Second one.", "Zweiter.")]),
    (mo_entry("Usage: %s FILE\nPrint FILE.", "Aufruf: %s DATEI\nGibt DATEI aus.\nMehr."), []),
    (mo_entry("Save", ""), []),
    (mo_entry("translator-credits", "Erika Mustermann <erika@example.org>"), []),
    (mo_entry("GNU Emacs", "GNU Emacs"), []),
    (mo_entry("%s: %s", "%s: %s"), []),
    (mo_entry("%d%%", "%d %%"), []),
    (mo_entry("_Open File", "Datei _öffnen"), [("Open File", "Datei öffnen")]),
    (mo_entry("Sa&ve As…", "Speichern &unter …"), [("Save As…", "Speichern unter …")]),
    (mo_entry("Set LC_ALL first", "Zuerst LC_ALL setzen"),
     [("Set LC_ALL first", "Zuerst LC_ALL setzen")]),
    (mo_entry("Search &amp; Replace", "Suchen &amp; Ersetzen"),
     [("Search &amp; Replace", "Suchen &amp; Ersetzen")]),
    (mo_entry("Filtering_on|all notes", "alle Notizen"), [("all notes", "alle Notizen")]),
    (mo_entry("?plural:Bavarians", "Bajuwaren"), [("Bavarians", "Bajuwaren")]),
    (mo_entry("?city_state:Disorder", "?city_state:in Aufruhr"), [("Disorder", "in Aufruhr")]),
    (mo_entry("FILE|URI to open", "DATEI|URI zum Öffnen"),
     [("FILE|URI to open", "DATEI|URI zum Öffnen")]),
    (mo_entry("Delete “%s” (10\u00a0MB)?", f"„%s“ löschen (10{NBSP}MB)?"),
     [("Delete “%s” (10\u00a0MB)?", f"„%s“ löschen (10{NBSP}MB)?")]),
    (mo_entry("Copy {0} to\t{1}", "{0} nach\t\t{1} kopieren"),
     [("Copy {0} to {1}", "{0} nach {1} kopieren")]),
]


def catalog(big_endian: bool = False) -> bytes:
    return write_mo([entry for entry, _ in CASES], HEADER, big_endian)


def expected_pairs() -> list[tuple[str, str]]:
    """The pairs in the catalog's order (a .mo file sorts its originals)."""
    return [pair for _, made in sorted(CASES, key=lambda case: case[0]) for pair in made]


@pytest.mark.parametrize("big_endian", [False, True], ids=["little-endian", "big-endian"])
def test_read_mo_against_the_format_and_python_gettext(big_endian):
    data = catalog(big_endian)
    header, messages = catalogs.read_mo(data)
    assert header["plural-forms"] == "nplurals=2; plural=(n != 1);"
    by_id = {m.msgid: m for m in messages}
    assert len(messages) == len(CASES)  # the header entry is not a message
    assert (by_id["Open"].context, by_id["Open"].msgstr) == ("menu", ["Öffnen"])
    plural = by_id["%d file"]
    assert (plural.msgid_plural, plural.msgstr) == ("%d files", ["%d Datei", "%d Dateien"])
    assert by_id["Save"].msgstr == [""] and by_id["Save"].msgid_plural is None
    # Python's reader of the same bytes: every singular translation and both plural forms
    python = gettext.GNUTranslations(io.BytesIO(data))
    for m in messages:
        if m.msgid_plural is None and m.msgstr[0]:
            got = python.pgettext(m.context, m.msgid) if m.context else python.gettext(m.msgid)
            assert got == m.msgstr[0]
    assert [python.ngettext("%d file", "%d files", n) for n in (1, 2)] == plural.msgstr


def test_read_mo_decodes_the_header_charset_and_refuses_other_files():
    latin = write_mo([("Größe".encode("latin-1"), "Größe".encode("latin-1")),
                      (b"Size", "Größe".encode("latin-1"))],
                     HEADER.replace("UTF-8", "ISO-8859-1"), encoding="latin-1")
    _, messages = catalogs.read_mo(latin)
    assert [(m.msgid, m.msgstr) for m in messages] == [("Größe", ["Größe"]), ("Size", ["Größe"])]
    with pytest.raises(ValueError, match="not a .mo file"):
        catalogs.read_mo(b"PK\x03\x04" + bytes(40))


def test_catalog_pairs_follow_the_rules():
    stats = Counter()
    assert cleaning.catalog_pairs(catalog(), 100, stats) == expected_pairs()
    assert stats["messages"] == len(CASES)
    assert stats["untranslated (empty translation)"] == 1
    assert stats["translator credits"] == 1
    assert stats["paragraph, lines not as many on both sides"] == 1
    assert stats["translation equal to the English"] == 2  # GNU Emacs, "%s: %s"
    assert stats["no letter in the English"] == 1  # %d%%
    assert stats["wrapped paragraph, joined into a line"] == 1


def test_plural_forms_of_another_rule_and_the_word_limit():
    czech = HEADER.replace("nplurals=2; plural=(n != 1);", "nplurals=3; plural=(n==1) ? 0 : "
                           "(n>=2 && n<=4) ? 1 : 2;")
    data = write_mo([mo_entry("%d file", ["%d soubor", "%d soubory", "%d souborů"],
                              plural="%d files"),
                     mo_entry("one two three four", "jedna dvě tři čtyři")], czech)
    stats = Counter()
    assert cleaning.catalog_pairs(data, 3, stats) == [("%d file", "%d soubor"),
                                                      ("%d files", "%d soubory")]
    assert stats["over 3 English words"] == 1


DE_MO = "usr/share/locale/de/LC_MESSAGES/test.mo"
PACKAGE_FILES = {DE_MO: b"de catalog",
                 "usr/share/locale/fr/LC_MESSAGES/test.mo": b"fr catalog",
                 "usr/share/locale/de_AT/LC_MESSAGES/test.mo": b"de_AT catalog",
                 "usr/lib/office/resource/de/LC_MESSAGES/office.mo": b"de office catalog",
                 "usr/share/doc/test/copyright": b"GPL"}


def test_deb_catalogs_of_a_hand_made_deb():
    deb = write_ar_deb(PACKAGE_FILES, links={"usr/share/locale/de/LC_MESSAGES/alias.mo":
                                             "test.mo"})
    assert catalogs.deb_catalogs(deb, "de") == [
        ("usr/lib/office/resource/de/LC_MESSAGES/office.mo", b"de office catalog"),
        (DE_MO, b"de catalog")]
    assert catalogs.deb_catalogs(deb, "fr") == [("usr/share/locale/fr/LC_MESSAGES/test.mo",
                                                 b"fr catalog")]
    with pytest.raises(ValueError, match="not an ar archive"):
        catalogs.deb_catalogs(b"\x1f\x8b" + deb, "de")


def test_deb_catalogs_of_dpkg_deb_build(tmp_path):
    deb = dpkg_deb_build(tmp_path / "tree", PACKAGE_FILES, tmp_path / "test.deb")
    if deb is None:
        pytest.skip("dpkg-deb is not installed (the hand-made .deb test covers the format)")
    assert catalogs.deb_catalogs(deb, "de") == [
        ("usr/lib/office/resource/de/LC_MESSAGES/office.mo", b"de office catalog"),
        (DE_MO, b"de catalog")]


# ---------------------------------------------------------------------------- the command

def numbered(n: int, start: int = 0):
    return [mo_entry(f"Message number {i} of the test", f"Meldung Nummer {i} des Tests")
            for i in range(start, start + n)]


def make_mirror(root: Path) -> list[tuple[str, Path]]:
    """Two packages in a Debian-like mirror: (name, file). They share "Message number 5",
    translated alike (a repeated pair), and "Open", translated in two ways."""
    first = write_mo(numbered(20) + [mo_entry("Open", "Öffnen")], HEADER)
    second = write_mo(numbered(10, start=5) + [mo_entry("Open", "Offen")], HEADER)
    made = []
    for name, mo in (("alpha", first), ("beta", second)):
        path = root / "pool" / "main" / name[0] / name / f"{name}_1.0-1_all.deb"
        path.parent.mkdir(parents=True)
        path.write_bytes(write_ar_deb({f"usr/share/locale/de/LC_MESSAGES/{name}.mo": mo}))
        made.append((name, path))
    return made


def package_list(path: Path, mirror: Path, made, sha_of=None) -> Path:
    lines = ["# name\tversion\tpath\tsize\tsha256"]
    for name, deb in made:
        sha = (sha_of or {}).get(name) or hashlib.sha256(deb.read_bytes()).hexdigest()
        lines.append(f"{name}\t1.0-1\t{deb.relative_to(mirror).as_posix()}\t"
                     f"{deb.stat().st_size}\t{sha}")
    path.write_text("\n".join(lines) + "\n")
    return path


def read_split(out: Path, split: str) -> list[tuple[str, str]]:
    en = (out / f"{split}.en").read_text(encoding="utf-8").splitlines()
    de = (out / f"{split}.de").read_text(encoding="utf-8").splitlines()
    assert len(en) == len(de)
    return list(zip(en, de))


def test_builds_splits_without_a_source_in_two(tmp_path):
    mirror = tmp_path / "mirror"
    made = make_mirror(mirror)
    listing = package_list(tmp_path / "packages.tsv", mirror, made)
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = ["--out", str(out), "--cache", str(cache), "--packages", str(listing),
            "--mirror", str(mirror), "--valid", "3", "--test", "4"]
    assert corpus_build.main(args) == 0
    splits = {s: read_split(out, s) for s in ("train", "valid", "test")}
    assert (len(splits["valid"]), len(splits["test"])) == (3, 4)
    sources = {s: {en for en, _ in pairs} for s, pairs in splits.items()}
    assert not (sources["train"] & sources["valid"] or sources["train"] & sources["test"]
                or sources["valid"] & sources["test"])
    everything = sorted(p for pairs in splits.values() for p in pairs)
    expected = sorted({(f"Message number {i} of the test", f"Meldung Nummer {i} des Tests")
                       for i in range(20)} | {("Open", "Öffnen"), ("Open", "Offen")})
    assert everything == expected  # each pair once: 5..14 of beta repeat alpha's
    assert ("Open", "Öffnen") in splits["train"] and ("Open", "Offen") in splits["train"]
    summary = json.loads((out / "corpus.json").read_text())
    assert summary["pairs"] == {"train": 15, "valid": 3, "test": 4}
    assert summary["cleaning"]["repeated pairs"] == 10
    assert [p["messages"] for p in summary["packages"]] == [21, 11]

    # a second build reads the cache (the mirror is gone) and writes the same files
    before = {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()}
    for _, deb in made:
        deb.unlink()
    command = [sys.executable, str(ROOT / "scripts" / "make_gettext_corpus.py"), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    assert done.stderr.count(": cached (") == 2
    assert {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()} == before


def test_a_damaged_cached_file_is_downloaded_again(tmp_path, capsys):
    mirror = tmp_path / "mirror"
    made = make_mirror(mirror)
    listing = package_list(tmp_path / "packages.tsv", mirror, made)
    args = ["--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
            "--packages", str(listing), "--mirror", str(mirror), "--valid", "3", "--test", "4"]
    corpus_build.main(args)
    first = read_split(tmp_path / "out", "train")
    cached = tmp_path / "cache" / "beta_1.0-1_all.deb"
    cached.write_bytes(cached.read_bytes()[:-10])
    capsys.readouterr()
    corpus_build.main(args)
    assert "beta 1.0-1: the cached" in capsys.readouterr().err
    assert cached.read_bytes() == made[1][1].read_bytes()
    assert read_split(tmp_path / "out", "train") == first


def test_a_checksum_failure_is_refused_and_nothing_kept(tmp_path):
    mirror = tmp_path / "mirror"
    made = make_mirror(mirror)
    listing = package_list(tmp_path / "packages.tsv", mirror, made, {"beta": "ab" * 32})
    out, cache = tmp_path / "out", tmp_path / "cache"
    with pytest.raises(SystemExit) as refused:
        corpus_build.main(["--out", str(out), "--cache", str(cache), "--packages", str(listing),
                           "--mirror", str(mirror)])
    message = str(refused.value)
    assert message.startswith("make_gettext_corpus: beta 1.0-1 from file://")
    assert "is not the pinned file" in message and "ab" * 32 in message
    assert hashlib.sha256(made[1][1].read_bytes()).hexdigest() in message
    assert "another --mirror" in message
    assert sorted(f.name for f in cache.iterdir()) == ["alpha_1.0-1_all.deb"]
    assert not (out / "train.en").exists()


def test_a_failed_download_names_the_package_and_what_to_do(tmp_path):
    mirror = tmp_path / "mirror"
    made = make_mirror(mirror)
    listing = package_list(tmp_path / "packages.tsv", mirror, made)
    made[0][1].unlink()
    with pytest.raises(SystemExit) as refused:
        corpus_build.main(["--out", str(tmp_path / "out"), "--packages", str(listing),
                           "--mirror", str(mirror)])
    message = str(refused.value)
    assert message.startswith("make_gettext_corpus: could not download alpha 1.0-1 "
                              "(pool/main/a/alpha/alpha_1.0-1_all.deb)")
    assert "pass --mirror" in message and "alpha_1.0-1_all.deb" in message


def test_bad_destinations_and_lists_are_refused_before_any_download(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    empty_mirror = tmp_path / "empty"
    empty_mirror.mkdir()
    with pytest.raises(SystemExit, match=r"--out .*file is a file, not a directory"):
        corpus_build.main(["--out", str(tmp_path / "file"), "--mirror", str(empty_mirror)])
    bad = tmp_path / "bad.tsv"
    bad.write_text("alpha\t1.0\tpool/main/a/alpha.deb\t10\tnot-a-sha\n")
    with pytest.raises(SystemExit, match=r"bad.tsv, line 1: the SHA-256 of alpha must be 64"):
        corpus_build.main(["--out", str(tmp_path / "out"), "--packages", str(bad),
                           "--mirror", str(empty_mirror)])
    with pytest.raises(SystemExit):
        corpus_build.main(["--out", str(tmp_path / "out"), "--lang", "en"])
    err = capsys.readouterr().err
    assert "--lang 'en'" in err and "packages," not in err  # no download was started


def test_the_pinned_list_and_its_page_agree():
    names = [p.name for p in packages.PINNED]
    assert len(set(names)) == len(names) and names == sorted(names)
    page = (ROOT / "docs" / "real-corpus.md").read_text(encoding="utf-8")
    for p in packages.PINNED:
        assert re.fullmatch(r"[0-9a-f]{64}", p.sha256)
        assert p.path.startswith("pool/main/") and p.path.endswith(".deb")
        assert f"`{p.name}` | {p.version} |" in page, p.name


# ------------------------------------------------------------------------------ the mirrors

def write_apt(root: Path, sources_list: str = "", parts: dict[str, str] = ()) -> Path:
    """``root/etc/apt`` with ``sources.list`` and the files of ``sources.list.d``."""
    etc = root / "etc" / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list").write_text(sources_list)
    for name, text in dict(parts).items():
        (etc / "sources.list.d" / name).write_text(text)
    return root


#: A Debian 12 machine's sources in deb822, as Debian's installer writes them (the main
#: archive, then the security archive's own suite), with a vendor's repository beside them.
DEBIAN_SOURCES = """\
Types: deb
# a comment inside the stanza
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_apt_sources_give_the_debian_mirrors_in_apts_order(tmp_path):
    root = write_apt(tmp_path, sources_list=(
        "# deb http://commented.example/debian bookworm main\n"
        "deb-src http://sources.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://ubuntu.example/ubuntu jammy main\n"
        "deb cdrom:[Debian 12]/ bookworm main\n"
        "deb [trusted=yes] file:/srv/debian/ stable main  # a local copy\n"), parts={
        "debian.sources": DEBIAN_SOURCES,
        "a-vendor.list": "deb https://vendor.example/apt nodistro main\n",
        "b-off.sources": "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\n"
                         "Suites: bookworm\n",
        "c-two.sources": "Types: deb deb-src\nURIs: http://one.example/debian\n"
                         "  http://mirror.example/debian/\nSuites: sid\nComponents: main\n",
        "z-backports.list": "deb http://backports.example/debian bookworm-backports main\n",
        "ignored.list.disabled": "deb http://disabled.example/debian bookworm main\n"})
    # .list files before .sources files, each set in name order; each mirror once
    assert [(m, p.name) for m, p in mirrors.debian_mirrors(root)] == [
        ("file:///srv/debian", "sources.list"),
        ("http://backports.example/debian", "z-backports.list"),
        ("http://one.example/debian", "c-two.sources"),
        ("http://mirror.example/debian", "c-two.sources"),
    ]
    assert mirrors.debian_mirrors(tmp_path / "no-apt-here") == []


@pytest.mark.parametrize("suite, debian", [
    ("bookworm", True), ("trixie-updates", True), ("stable-backports", True), ("sid", True),
    ("bookworm-security", False), ("jammy", False), ("nodistro", False),
    ("cloud-sdk-bookworm", False), ("/", False)])
def test_debian_suites(suite, debian):
    assert mirrors.is_debian_suite(suite) is debian


def test_without_mirror_the_apt_sources_mirror_serves_the_packages(tmp_path, capsys):
    mirror = tmp_path / "mirror"
    listing = package_list(tmp_path / "packages.tsv", mirror, make_mirror(mirror))
    root = write_apt(tmp_path / "apt", parts={
        "debian.sources": DEBIAN_SOURCES.replace("http://mirror.example/debian\n",
                                                 f"file:{mirror}\n")})
    assert corpus_build.main(["--out", str(tmp_path / "out"), "--packages", str(listing),
                              "--valid", "3", "--test", "4"], apt_root=root) == 0
    err = capsys.readouterr().err
    assert f"mirror {mirror.as_uri()} (from {root}/etc/apt/sources.list.d/debian.sources)" in err
    assert err.count(f"from {mirror.as_uri()}") == 2  # both packages downloaded from it
    assert len(read_split(tmp_path / "out", "test")) == 4


def test_without_a_debian_mirror_the_command_names_mirror_before_downloading(tmp_path):
    mirror = tmp_path / "mirror"
    listing = package_list(tmp_path / "packages.tsv", mirror, make_mirror(mirror))
    root = write_apt(tmp_path / "apt", "deb http://ubuntu.example/ubuntu jammy main\n")
    out, cache = tmp_path / "out", tmp_path / "cache"
    with pytest.raises(SystemExit) as refused:
        corpus_build.main(["--out", str(out), "--cache", str(cache), "--packages", str(listing)],
                          apt_root=root)
    message = str(refused.value)
    assert message.startswith("make_gettext_corpus: no Debian mirror to download 2 package "
                              "file(s) from (alpha_1.0-1_all.deb, beta_1.0-1_all.deb)")
    assert f"{root}/etc/apt/sources.list" in message and "Pass --mirror URL" in message
    assert list(cache.iterdir()) == [] and not (out / "train.en").exists()


def test_a_cache_of_every_file_needs_no_mirror(tmp_path, capsys):
    """The GPU runs' case: the corpus built offline from a --cache filled elsewhere."""
    mirror = tmp_path / "mirror"
    made = make_mirror(mirror)
    listing = package_list(tmp_path / "packages.tsv", mirror, made)
    cache = tmp_path / "cache"
    cache.mkdir()
    for _, deb in made:
        (cache / deb.name).write_bytes(deb.read_bytes())
    root = write_apt(tmp_path / "apt")  # no source at all
    assert corpus_build.main(["--out", str(tmp_path / "out"), "--cache", str(cache), "--packages",
                              str(listing), "--valid", "3", "--test", "4"], apt_root=root) == 0
    assert capsys.readouterr().err.count(": cached (") == 2


def test_mirrors_are_tried_in_order_an_archive_after_the_usual_one(tmp_path, capsys):
    """beta is gone from the usual mirror and kept in the archive, at the same path."""
    usual, archive = tmp_path / "usual", tmp_path / "archive"
    made = make_mirror(usual)
    listing = package_list(tmp_path / "packages.tsv", usual, made)
    beta = archive / made[1][1].relative_to(usual)
    beta.parent.mkdir(parents=True)
    made[1][1].rename(beta)
    assert corpus_build.main(["--out", str(tmp_path / "out"), "--packages", str(listing),
                              "--mirror", str(usual), "--mirror", str(archive), "--valid", "3",
                              "--test", "4"], apt_root=write_apt(tmp_path / "apt")) == 0
    err = capsys.readouterr().err
    assert re.search(rf"alpha 1.0-1: downloaded .* from {re.escape(usual.as_uri())}$", err, re.M)
    assert re.search(rf"beta 1.0-1: downloaded .* from {re.escape(archive.as_uri())}$", err, re.M)
