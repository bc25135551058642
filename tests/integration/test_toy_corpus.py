"""scripts/make_toy_corpus.py: the test_long split (length extrapolation) and the other splits.

The hashes below are sha256 sums of the files make_toy_corpus.py writes without
``--test-long`` (taken at commit 0a5cc6f), for the demo's arguments and for a second,
smaller set. With or without ``--test-long`` the script must write exactly those files, so
that corpora already built (and the demo's stamp-checked data) stay valid.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # scripts/make_toy_corpus.py run for every split

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_toy_corpus.py"

DEMO_ARGS = ["--seed", "1", "--train", "20000", "--valid", "300", "--test", "300"]
DEMO_SHA256 = {
    "test.en": "cdedd9c5a8fd64f2ba0ff7be290412dbd383631a7132291543dddb2682c812a1",
    "test.de": "0cf9cf9202714ed9c5bc2c26f673f44af97838519466b726512a09fe1a013096",
    "valid.en": "efd0880abc67cdde85a958b4f5aa3dd995c92153e593846931d379581a4ce184",
    "valid.de": "43bad2adb414619694cc61717f56bd18499b484bed3efcb7137fabdb9432bc1c",
    "train.en": "43ec5f751697bf0afcfa2a3560dcb6947bc1403570644d15b6a16a8a39c3636d",
    "train.de": "8ada3c5b0dc0588df000ae7981953671ea688f2e9fc9e5693ea66d44ebcc41fe",
}
SMALL_ARGS = ["--seed", "7", "--train", "500", "--valid", "50", "--test", "40",
              "--min-len", "6", "--max-len", "20"]
SMALL_SHA256 = {
    "test.en": "1776c2c7efaebcc52b76925d57ccf38390846e8742c2596754f2050c24953d26",
    "test.de": "73c8be921413f198dd35d1659e2db3a4f05cdaf1cc9956f89bc3c01e002e403d",
    "valid.en": "d24e5ecf263edecc2022d5f03b1d1937b0b82817de41acda3f30ad8d178d2831",
    "valid.de": "caa76824a937f237a65e51afecc4c7e8eb1a151fbbab2f5a29cc8bdf2232be7c",
    "train.en": "b0034672d8d0225a9b550fd212c556ed031083060d1ecac293c43c2270d5ed2c",
    "train.de": "7bdb78246eb8fd13ea0aab7edcd7985861a731d92bf5a81fefde7d04be9bae1b",
}


def run(out: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args],
                          capture_output=True, text=True, check=check)


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def toy():
    """The script as a module, for the constructed cases."""
    spec = importlib.util.spec_from_file_location("make_toy_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def demo_corpus(tmp_path_factory):
    """The demo's corpus: old splits + 200 long sentences of 40-60 words."""
    out = tmp_path_factory.mktemp("demo_corpus")
    run(out, *DEMO_ARGS, "--test-long", "200", "--long-min-len", "40", "--long-max-len", "60")
    return out


@pytest.mark.parametrize("args, hashes", [(DEMO_ARGS, DEMO_SHA256), (SMALL_ARGS, SMALL_SHA256)],
                         ids=["demo", "small"])
@pytest.mark.parametrize("test_long", [None, "0", "30"])
def test_old_splits_unchanged(tmp_path, args, hashes, test_long):
    extra = [] if test_long is None else ["--test-long", test_long]
    run(tmp_path, *args, *extra)
    assert {name: sha256(tmp_path / name) for name in hashes} == hashes
    assert (tmp_path / "test_long.en").exists() == (test_long == "30")


def test_demo_corpus_old_splits_unchanged(demo_corpus):
    assert {name: sha256(demo_corpus / name) for name in DEMO_SHA256} == DEMO_SHA256


def test_long_split_is_longer_than_every_training_sentence(demo_corpus):
    en, de = lines(demo_corpus / "test_long.en"), lines(demo_corpus / "test_long.de")
    assert len(en) == len(de) == 200
    others = {s for split in ("train", "valid", "test") for s in lines(demo_corpus / f"{split}.en")}
    longest_other = max(len(s.split()) for s in others)
    assert longest_other <= 30
    lengths = [len(s.split()) for s in en]
    assert min(lengths) >= 40 and max(lengths) <= 60
    assert min(lengths) > longest_other
    assert len(set(en)) == len(en) and not set(en) & others
    # The lengths spread over the range rather than piling up at one end.
    assert sum(n <= 50 for n in lengths) >= 50 and sum(n > 50 for n in lengths) >= 50


