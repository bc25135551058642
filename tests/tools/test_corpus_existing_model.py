"""posenc-prepare-corpus in an existing model's vocabulary, end to end, on the toy corpus.

The "existing model" is made here as fairseq's WMT recipes make one: plain Moses tokens
(``tokenizer.perl -a``, escaping), subword-nmt BPE written out as fastBPE writes codes (a
third column), a dictionary built by fairseq's own builder; or a SentencePiece model of the
raw text with a dictionary per language. Checked against what those tools give on their
own: the encoded splits are sacremoses' tokens through subword-nmt with the codes as
learned (or SentencePiece's own pieces), ``bin/`` holds the given dictionaries byte for
byte, the share of unknown subwords recorded is what fairseq-preprocess reports as replaced
by ``<unk>``, the tokens detokenize to the raw references, and prepared.json records the
files by their sha256. A dictionary of the other language is refused before binarizing.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from fairseq_posenc.tools import corpus, hypotheses
from fairseq_posenc.tools.textprep import text

pytestmark = pytest.mark.slow  # fairseq-preprocess, twice


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_dictionary(files: list[Path], out: Path) -> Path:
    """fairseq-preprocess's own dictionary builder, saved as it saves it."""
    from fairseq.tasks.translation import TranslationTask

    TranslationTask.build_dictionary([str(f) for f in files]).save(str(out))
    return out


@pytest.fixture(scope="module")
def model(toy_corpus, tmp_path_factory):
    """A WMT-recipe model's vocabulary, from the toy corpus's training split."""
    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE

    root = tmp_path_factory.mktemp("model")
    tok = {}
    for lang in ("en", "de"):
        moses = MosesTokenizer(lang=lang)
        tok[lang] = root / f"train.tok.{lang}"
        tok[lang].write_text("".join(moses.tokenize(line, aggressive_dash_splits=True,
                                                    escape=True, return_str=True) + "\n"
                                     for line in lines(toy_corpus / f"train.{lang}")),
                             encoding="utf-8")
    codes = root / "codes"  # subword-nmt's, with its #version: 0.2 header
    text.learn_subword_nmt([tok["en"], tok["de"]], codes, [root / "v.en", root / "v.de"],
                           200, 1)
    merges = lines(codes)[1:]
    fastbpe = root / "bpecodes"
    fastbpe.write_text("".join(f"{m} {1000 - i}\n" for i, m in enumerate(merges)),
                       encoding="utf-8")
    with open(codes, encoding="utf-8") as c:
        bpe = BPE(c)
    for lang in ("en", "de"):
        (root / f"train.bpe.{lang}").write_text(
            "".join(bpe.process_line(line) + "\n" for line in lines(tok[lang])),
            encoding="utf-8")
    joined = build_dictionary([root / "train.bpe.en", root / "train.bpe.de"],
                              root / "dict.txt")
    english = build_dictionary([root / "train.bpe.en"], root / "dict.en.txt")
    return {"codes": codes, "fastbpe": fastbpe, "bpe": bpe, "dict": joined,
            "english": english}


@pytest.fixture(scope="module")
def prepared(toy_corpus, model, tmp_path_factory):
    dest = tmp_path_factory.mktemp("prepared") / "data"
    assert corpus.main([str(toy_corpus), "-s", "en", "-t", "de", "--dest", str(dest),
                        "--test", "test", "test_long", "--bpe-codes", str(model["fastbpe"]),
                        "--joined-dictionary", str(model["dict"]), "--workers", "1"]) == 0
    return dest


def test_splits_are_moses_tokens_through_the_models_codes(toy_corpus, model, prepared):
    from sacremoses import MosesTokenizer

    for lang in ("en", "de"):
        moses = MosesTokenizer(lang=lang)
        for split in ("train", "valid", "test", "test_long"):
            expected = [model["bpe"].process_line(moses.tokenize(
                line, aggressive_dash_splits=True, escape=True, return_str=True))
                for line in lines(toy_corpus / f"{split}.{lang}")]
            assert lines(prepared / "bpe" / f"{split}.{lang}") == expected


def test_bin_holds_the_models_dictionary_and_the_splits_in_it(model, prepared):
    from fairseq.data import Dictionary, data_utils

    for lang in ("en", "de"):
        assert (prepared / "bin" / f"dict.{lang}.txt").read_bytes() == model["dict"].read_bytes()
    d = Dictionary.load(str(model["dict"]))
    test1 = data_utils.load_indexed_dataset(str(prepared / "bin" / "test1.en-de.de"), d)
    expected = [" ".join(t if t in d.indices else "<unk>" for t in line.split())
                for line in lines(prepared / "bpe" / "test_long.de")]
    assert [d.string(test1[i]) for i in range(len(test1))] == expected


