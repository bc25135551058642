"""Data in an existing model's vocabulary, piece by piece
(fairseq_posenc/tools/textprep/vocabulary.py, posenc-prepare-corpus's flags).

Checked against references outside the code: fastBPE codes segment words as fastBPE's own
merge loop does, worked out by hand below for a hand-made codes file; the vocabulary
filter splits exactly the subwords the dictionary counts too rarely (worked by hand); the
share of unknown subwords is that of hand-written files; a codes file or flag combination
that is wrong is refused in one line that names it, before anything is written.
Realistic text (typographic quotes, no-break spaces, format strings, Czech, a line of one
letter and one of hundreds of words) goes through the model's subwords and back through
``posenc-hypotheses --detokenize``: plain Moses tokens come back as the Moses detokenizer
gives them, lossy where written out below; SentencePiece pieces come back as the raw text
with its whitespace cleaned up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fairseq_posenc.tools import corpus, hypotheses
from fairseq_posenc.tools.textprep import text
from fairseq_posenc.tools.textprep.files import PrepareError
from fairseq_posenc.tools.textprep.vocabulary import (ExistingVocabulary, check_unknown,
                                                      install_codes, load_dictionary,
                                                      read_codes)


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def apply(codes: Path, line: str, tmp_path: Path, vocab: Path | None = None,
          threshold: int | None = None) -> str:
    """``line`` through the preparation's subword-nmt step, as a one-line file."""
    source, out = write(tmp_path / "in.txt", [line]), tmp_path / "out.txt"
    text.apply_subword_nmt(source, out, codes, vocab, threshold, 1)
    return out.read_text(encoding="utf-8").rstrip("\n")


# --- fastBPE's codes, applied as fastBPE applies them --------------------------------------

#: fastBPE's codes file: a merge per line, ranked by its line, with the pair's count (which
#: plays no part in applying them); ``</w>`` ends a word's last letter.
FASTBPE = ["e r</w> 120", "l o 90", "lo w 80", "n e 70", "ne w</w> 60", "a a 50",
           "aa a</w> 40", "ž l 30", "u ť</w> 20"]
#: Worked by hand with fastBPE's loop (applybpe: merge the adjacent pair of lowest rank,
#: everywhere it occurs, left to right without overlap; stop when no pair is a merge):
#: lower: l o w e r</w> -> (e r</w>) l o w er</w> -> (l o) lo w er</w> -> (lo w) low er</w>,
#:   and "low er</w>" is no merge;
#: newer: n e w e r</w> -> n e w er</w> -> ne w er</w>: "ne w" is no merge, "ne w</w>" is;
#: new: n e w</w> -> ne w</w> -> new</w>;
#: aaaa: a a a a</w> -> aa a a</w> (the second "a a" overlaps the first) and neither
#:   "aa a" nor "a a</w>" is a merge; aaa: a a a</w> -> aa a</w> -> aaa</w>;
#: lo: l o</w>: "l o</w>" is no merge (a word's last letter carries </w>);
#: žluť: ž l u ť</w> -> žl u ť</w> -> žl uť</w>.
WORDS = "lower newer new aaaa aaa lo a žluť"
SEGMENTED = "low@@ er ne@@ w@@ er new aa@@ a@@ a aaa l@@ o a žl@@ uť"


def test_fastbpe_codes_segment_as_fastbpe_does(tmp_path):
    given = write(tmp_path / "bpecodes", FASTBPE)
    record = install_codes(given, tmp_path / "codes")
    assert apply(tmp_path / "codes", WORDS, tmp_path) == SEGMENTED
    assert record["format"] == "fastBPE" and record["merges"] == len(FASTBPE)
    assert record["path"] == str(given.resolve())
    # the same merges written by subword-nmt (version 0.2) are kept as written, and agree
    subword_nmt = write(tmp_path / "subword-nmt.codes",
                        ["#version: 0.2", *(m.rsplit(" ", 1)[0] for m in FASTBPE)])
    record = install_codes(subword_nmt, tmp_path / "codes2")
    assert record["format"] == "subword-nmt" and record["version"] == "0.2"
    assert (tmp_path / "codes2").read_text(encoding="utf-8") == subword_nmt.read_text(
        encoding="utf-8")
    assert apply(tmp_path / "codes2", WORDS, tmp_path) == SEGMENTED


