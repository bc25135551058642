"""posenc-prepare-corpus: the demo's data made by the WMT preparation's own text steps.

Checked against what the steps must give, not against the code: the tokens join back to
exactly the raw sentences, the BPE files are subword-nmt's own ``apply-bpe`` of those
tokens, fairseq-preprocess wrote every split, fairseq-generate-shaped output decodes to
raw text, and posenc-inspect's ``--bpe-dir`` prepares a raw sentence into the very tokens
of the training data.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_posenc.tools import corpus, hypotheses
from fairseq_posenc.tools.textprep.text import JOINER, join_marked

pytestmark = pytest.mark.slow  # posenc-prepare-corpus end to end

ROOT = Path(__file__).resolve().parents[2]
RAW_PAIRS = {
    "train": [("The cat, which sleeps, is \"old\".", "Die Katze, die schläft, ist „alt“."),
              ("A well-known dog runs at 5:30.", "Ein bekannter Hund läuft um 5:30."),
              ("Yes... the house is (very) big!", "Ja … das Haus ist (sehr) groß!")] * 4,
    "valid": [("The dog is old.", "Der Hund ist alt.")],
    "test": [("The cat runs.", "Die Katze läuft.")],
    "test_long": [("The well-known cat, which sleeps, runs.", "Die Katze, die schläft, läuft.")],
}


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    raw = root / "raw"
    raw.mkdir()
    for split, pairs in RAW_PAIRS.items():
        (raw / f"{split}.en").write_text("".join(en + "\n" for en, _ in pairs), encoding="utf-8")
        (raw / f"{split}.de").write_text("".join(de + "\n" for _, de in pairs), encoding="utf-8")
    assert corpus.main([str(raw), "-s", "en", "-t", "de", "--dest", str(root / "data"),
                        "--test", "test", "test_long", "--bpe-merges", "30",
                        "--workers", "1"]) == 0
    return raw, root / "data"


def test_tokens_join_back_to_the_raw_text(prepared):
    raw, data = prepared
    for split in RAW_PAIRS:
        for lang in ("en", "de"):
            tok = lines(data / "tok" / f"{split}.{lang}")
            assert [join_marked(line.split()) for line in tok] == lines(raw / f"{split}.{lang}")
    assert any(JOINER in line for line in lines(data / "tok" / "train.de"))


def test_bpe_is_subword_nmt_apply_bpe_of_the_tokens(prepared):
    _, data = prepared
    from subword_nmt.apply_bpe import BPE, read_vocabulary
    with open(data / "bpe" / "codes", encoding="utf-8") as c, \
            open(data / "bpe" / "vocab.de", encoding="utf-8") as v:
        bpe = BPE(c, vocab=read_vocabulary(v, 1))
    for split in RAW_PAIRS:
        assert lines(data / "bpe" / f"{split}.de") == [
            bpe.process_line(line) for line in lines(data / "tok" / f"{split}.de")]
    settings = json.loads((data / "bpe" / "bpe.json").read_text())
    assert settings["bpe"] == "subword-nmt" and settings["langs"] == ["en", "de"]
    assert 0 < settings["learned_merges"] <= 30


def test_every_split_is_binarized_tests_in_order(prepared):
    _, data = prepared
    for subset in ("train", "valid", "test", "test1"):
        for lang in ("en", "de"):
            for ext in ("bin", "idx"):
                assert (data / "bin" / f"{subset}.en-de.{lang}.{ext}").is_file()
    from fairseq.data import Dictionary, data_utils
    d = Dictionary.load(str(data / "bin" / "dict.de.txt"))
    test1 = data_utils.load_indexed_dataset(str(data / "bin" / "test1.en-de.de"), d)
    assert d.string(test1[0]) == lines(data / "bpe" / "test_long.de")[0]


def test_hypotheses_detokenize_to_the_raw_text(prepared, tmp_path, capsys):
    raw, data = prepared
    refs = lines(raw / "train.de")[:3]
    # fairseq-generate --remove-bpe prints the tokens (joiners kept), in batch order
    tok = lines(data / "tok" / "train.de")[:3]
    log = tmp_path / "generate.log"
    log.write_text("".join(f"H-{i}\t-0.5\t{tok[i]}\n" for i in (2, 0, 1)), encoding="utf-8")
    assert hypotheses.main([str(log), "--expected", "3", "--detokenize",
                            str(data / "bpe")]) == 0
    assert capsys.readouterr().out.splitlines() == refs


def test_inspect_prepares_a_sentence_as_the_data_was(prepared):
    raw, data = prepared
    from fairseq_posenc.tools.inspection.sentence import prepare
    sentence = lines(raw / "train.en")[2]
    tokens = prepare(sentence, lang="en", tokenized=False, bpe_codes=None, bpe_vocab=None,
                     vocab_threshold=1, separator=None, bpe_dir=data / "bpe")
    assert tokens == lines(data / "bpe" / "train.en")[2].split()


def test_bad_corpora_stop_with_what_to_do(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.en").write_text("a\nb\n")
    (raw / "train.de").write_text("a\n")
    for name in ("valid.en", "valid.de", "test.en", "test.de"):
        (raw / name).write_text("a\n")
    run = [sys.executable, "-m", "fairseq_posenc.tools.corpus", str(raw), "-s", "en", "-t", "de",
           "--dest", str(tmp_path / "out")]
    proc = subprocess.run(run, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1
    assert "train: 2 en lines but 1 de lines" in proc.stderr
    proc = subprocess.run([*run, "--test", "missing"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and "missing.en" in proc.stderr and "SPLIT.LANG" in proc.stderr
    assert not (tmp_path / "out").exists()
