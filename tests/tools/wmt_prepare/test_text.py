"""The WMT preparation's text steps: the target side comes back to the raw references it
is scored against (subword-nmt and sentencepiece), each dataset is cleaned as its paper
did, and progress bars show on a terminal only."""

from __future__ import annotations

import io

import pytest

from fairseq_posenc.tools.textprep import files as prep_files
from fairseq_posenc.tools.textprep import text as prep_text  # names of locals here
from fairseq_posenc.tools.wmt import catalog


# --- the target side comes back to the raw references it is scored against ---------------

#: Typographic quotes (nested), dashes, an ellipsis, times, numbers, hyphens, an apostrophe.
RAW_REFERENCES = {
    "de": ["„Das ist – wie man sagt – ein „guter“ Anfang…“, sagte er.",
           "Sie sagte: „Wir kommen um 10:30 Uhr an.“",
           "Der Umsatz stieg um 3,5 % auf 1.200 Mio. Euro – nach 2019/20.",
           "Die E-Mail-Adresse (siehe S. 12) ist ‚vertraulich‘… oder?"],
    "cs": ["„To je – jak se říká – dobrý začátek…“, řekl.",
           "Přijedeme v 10:30 hod. – možná později."],
    "en": ["\"It's a 'good' start...\" -- he said; it's 9:45 a.m. (e-mail me).",
           "Well—that’s “fine”, isn’t it?"],
}


def round_trip_bleu(hyps, refs):
    from sacrebleu.metrics import BLEU

    return BLEU().corpus_score(hyps, [refs]).score


@pytest.mark.parametrize("lang", sorted(RAW_REFERENCES))
def test_target_side_round_trip_subword_nmt(lang, tmp_path):
    """Raw references through the preparation's processing and BPE, then back as
    fairseq-generate --remove-bpe and prep_text.detokenize give them: >= 99 BLEU (here: the
    same strings)."""
    from subword_nmt.apply_bpe import BPE

    refs = RAW_REFERENCES[lang]
    tokens = prep_text.moses_process_lines(refs, lang)
    corpus = tmp_path / "tok.txt"
    corpus.write_text("\n".join(tokens * 3) + "\n", encoding="utf-8")
    codes, vocab = tmp_path / "codes", tmp_path / "vocab"
    prep_text.learn_subword_nmt([corpus], codes, [vocab], 40, 1)
    with open(codes, encoding="utf-8") as c:
        bpe = BPE(c)
    encoded = [bpe.process_line(t) for t in tokens]
    assert any("@@ " in line for line in encoded)  # BPE did split words
    removed = [(line + " ").replace("@@ ", "").rstrip() for line in encoded]  # --remove-bpe
    back = prep_text.detokenize(removed, lang, "subword-nmt",
                               prep_text.TOKENIZER)
    assert round_trip_bleu(back, refs) >= 99.0
    assert back == refs


@pytest.mark.parametrize("lang", sorted(RAW_REFERENCES))
def test_target_side_round_trip_sentencepiece(lang, tmp_path):
    from fairseq.data.data_utils import post_process

    refs = RAW_REFERENCES[lang]
    text = prep_text.moses_process_lines(refs, lang, tokenize=False)
    corpus = tmp_path / "raw.txt"
    corpus.write_text("\n".join(text * 3) + "\n", encoding="utf-8")
    model = tmp_path / "spm.model"
    prep_text.train_sentencepiece([corpus], model, 80, "unigram", 1000, 1)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    pieces = [" ".join(p) for p in sp.encode(text, out_type=str)]
    back = prep_text.detokenize([post_process(p, "sentencepiece") for p in pieces], lang,
                               "sentencepiece")
    assert round_trip_bleu(back, refs) >= 99.0
    assert back == refs


# --- cleaning and progress --------------------------------------------------------------


def test_each_dataset_cleans_as_its_paper(tmp_path):
    """AT5 keeps pairs of at most 120 tokens (and prints the paper's 5,850,267 beside ours);
    tensor2tensor's papers drop only pairs with an empty side; no paper filters by ratio."""
    assert catalog.DATASETS["wmt17_en_de"].cleaning.max_len == 120
    assert catalog.DATASETS["wmt17_en_de"].cleaning.paper_pairs == 5_850_267
    for name in ("wmt15_en_de", "wmt18_en_de", "wmt18_en_cs"):
        c = catalog.DATASETS[name].cleaning
        assert (c.min_len, c.max_len, c.max_ratio) == (1, None, None), name
    pairs = [("a b", "x y"), ("", "x"), ("a", "x " * 121), ("a " * 120, "x"), ("a", "x y z w")]
    ins = [tmp_path / "in.en", tmp_path / "in.de"]
    for i, side in enumerate(zip(*pairs)):
        ins[i].write_text("\n".join(side) + "\n", encoding="utf-8")
    outs = (tmp_path / "out.en", tmp_path / "out.de")
    corpora = [("first", 2), ("second", 3)]
    read, kept, per = prep_text.clean_corpus(tuple(ins), outs, catalog.AT5_CLEANING, corpora)
    assert (read, kept) == (5, 3)  # the empty side and the 121-token side go
    assert per == {"first": {"raw": 2, "kept": 1}, "second": {"raw": 3, "kept": 2}}
    read, kept, _ = prep_text.clean_corpus(tuple(ins), outs, catalog.TENSOR2TENSOR_CLEANING)
    assert kept == 4


def test_progress_bars_on_a_terminal_only():
    """Long steps show size, rate and ETA on a terminal; in logs (not a terminal) nothing."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, shown in ((io.StringIO(), False), (Terminal(), True)):
        with prep_files.progress(2048, "download x.tgz", unit="B", unit_scale=True,
                                 file=stream) as bar:
            bar.update(1024)
            bar.refresh()
        text = stream.getvalue()
        assert ("download x.tgz" in text and "B/s" in text and "1.0" in text) == shown, text
