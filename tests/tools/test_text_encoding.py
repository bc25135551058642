"""Raw text that is not UTF-8 is refused before any work, naming the file, the line and the
encoding it looks like (fairseq_posenc/tools/textprep/encoding.py); a UTF-8 byte-order mark
is dropped.

The files are real: German and Czech sentences written by Python's own codecs (Latin-1,
cp1250, UTF-16 and UTF-32 with and without a byte-order mark). The line a message names is
checked against a plain loop that decodes each line on its own.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fairseq_posenc.tools import corpus, hypotheses
from fairseq_posenc.tools.evaluation import cli as score_cli
from fairseq_posenc.tools.textprep import encoding
from fairseq_posenc.tools.textprep.encoding import check_utf8
from fairseq_posenc.tools.textprep.files import PrepareError, read_lines
from tests.tools.test_compare import base_args, raw, run_main  # noqa: F401  (raw: fixture)

GERMAN = ["Das ist gut.", "Die Größe der Straße ist schön.", "Noch ein Satz.",
          "Ärger über Öl und Maße."]
#: cp1252's own characters too: typographic quotes, a dash, the euro sign.
WINDOWS = [GERMAN[0], "Die Größe ist „schön“ – 5 €.", *GERMAN[2:]]
CZECH = ["To je dobré.", "Příliš žluťoučký kůň úpěl ďábelské ódy.", "Ještě jedna věta."]


def first_bad_line(data: bytes) -> int:
    """The first line (from 1) that does not decode as UTF-8 alone, or holds a NUL."""
    for number, line in enumerate(data.split(b"\n"), 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return number
        if b"\0" in line:
            return number
    return 0


def refused(path: Path) -> str:
    with pytest.raises(PrepareError) as error:
        check_utf8(path)
    return str(error.value)


@pytest.mark.parametrize("name, data, says", [
    ("latin1.de", "".join(s + "\n" for s in GERMAN).encode("latin-1"),
     "Latin-1 or cp1252 (Windows-1252), as which the line reads 'Die Größe der Straße "
     "ist schön.'"),
    ("cp1252.de", "".join(s + "\n" for s in WINDOWS).encode("cp1252"),
     "as which the line reads 'Die Größe ist „schön“ – 5 €.'"),
    ("cp1250.cs", "".join(s + "\n" for s in CZECH).encode("cp1250"),
     "Czech or Polish text: more likely cp1250 or Latin-2"),
    ("latin2.cs", "".join(s + "\n" for s in CZECH).encode("iso8859-2"), "iconv -f CP1252"),
])
def test_an_8_bit_encoding_is_named_with_its_first_bad_line(tmp_path, name, data, says):
    path = tmp_path / name
    path.write_bytes(data)
    says_ = refused(path)
    line = first_bad_line(data)
    bad = sum(1 for text in data.split(b"\n") if first_bad_line(text))
    assert f"{path}: line {line} (and {bad - 1} more line" in says_
    assert says in says_ and "iconv -f" in says_ and f"{path} > {path}.utf8" in says_


@pytest.mark.parametrize("codec, bom, says", [
    ("utf-16-le", b"\xff\xfe", "is UTF-16 LE text (it starts with the UTF-16 LE byte-order"),
    ("utf-16-be", b"\xfe\xff", "is UTF-16 BE text (it starts with the UTF-16 BE byte-order"),
    ("utf-32-le", b"\xff\xfe\x00\x00", "is UTF-32 LE text"),
    ("utf-16-le", b"", "line 1 holds NUL bytes, on every other byte: it looks like UTF-16 LE "
                       "text without a byte-order mark"),
    ("utf-16-be", b"", "it looks like UTF-16 BE text without a byte-order mark"),
])
def test_utf16_and_utf32_are_named_with_or_without_a_bom(tmp_path, codec, bom, says):
    path = tmp_path / "train.de"
    text = "".join(s + "\n" for s in GERMAN)
    path.write_bytes(bom + text.encode(codec))
    says_ = refused(path)
    assert str(path) in says_ and says in says_
    assert f"iconv -f UTF-{codec.split('-')[1]}" in says_


def test_utf8_with_and_without_a_bom_passes_and_the_bom_is_dropped(tmp_path):
    plain, bom = tmp_path / "plain.de", tmp_path / "bom.de"
    plain.write_text("".join(s + "\n" for s in GERMAN + CZECH), encoding="utf-8")
    bom.write_text("".join(s + "\n" for s in GERMAN + CZECH), encoding="utf-8-sig")
    assert bom.read_bytes().startswith(b"\xef\xbb\xbf")
    for path in (plain, bom):
        check_utf8(path)
        assert read_lines(path) == GERMAN + CZECH  # the preparation's reader
        assert score_cli.read_lines(path) == GERMAN + CZECH  # posenc-score's


def test_a_nul_byte_and_a_cut_off_character(tmp_path):
    nul, cut = tmp_path / "nul.de", tmp_path / "cut.de"
    data = b"Das ist gut.\nein\x00Satz\n"
    nul.write_bytes(data)
    assert f"{nul}: line 2 holds a NUL byte (offset {data.index(0)})" in refused(nul)
    cut.write_bytes("Das ist gut.\nÄrger über das Maß".encode()[:-1])
    assert f"{cut} ends in the middle of a UTF-8 character (line 2)" in refused(cut)


@pytest.mark.parametrize("seed", range(6))
def test_the_line_is_found_across_block_boundaries(tmp_path, monkeypatch, seed):
    """Blocks of 1 to 7 bytes split multibyte characters everywhere: valid files pass, and
    an invalid byte is found on the line the plain loop finds."""
    rng = random.Random(seed)
    monkeypatch.setattr(encoding, "_BLOCK", rng.randint(1, 7))
    words = [w for s in GERMAN + CZECH for w in s.split()] + ["€", "😀", "ß"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 6))) for _ in range(30)]
    path = tmp_path / "text"
    data = "\n".join(lines).encode()
    path.write_bytes(data)
    check_utf8(path)
    at = rng.randrange(len(data))
    broken = data[:at] + rng.choice([b"\xf6", b"\x80", b"\xc3", b"\xed\xa0\x80"]) + data[at:]
    path.write_bytes(broken)
    says = refused(path)
    assert f"{path}: line {first_bad_line(broken)}" in says or (
        f"{path} ends in the middle of a UTF-8 character" in says)


# --- the tools refuse before any work ------------------------------------------------------


def corpus_files(root: Path, codecs: dict[str, str]) -> Path:
    """A raw corpus of train, valid and test, each side in the codec ``codecs`` gives its
    language (default UTF-8)."""
    root.mkdir()
    for split in ("train", "valid", "test"):
        for lang, sentences in (("en", ["This is good."] * 4), ("de", GERMAN)):
            text = "".join(s + "\n" for s in sentences)
            (root / f"{split}.{lang}").write_bytes(text.encode(codecs.get(lang, "utf-8")))
    return root


CASES = [  # (codec per language, the file named, what the message says)
    ({"de": "latin-1"}, "train.de", "line 2 (and 1 more line) is not UTF-8"),
    ({"de": "utf-16"}, "train.de", "is UTF-16 LE text"),  # one side only: before line counts
    ({"en": "utf-16-le", "de": "utf-16-le"}, "train.en", "looks like UTF-16 LE text without"),
    ({"en": "utf-16-be", "de": "utf-16-be"}, "train.en", "looks like UTF-16 BE text without"),
]


@pytest.mark.parametrize("codecs, file, says", CASES)
def test_posenc_prepare_corpus_refuses_before_writing(tmp_path, capsys, codecs, file, says):
    root = corpus_files(tmp_path / "raw", codecs)
    dest = tmp_path / "out"
    assert corpus.main([str(root), "-s", "en", "-t", "de", "--dest", str(dest)]) == 1
    err = capsys.readouterr().err
    assert f"{root / file}" in err and says in err and "lines but" not in err
    assert not dest.exists()


@pytest.mark.parametrize("codecs, file, says", CASES)
def test_posenc_compare_refuses_raw_data_before_writing(tmp_path, capsys, codecs, file, says):
    root = corpus_files(tmp_path / "raw", codecs)
    out = tmp_path / "cmp"
    args = base_args(out, root, "--encodings", "t5")
    args = args[:args.index("--test")] + args[args.index("--cpu"):]  # the test split only
    message = run_main(args, capsys)
    assert f"posenc-compare: --data {root}: {root / file}" in message and says in message
    assert not out.exists()


def test_posenc_score_and_hypotheses_refuse_a_latin1_reference(tmp_path, capsys):
    ref, hyp, log = tmp_path / "test.de", tmp_path / "hyp.de", tmp_path / "generate.log"
    ref.write_bytes("".join(s + "\n" for s in GERMAN).encode("latin-1"))
    hyp.write_text("".join(s + "\n" for s in GERMAN), encoding="utf-8")
    log.write_text("".join(f"H-{i}\t-0.1\t{s}\n" for i, s in enumerate(GERMAN)))
    with pytest.raises(SystemExit) as stop:
        score_cli.main(["--ref", str(ref), "--hyp", str(hyp)])
    assert f"posenc-score: {ref}: line 2 (and 1 more line) is not UTF-8" in str(stop.value)
    assert hypotheses.main([str(log), "--ref", str(ref)]) == 1
    assert f"--ref {ref}: line 2" in capsys.readouterr().err


def test_raw_checks_are_unchanged_for_utf8(raw):  # noqa: F811
    assert corpus.check_raw(raw, "en", "de", ["train", "valid", "test"])["valid"] == 20


@pytest.mark.slow  # posenc-prepare-corpus end to end (fairseq-preprocess)
def test_a_utf8_bom_becomes_no_token(tmp_path):
    """Files saved with a UTF-8 byte-order mark (Notepad's "UTF-8 with BOM") prepare as
    the same files without it: the same tokens, BPE and dictionary, no U+FEFF anywhere."""
    sentences = {"en": ["This is good.", "The size of the street is nice.", "One more.",
                        "Anger about oil."], "de": GERMAN}
    outputs = {}
    for name, codec in (("plain", "utf-8"), ("bom", "utf-8-sig")):
        root = tmp_path / name
        root.mkdir()
        for split in ("train", "valid", "test"):
            for lang, lines in sentences.items():
                (root / f"{split}.{lang}").write_bytes(
                    "".join(s + "\n" for s in lines * 3).encode(codec))
        assert corpus.main([str(root), "-s", "en", "-t", "de", "--dest",
                            str(tmp_path / f"{name}.out"), "--bpe-merges", "20",
                            "--workers", "1"]) == 0
        outputs[name] = {p.relative_to(tmp_path / f"{name}.out"): p.read_bytes()
                         for p in sorted((tmp_path / f"{name}.out").rglob("*"))
                         if p.is_file() and p.parts[-2] in ("tok", "bpe")
                         or p.name.startswith("dict.")}
    assert (tmp_path / "bom" / "train.de").read_bytes().startswith(b"\xef\xbb\xbf")
    assert outputs["bom"] == outputs["plain"] and len(outputs["plain"]) > 10
    assert not any("\ufeff".encode() in data for data in outputs["bom"].values())