def test_long_split_default_lengths(tmp_path):
    run(tmp_path, *SMALL_ARGS, "--test-long", "25")  # --max-len 20: long is 21..40 words
    lengths = [len(s.split()) for s in lines(tmp_path / "test_long.en")]
    assert len(lengths) == 25 and min(lengths) >= 21 and max(lengths) <= 40


def test_long_split_is_deterministic(tmp_path, demo_corpus):
    run(tmp_path / "a", *DEMO_ARGS, "--test-long", "200", "--long-min-len", "40",
        "--long-max-len", "60")
    for name in ("test_long.en", "test_long.de"):
        assert sha256(tmp_path / "a" / name) == sha256(demo_corpus / name)
    run(tmp_path / "b", *SMALL_ARGS, "--test-long", "20")
    run(tmp_path / "c", *SMALL_ARGS[:1], "8", *SMALL_ARGS[2:], "--test-long", "20")
    assert lines(tmp_path / "b" / "test_long.en") != lines(tmp_path / "c" / "test_long.en")


def test_long_split_must_be_longer_than_training(tmp_path):
    bad = run(tmp_path, *SMALL_ARGS, "--test-long", "5", "--long-min-len", "20", check=False)
    assert bad.returncode == 2 and "must exceed --max-len" in bad.stderr
    bad = run(tmp_path, *SMALL_ARGS, "--test-long", "5", "--long-min-len", "30",
              "--long-max-len", "25", check=False)
    assert bad.returncode == 2 and "below --long-min-len" in bad.stderr


def test_long_split_translations_match_clause_by_clause(demo_corpus):
    """Every connective of a long English sentence has its German counterpart: the same
    number of coordinated sentences (", and" / ", und"), subordinate clauses and "and"s."""
    pairs = zip(lines(demo_corpus / "test_long.en"), lines(demo_corpus / "test_long.de"))
    words = {"and": "und", "because": "weil", "while": "während", "although": "obwohl",
             "that": "dass"}
    coordinated = 0
    for en, de in pairs:
        assert en.endswith(".") and de.endswith(".") and not de[0].islower()
        en_words, de_words = re.findall(r"\w+", en.lower()), re.findall(r"\w+", de.lower())
        for en_word, de_word in words.items():
            assert en_words.count(en_word) == de_words.count(de_word), (en, de)
        assert en.count(", and ") == de.count(", und ")
        coordinated += en.count(", and ") > 0
        # German puts a comma before every subordinate clause, except right after the
        # "und" of a coordinated sentence that starts with one ("..., und weil ...").
        for conj in ("weil", "während", "obwohl", "dass"):
            assert de.count(f" {conj} ") == (de.count(f", {conj} ")
                                             + de.count(f", und {conj} ")), (en, de)
    assert coordinated > 100  # coordination and subordination are both used


def test_constructed_long_sentence(toy):
    """German word order in each part of a joined sentence, for hand-built clauses."""
    sleeps, saw, laughed = toy.INTRANSITIVE[0], toy.TRANSITIVE[0], toy.INTRANSITIVE[1]
    dog = toy.Clause("the dog", "der Hund", False, sleeps, past=False, neg=False)
    cat = toy.Clause("the cat", "die Katze", False, saw, past=True, neg=False,
                     en_rest=["the bird"], de_mid=["den Vogel"])
    children = toy.Clause("the children", "die Kinder", True, laughed, past=True, neg=True,
                          de_mid=["nicht"])
    en, de = toy.subordinate(dog.english(), dog.german("main"), ("because", "weil"), cat)
    # After "und", a fronted adverbial still puts the finite verb second.
    en, de = toy.coordinate(en, de, ["yesterday", ","] + children.english(),
                            ["gestern"] + children.german("inv"))
    assert toy.finish(en, ".") == ("The dog sleeps because the cat saw the bird, and "
                                   "yesterday, the children didn't laugh.")
    assert toy.finish(de, ".") == ("Der Hund schläft, weil die Katze den Vogel gesehen hat, "
                                   "und gestern haben die Kinder nicht gelacht.")
    assert toy.n_words(en) == 15
    # A plain second sentence keeps subject-verb order after "und"; a subordinate clause
    # that follows a coordinated sentence is verb-final.
    en, de = toy.coordinate(dog.english(), dog.german("main"), cat.english(), cat.german("main"))
    en, de = toy.subordinate(en, de, ("although", "obwohl"), children)
    assert toy.finish(en, ".") == ("The dog sleeps, and the cat saw the bird although the "
                                   "children didn't laugh.")
    assert toy.finish(de, ".") == ("Der Hund schläft, und die Katze hat den Vogel gesehen, "
                                   "obwohl die Kinder nicht gelacht haben.")
