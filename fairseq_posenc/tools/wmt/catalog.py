"""The WMT datasets of the papers, as data: corpus URLs, the archives' published sizes and
hashes, the member files inside them, each dataset's corpora, validation and test sets, and
each paper's cleaning rule.

Nothing here runs; :mod:`fairseq_posenc.tools.wmt.pipeline` reads it. examples/wmt/README.md
("Training corpora") lists these URLs and archive layouts for users; why each dataset has
these sets: examples/wmt/README.md and :mod:`fairseq_posenc.tools.wmt`.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

from ..textprep.text import Cleaning


EUROPARL_V7 = "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz"
COMMONCRAWL = "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz"
NC_V10 = "http://www.statmt.org/wmt15/training-parallel-nc-v10.tgz"
NC_V12 = "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz"
NC_V13 = "http://data.statmt.org/wmt18/translation-task/training-parallel-nc-v13.tgz"
# WMT17's own copy (WMT18's rapid2016.tgz is another file: 161,050,516 bytes)
RAPID_2016 = "http://data.statmt.org/wmt17/translation-task/rapid2016.tgz"
PARACRAWL_V1 = (
    "https://s3.amazonaws.com/web-language-models/paracrawl/release1/"
    "paracrawl-release1.en-{x}.zipporah0-dedup-clean.tgz"
)
#: UFAL's CzEng 1.6 -> 1.7 converter (public; the data itself needs registration): a Perl
#: script whose ``qw{...}`` lists the blocks that CzEng 1.7 leaves out.
CZENG17_FILTER = "http://ufal.mff.cuni.cz/czeng/download.php?f=convert_czeng16_to_17.pl.zip"


@dataclasses.dataclass(frozen=True)
class PublishedArchive:
    """The size and a hash of an archive as published; sha256 where one is listed, else
    sha1."""

    size: int
    sha256: Optional[str] = None
    sha1: Optional[str] = None


#: Every training archive, as published. sha256 and sizes: TensorFlow Datasets'
#: ``url_checksums/wmt15_translate.txt``, ``wmt17_translate.txt``, ``wmt18_translate.txt``;
#: WMT17's Rapid 2016, which TFDS takes from WMT18: sha1 and size from gluon-nlp's
#: ``scripts/datasets/url_checksums/wmt.txt``. Checked on downloads from these URLs.
PUBLISHED_ARCHIVES: Dict[str, PublishedArchive] = {
    EUROPARL_V7: PublishedArchive(
        657_632_379, sha256="0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7"),
    COMMONCRAWL: PublishedArchive(
        918_311_367, sha256="c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5"),
    NC_V10: PublishedArchive(
        125_136_590, sha256="11e053e7ea29e87e69a1ad05e61cb559820947ecec144ea8c1d6cf05017c9602"),
    NC_V12: PublishedArchive(
        168_591_139, sha256="2b45f30ef1d550d302fd17dd3a5cbe19134ccc4c2cf50c2dae534aee600101a2"),
    NC_V13: PublishedArchive(
        113_157_482, sha256="17992b7e919cfb754c60f4e754148bc23b80706ad0ed7b34150831a554b40c91"),
    RAPID_2016: PublishedArchive(163_416_042, sha1="8b173ce0bc77f2a1a57c8134143e3b5ae228a6e2"),
    PARACRAWL_V1.format(x="de"): PublishedArchive(
        1_918_708_277,
        sha256="435ce65e26ed2d44dd0d627f0b558d25bfe31d9ccb35caef050938745c23ea8c"),
    PARACRAWL_V1.format(x="cs"): PublishedArchive(
        299_052_360, sha256="221f88bac9f48ed6ef94bad5490890066f508be00e8f102cf19edf2a1413c350"),
    CZENG17_FILTER: PublishedArchive(
        2_544_381, sha256="e66466e00aecd392daaf547275590a9264bbc6aed70118c5c7cfd6946daf24ac"),
}


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A training corpus: per language pair ("de-en"), the archive URL and the member
    prefix inside it (the files are ``PREFIX.en`` and ``PREFIX.de``)."""

    title: str
    files: Dict[str, Tuple[str, str]]


CORPORA: Dict[str, Corpus] = {
    "europarl_v7": Corpus(
        "Europarl v7",
        {p: (EUROPARL_V7, f"training/europarl-v7.{p}") for p in ("de-en", "cs-en")},
    ),
    "commoncrawl": Corpus(
        "Common Crawl", {p: (COMMONCRAWL, f"commoncrawl.{p}") for p in ("de-en", "cs-en")}
    ),
    "nc_v10": Corpus(
        "News Commentary v10",
        {p: (NC_V10, f"news-commentary-v10.{p}") for p in ("de-en", "cs-en")},
    ),
    "nc_v12": Corpus(
        "News Commentary v12",
        {p: (NC_V12, f"training/news-commentary-v12.{p}") for p in ("de-en", "cs-en")},
    ),
    "nc_v13": Corpus(
        "News Commentary v13",
        {
            p: (NC_V13, f"training-parallel-nc-v13/news-commentary-v13.{p}")
            for p in ("de-en", "cs-en")
        },
    ),
    "rapid_2016": Corpus("Rapid 2016", {"de-en": (RAPID_2016, "rapid2016.de-en")}),
    "paracrawl_v1": Corpus(
        "ParaCrawl v1 (zipporah0-dedup-clean)",
        {
            f"{x}-en": (
                PARACRAWL_V1.format(x=x),
                f"paracrawl-release1.en-{x}.zipporah0-dedup-clean",
            )
            for x in ("de", "cs")
        },
    ),
}