@pytest.mark.parametrize("lines, says", [
    (["a b 3", "c d"], "line 2 'c d' has 2 columns where line 1 has 3"),
    (["a b", "c d e f"], "line 2 'c d e f' has 4 columns where line 1 has 2"),
    (["a b c d"], "line 1 'a b c d' has 4 columns"),
    (["a b 3", "c d x"], "line 2 'c d x' has a third column 'x' that is not a count"),
    (["#version: 0.2", "a  b"], "line 2 'a  b' has an empty column"),
    (["#version: 0.2", "a b 3"], "fastBPE's three columns under a '#version: 0.2' line"),
    (["#version: 0.2"], "holds no merge"),
])
def test_codes_of_neither_tool_are_refused_naming_the_line(tmp_path, lines, says):
    path = write(tmp_path / "codes", lines)
    with pytest.raises(PrepareError) as error:
        read_codes(path)
    assert str(error.value).startswith(f"--bpe-codes {path}") and says in str(error.value)
    assert "\n" not in str(error.value)


# --- the dictionaries: read as fairseq-preprocess reads them, the filter, <unk> ------------

def test_a_file_that_is_no_fairseq_dictionary_is_refused(tmp_path):
    missing = tmp_path / "dict.de.txt"
    with pytest.raises(PrepareError, match="--tgtdict .*dict.de.txt does not exist"):
        load_dictionary(missing, "--tgtdict")
    with pytest.raises(PrepareError, match="is not a fairseq dictionary .*Incorrect dictionary "
                                           "format"):
        load_dictionary(write(tmp_path / "words.txt", ["Haus"]), "--tgtdict")
    with pytest.raises(PrepareError, match="holds no symbol"):
        load_dictionary(write(tmp_path / "empty.txt", []), "--srcdict")


def test_a_file_that_is_no_sentencepiece_model_is_refused(tmp_path):
    joined = write(tmp_path / "dict.txt", ["▁Haus 3"])
    model = write(tmp_path / "spm.model", ["not a model"])
    with pytest.raises(PrepareError, match=f"--spm-model {model} is not a SentencePiece "
                                           "model .*: pass the model's .model file"):
        ExistingVocabulary(joined, joined, spm_model=model).check()
    with pytest.raises(PrepareError, match="--spm-model .*missing.model does not exist"):
        ExistingVocabulary(joined, joined, spm_model=tmp_path / "missing.model").check()


def test_the_vocabulary_threshold_splits_subwords_the_dictionary_counts_rarely(tmp_path):
    codes = write(tmp_path / "bpecodes", ["l o 9", "lo w</w> 8"])
    # the dictionary's counts: "low" 3 times, its pieces often
    joined = write(tmp_path / "dict.txt", ["low 3", "lo@@ 10", "w 10", "l@@ 10", "o@@ 10"])
    dictionary = load_dictionary(joined, "--joined-dictionary")
    for threshold, expected in ((None, "low"), (3, "low"), (4, "lo@@ w")):
        bpe = tmp_path / f"bpe{threshold}"
        bpe.mkdir()
        existing = ExistingVocabulary(joined, joined, codes=codes,
                                      vocabulary_threshold=threshold)
        settings = existing.install(bpe, ["en", "de"], [dictionary, dictionary])
        assert settings["vocabulary_threshold"] == threshold
        assert (bpe / "vocab.en").is_file() == (threshold is not None)
        vocab = None if threshold is None else bpe / "vocab.en"
        assert apply(bpe / "codes", "low", tmp_path, vocab, threshold) == expected
        assert text.encode(["low"], "en", bpe) == [expected]  # posenc-inspect's path