def test_the_record_names_the_files_and_the_unknown_share_is_fairseqs(model, prepared):
    settings = json.loads((prepared / "bpe" / "bpe.json").read_text())
    assert settings["codes"] == {"path": str(model["fastbpe"].resolve()),
                                 "sha256": sha256(model["fastbpe"]), "format": "fastBPE",
                                 "merges": len(lines(model["fastbpe"])), "version": "0.2"}
    assert settings["tokenizer"] == "sacremoses(-a, escaping)"
    assert settings["vocabulary_threshold"] is None and settings["existing_model"]
    info = json.loads((prepared / "prepared.json").read_text())
    given = {"path": str(model["dict"].resolve()), "sha256": sha256(model["dict"])}
    vocabulary = info["vocabulary"]
    assert vocabulary["joined"] and vocabulary["source_dict"] == vocabulary["target_dict"] == given
    assert info["subword"] == settings
    # fairseq-preprocess: "[de] .../bpe/test.de: 10 sents, 344 tokens, 0.291% replaced";
    # its tokens count each sentence's end too
    log = (prepared / "preprocess.log").read_text()
    reported = re.findall(r"\[(\w+)\] \S+/bpe/(\w+)\.\w+: (\d+) sents, (\d+) tokens, "
                          r"([\d.]+)% replaced", log)
    assert len(reported) == 8
    for lang, split, sents, tokens, percent in reported:
        unknown = round(vocabulary["unknown"][split][lang] * (int(tokens) - int(sents)))
        assert f"{100 * unknown / int(tokens):.3}" == percent  # as fairseq prints it
    assert any(rate > 0 for rates in vocabulary["unknown"].values() for rate in rates.values())


def test_hypotheses_detokenize_to_the_raw_references(toy_corpus, prepared, tmp_path, capsys):
    from fairseq.data.data_utils import post_process

    refs = lines(toy_corpus / "test.de")
    bpe = lines(prepared / "bpe" / "test.de")  # a model that translates perfectly
    log = tmp_path / "generate.log"
    log.write_text("".join(f"H-{i}\t-0.5\t{post_process(bpe[i], 'subword_nmt')}\n"
                           for i in reversed(range(len(bpe)))), encoding="utf-8")
    assert hypotheses.main([str(log), "--ref", str(toy_corpus / "test.de"), "--detokenize",
                            str(prepared / "bpe")]) == 0
    assert capsys.readouterr().out.splitlines() == refs


def test_inspect_prepares_a_sentence_as_the_data_was(toy_corpus, prepared):
    from fairseq_posenc.tools.inspection.sentence import prepare

    sentence = lines(toy_corpus / "train.en")[1]
    tokens = prepare(sentence, lang="en", tokenized=False, bpe_codes=None, bpe_vocab=None,
                     vocab_threshold=1, separator=None, bpe_dir=prepared / "bpe")
    assert tokens == lines(prepared / "bpe" / "train.en")[1].split()


def test_a_dictionary_of_the_other_language_is_refused_before_binarizing(toy_corpus, model,
                                                                         tmp_path, capsys):
    dest = tmp_path / "data"
    assert corpus.main([str(toy_corpus), "-s", "en", "-t", "de", "--dest", str(dest),
                        "--bpe-codes", str(model["codes"]), "--srcdict", str(model["english"]),
                        "--tgtdict", str(model["english"]), "--workers", "1"]) == 1
    english = set(line.split()[0] for line in lines(model["english"]))
    german = [t for line in lines(dest / "bpe" / "train.de") for t in line.split()]
    unknown = sum(t not in english for t in german) / len(german)
    assert unknown > 0.05
    err = capsys.readouterr().err
    assert (f"error: the de side: {unknown:.1%} of the training split's {len(german):,} "
            "subwords") in err
    assert f"are not in {model['english']} and would become <unk>" in err
    assert not (dest / "bin").exists()


def test_a_sentencepiece_model_and_a_dictionary_per_side(toy_corpus, tmp_path, capsys):
    import sentencepiece as spm
    from fairseq.data.data_utils import post_process

    spm_model = tmp_path / "model" / "sentencepiece.bpe.model"
    spm_model.parent.mkdir()
    text.train_sentencepiece([toy_corpus / "train.en", toy_corpus / "train.de"], spm_model,
                             400, "bpe", 10000, 1)
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    dicts = {}
    for lang in ("en", "de"):
        pieces = tmp_path / f"train.spm.{lang}"
        pieces.write_text("".join(" ".join(p) + "\n" for p in sp.encode(
            lines(toy_corpus / f"train.{lang}"), out_type=str)), encoding="utf-8")
        dicts[lang] = build_dictionary([pieces], tmp_path / "model" / f"dict.{lang}.txt")
    dest = tmp_path / "data"
    assert corpus.main([str(toy_corpus), "-s", "en", "-t", "de", "--dest", str(dest),
                        "--spm-model", str(spm_model), "--srcdict", str(dicts["en"]),
                        "--tgtdict", str(dicts["de"]), "--workers", "1"]) == 0
    refs = lines(toy_corpus / "test.de")
    expected = [" ".join(p) for p in sp.encode(refs, out_type=str)]
    assert lines(dest / "bpe" / "test.de") == expected
    for lang in ("en", "de"):
        assert (dest / "bin" / f"dict.{lang}.txt").read_bytes() == dicts[lang].read_bytes()
    settings = json.loads((dest / "bpe" / "bpe.json").read_text())
    assert settings["bpe"] == "sentencepiece" and settings["tokenizer"] is None
    assert settings["model"] == {"path": str(spm_model.resolve()), "sha256": sha256(spm_model)}
    vocabulary = json.loads((dest / "prepared.json").read_text())["vocabulary"]
    assert not vocabulary["joined"]
    assert vocabulary["target_dict"]["sha256"] == sha256(dicts["de"])
    log = tmp_path / "generate.log"  # fairseq-generate --post-process sentencepiece
    log.write_text("".join(f"H-{i}\t-0.5\t{post_process(e, 'sentencepiece')}\n"
                           for i, e in enumerate(expected)), encoding="utf-8")
    capsys.readouterr()
    assert hypotheses.main([str(log), "--ref", str(toy_corpus / "test.de"), "--detokenize",
                            str(dest / "bpe")]) == 0
    assert capsys.readouterr().out.splitlines() == refs