#: Chen 2021a and DIET ran tensor2tensor, whose ``compile_data`` drops a pair with an empty
#: side and nothing else (its ``max_length`` 256 then skips longer examples while training;
#: the recipes do not set fairseq's ``--max-source/target-positions 256``, which would also
#: limit decoding). No length-ratio filter: that is fairseq's prepare-wmt14en2de.sh
#: (clean-corpus-n.perl -ratio 1.5 1 250), in no paper.
TENSOR2TENSOR_CLEANING = Cleaning(
    rule="tensor2tensor's compile_data (Chen 2021a, DIET): pairs with an empty side dropped")
#: AT5's Table 5 bins its WMT17 training corpus by sentence length: 5,850,267 pairs, the
#: longest bin (100, 120]. Not stated: the unit or the side; here tokens of both sides.
AT5_CLEANING = Cleaning(
    max_len=120, paper_pairs=5_850_267,
    rule="AT5 Table 5: 5,850,267 pairs, none over 120 tokens (unit and side not stated: "
         "tokens of both sides here)")


@dataclasses.dataclass(frozen=True)
class EvalSet:
    testset: str  # newstest name, used in refs/ and the manifest
    sacrebleu: str  # sacreBLEU test-set name


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    name: str
    other: str  # the non-English language; source = en, target = other
    corpora: Tuple[str, ...]
    valid: EvalSet
    tests: Tuple[EvalSet, ...]
    paper: str
    paracrawl: bool = False  # --paracrawl allowed
    czeng: bool = False  # --czeng allowed
    cleaning: Cleaning = TENSOR2TENSOR_CLEANING

    @property
    def langs(self) -> Tuple[str, str]:
        return ("en", self.other)

    @property
    def pair(self) -> str:
        """Language pair as the corpora name it."""
        return f"{self.other}-en"

    @property
    def test_splits(self) -> Dict[str, str]:
        """fairseq split of each test set: ``fairseq-preprocess --testpref a,b,c`` names
        them ``test``, ``test1``, ``test2`` in that order."""
        return {e.testset: "test" if i == 0 else f"test{i}" for i, e in enumerate(self.tests)}


NT13 = EvalSet("newstest2013", "wmt13")
NT14 = EvalSet("newstest2014", "wmt14/full")
NT15 = EvalSet("newstest2015", "wmt15")
NT16 = EvalSet("newstest2016", "wmt16")
NT17 = EvalSet("newstest2017", "wmt17")
NT18 = EvalSet("newstest2018", "wmt18")

DATASETS: Dict[str, DatasetSpec] = {
    "wmt15_en_de": DatasetSpec(
        "wmt15_en_de",
        "de",
        ("europarl_v7", "commoncrawl", "nc_v10"),
        valid=NT13,
        tests=(NT15,),
        paper="Chen et al. 2021a, Table 6 (newstest2015, uncased BLEU); validation "
        "newstest2013 as Tensor2Tensor",
    ),
    "wmt17_en_de": DatasetSpec(
        "wmt17_en_de",
        "de",
        ("europarl_v7", "commoncrawl", "nc_v12", "rapid_2016"),
        valid=NT14,
        tests=(NT14, NT15, NT16, NT17),
        paper="Wu et al. 2021 (AT5), Tables 5-6: validation newstest2014, tests "
        "newstest2014-2017",
        cleaning=AT5_CLEANING,
    ),
    "wmt18_en_de": DatasetSpec(
        "wmt18_en_de",
        "de",
        ("europarl_v7", "commoncrawl", "nc_v13"),
        valid=NT13,
        tests=(NT18,),
        paper="Chen et al. 2021b (DIET), Table 4 (newstest2018, sacreBLEU default); "
        "validation newstest2013 as Tensor2Tensor",
        paracrawl=True,
    ),
    "wmt18_en_cs": DatasetSpec(
        "wmt18_en_cs",
        "cs",
        ("europarl_v7", "commoncrawl", "nc_v13"),
        valid=NT13,
        tests=(NT18, NT15),
        paper="Chen et al. 2021b (DIET), Table 4 (newstest2018) and Chen et al. 2021a, "
        "Table 6 EN-CS (newstest2015, uncased); validation newstest2013 as Tensor2Tensor",
        paracrawl=True,
        czeng=True,
    ),
}