def test_a_training_side_mostly_unknown_to_its_dictionary_is_refused(tmp_path):
    de = load_dictionary(write(tmp_path / "dict.de.txt", ["Haus 5", "das 4", "ist 3"]),
                         "--tgtdict")
    # 20 subwords: 1 unknown (5%, accepted); 2 unknown (10%, refused)
    fine = write(tmp_path / "train.de", ["das Haus ist"] * 6 + ["das Hund"])
    bad = write(tmp_path / "bad.de", ["das Haus ist"] * 6 + ["Katze Hund"])
    rates = check_unknown({"train": {"de": fine}, "valid": {"de": bad}},
                          {"de": (de, tmp_path / "dict.de.txt")}, "Pass them.")
    assert rates == {"train": {"de": 0.05}, "valid": {"de": 0.1}}  # valid: counted only
    with pytest.raises(PrepareError) as error:
        check_unknown({"train": {"de": bad}}, {"de": (de, tmp_path / "dict.de.txt")},
                      "Pass them.")
    assert str(error.value).startswith(
        f"the de side: 10.0% of the training split's 20 subwords (2; most often 'Katze', "
        f"'Hund') are not in {tmp_path / 'dict.de.txt'} and would become <unk> (at most 5% "
        "is accepted)")
    assert str(error.value).endswith("Pass them.")


# --- the flags ------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, says", [
    (["--bpe-codes", "c", "--spm-model", "m", "--joined-dictionary", "d"],
     "--bpe-codes and --spm-model: give one"),
    (["--srcdict", "a", "--tgtdict", "b"], "--srcdict needs the model's subword model too"),
    (["--bpe-codes", "c"], "--bpe-codes needs the model's dictionaries: --srcdict FILE "
                           "--tgtdict FILE, or --joined-dictionary FILE"),
    (["--spm-model", "m", "--srcdict", "a"], "--spm-model needs the model's dictionaries"),
    (["--bpe-codes", "c", "--joined-dictionary", "d", "--srcdict", "a"],
     "--joined-dictionary is both sides' dictionary: leave out --srcdict and --tgtdict"),
    (["--bpe-codes", "c", "--joined-dictionary", "d", "--bpe-merges", "100"],
     "--bpe-merges is for BPE learned from the corpus"),
    (["--spm-model", "m", "--joined-dictionary", "d", "--vocabulary-threshold", "5"],
     "--vocabulary-threshold is subword-nmt's vocabulary filter: it does not apply to "
     "--spm-model"),
    (["--spm-model", "m", "--joined-dictionary", "d", "--moses-no-escape"],
     "--moses-no-escape is for an existing model's --bpe-codes: --spm-model encodes the raw "
     "text"),
    (["--moses-no-dash-splits"], "--moses-no-dash-splits is for an existing model's "
                                 "--bpe-codes"),
])
def test_flags_that_do_not_go_together_are_refused_in_one_line(tmp_path, capsys, flags, says):
    dest = tmp_path / "out"
    assert corpus.main([str(tmp_path / "raw"), "-s", "en", "-t", "de", "--dest", str(dest),
                        *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("posenc-prepare-corpus: error: ") and says in err
    assert err.count("\n") == 1 and not dest.exists()


# --- realistic text there and back ----------------------------------------------------------

#: (raw, what the Moses detokenizer gives back for its plain tokens), worked out from Moses'
#: rules: it does not rejoin a typographic apostrophe or closing quote in English, "% s" of
#: "%s", "%" after a number, or tags, and the whitespace clean-up makes a no-break space a
#: space.
MOSES = {
    "en": [('He said: “It’s fine” – and left.', 'He said: “It ’ s fine ” – and left.'),
           ("Format strings stay: %s, %d and {0} or {name}.",
            "Format strings stay:% s,% d and {0} or {name}."),
           ("Rock 'n' roll & <b>bold</b> [sic] | \"quoted\"",
            "Rock 'n' roll & < b > bold < / b > [sic] | \"quoted\""),
           ("The well-known e-mail is 10\u00a0km long.",
            "The well-known e-mail is 10 km long."),
           ("A", "A"), (".", "."), ("", "")],
    "cs": [("„Příliš žluťoučký kůň“ úpěl ďábelské ódy.",) * 2,
           ("Soubor „%s“ nelze otevřít: {0}.", "Soubor „% s“ nelze otevřít: {0}."),
           ("Cena je 3,5 % – tj. 1\u00a0200 Kč.", "Cena je 3,5% – tj. 1 200 Kč."),
           (" ".join(["„Příliš žluťoučký kůň“ úpěl ďábelské ódy."] * 60),) * 2],
}


def generate_log(path: Path, hypotheses_: list[str]) -> Path:
    """fairseq-generate's H- lines, in reverse order as batches can print them."""
    return write(path, [f"H-{i}\t-0.5\t{h}" for i, h in reversed(list(enumerate(hypotheses_)))])


def detokenized(tmp_path: Path, hyps: list[str], bpe: Path, lang: str, capsys) -> list[str]:
    log = generate_log(tmp_path / f"generate.{lang}.log", hyps)
    assert hypotheses.main([str(log), "--expected", str(len(hyps)), "--detokenize", str(bpe),
                            "--lang", lang]) == 0
    return capsys.readouterr().out.split("\n")[:-1]


@pytest.mark.parametrize("escape, dashes", [(True, True), (True, False), (False, True),
                                            (False, False)])
def test_plain_moses_tokens_come_back_through_the_moses_detokenizer(tmp_path, capsys, escape,
                                                                    dashes):
    from fairseq.data.data_utils import post_process

    moses = text.Moses(joiners=False, escape=escape, aggressive_dash_splits=dashes)
    tokens = {lang: text.moses_process_lines([r for r, _ in pairs], lang, True, moses)
              for lang, pairs in MOSES.items()}
    learned = write(tmp_path / "tok.txt", [t for lines in tokens.values() for t in lines] * 2)
    text.learn_subword_nmt([learned], tmp_path / "codes", [tmp_path / "vocab"], 60, 1)
    merges = (tmp_path / "codes").read_text(encoding="utf-8").splitlines()[1:]
    fastbpe = write(tmp_path / "bpecodes", [f"{m} {len(merges) - i}" for i, m in
                                            enumerate(merges)])
    bpe = tmp_path / "bpe"
    bpe.mkdir()
    unused = tmp_path / "dict.txt"  # the filter is off: no dictionary is read
    ExistingVocabulary(unused, unused, codes=fastbpe, moses=moses).install(
        bpe, ["en", "cs"], [])
    for lang, pairs in MOSES.items():
        encoded = text.encode([r for r, _ in pairs], lang, bpe)
        assert any("@@ " in line for line in encoded)
        assert [post_process(e, "subword_nmt") for e in encoded] == tokens[lang]
        escaped = any("&quot;" in t or "&apos;" in t for t in tokens[lang])
        assert escaped == (escape and lang == "en")
        back = detokenized(tmp_path, [post_process(e, "subword_nmt") for e in encoded], bpe,
                           lang, capsys)
        assert back == [expected for _, expected in pairs]


def test_sentencepiece_pieces_come_back_as_the_raw_text(tmp_path, capsys):
    from fairseq.data.data_utils import post_process

    raw = [r for pairs in MOSES.values() for r, _ in pairs]
    learned = write(tmp_path / "raw.txt", raw * 3)
    model = tmp_path / "model.spm"
    text.train_sentencepiece([learned], model, 120, "unigram", 1000, 1)
    bpe = tmp_path / "bpe"
    bpe.mkdir()
    unused = tmp_path / "dict.txt"
    settings = ExistingVocabulary(unused, unused, spm_model=model).install(bpe, ["en", "cs"], [])
    assert settings["bpe"] == "sentencepiece" and not settings["moses_tokenize"]
    for lang, pairs in MOSES.items():
        encoded = text.encode([r for r, _ in pairs], lang, bpe)
        assert any(len(e.split()) > len(r.split()) for e, (r, _) in zip(encoded, pairs))
        back = detokenized(tmp_path, [post_process(e, "sentencepiece") for e in encoded], bpe,
                           lang, capsys)
        # the whitespace clean-up makes a no-break space a space; nothing else changes
        assert back == [" ".join(r.split()) for r, _ in pairs]
        assert [b == r for b, (r, _) in zip(back, pairs)] == ["\u00a0" not in r
                                                              for r, _ in pairs]
