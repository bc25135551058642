"""Download and prepare the WMT translation data of the papers, for fairseq.

One command per dataset (:mod:`.cli`; ``posenc-prepare-wmt`` once installed)::

    python examples/wmt/prepare.py DATASET --dest DIR [options]
    python examples/wmt/prepare.py --list

downloads the training corpora (HTTP with resume, size and archive checks, sha256 recorded),
extracts the needed files, tokenizes them with sacremoses, cleans them
(each dataset's paper's rule), learns and applies joint BPE with subword-nmt (or a joint
SentencePiece model), takes the validation and test sets from sacreBLEU, and binarizes
everything with ``fairseq-preprocess --joined-dictionary``. Source language = en, target =
de or cs; fairseq's translation task loads the other direction (de->en, cs->en) from the same
files, so one preparation serves both directions.

Datasets (corpus URLs and archive layouts: examples/wmt/README.md, "Training corpora"):

============  ===========================================  ==============  ======================
dataset       training corpora                             validation      test splits
============  ===========================================  ==============  ======================
wmt15_en_de   Europarl v7, Common Crawl, News Commentary   newstest2013    test = newstest2015
              v10                                          (wmt13)         (wmt15)
wmt17_en_de   Europarl v7, Common Crawl, NC v12, Rapid     newstest2014    test = newstest2014,
              2016                                         (wmt14/full)    test1 = 2015, test2 =
                                                                           2016, test3 = 2017
wmt18_en_de   Europarl v7, Common Crawl, NC v13            newstest2013    test = newstest2018
              (+ ParaCrawl v1 with --paracrawl)            (wmt13)         (wmt18)
wmt18_en_cs   Europarl v7, Common Crawl, NC v13            newstest2013    test = newstest2018,
              (+ CzEng 1.7 with --czeng PATH,              (wmt13)         test1 = newstest2015
              + ParaCrawl v1 with --paracrawl)                             (wmt18, wmt15)
============  ===========================================  ==============  ======================

(sacreBLEU test-set names in parentheses.) Why these sets:

* wmt15_en_de -- Chen et al. 2021a ("Demystifying the better performance of position
  encoding variants for Transformer"), Table 6 and Sec. 4.3: trained on WMT 2015 en-de, tested
  on newstest2015 (uncased BLEU). They follow Vaswani et al. 2017 with Tensor2Tensor, whose
  en-de problem validates on newstest2013: so do we.
* wmt17_en_de -- Wu et al. 2021 (AT5), "Machine Translation" section and Tables 5-6: trained
  on WMT 2017 en-de, newstest2014 as validation, newstest2015/2016/2017 as tests; their tables
  also report newstest2014, hence four test splits. newstest2014 is sacreBLEU's ``wmt14/full``
  (the full 3003-sentence set).
* wmt18_en_de -- Chen et al. 2021b (DIET), Table 4 and Appendix ("Translate"): Europarl v7,
  Common Crawl and News Commentary v13, tested on newstest2018 with default sacreBLEU.
  ParaCrawl v1 was part of the official WMT18 task but not of DIET's list: ``--paracrawl``
  adds it. Validation: newstest2013 (Tensor2Tensor, as DIET used).
* wmt18_en_cs -- DIET Table 4 (newstest2018) and Chen 2021a Table 6, whose EN-CS column is
  a WMT18-trained model tested on newstest2015: the preparation binarizes both, ``test`` =
  newstest2018 and ``test1`` = newstest2015. CzEng 1.7 needs registration, so it is optional:
  ``--czeng PATH`` adds a local copy (see below); ParaCrawl v1 via ``--paracrawl``.

The reverse directions use the same files: newstest2013-2018 hold the same sentence pairs in
sacreBLEU's en-X and X-en sets; the preparation checks this (manifest: ``reverse_identical``)
and warns if it ever does not hold.

Output (the contract with the training recipes, see examples/wmt/README.md)::

    DIR/bin/                 fairseq-preprocess output, joined dictionary, en -> de|cs;
                             splits train, valid, test, test1, ...
    DIR/refs/{testset}.{lang}  raw sacreBLEU source/reference text of every valid/test set
    DIR/bpe/                 codes + vocabularies (or spm.model), bpe.json, README
    DIR/manifest.json        what is where (splits -> test sets, corpora, counts, BPE)
    DIR/work/                intermediate files (may be deleted once bin/ exists)
    DIR/.stamps/             one JSON stamp per finished step

Processing, per language:

1. Text hygiene on reading: characters that some readers take as line breaks (``\\r``,
   ``\\v``, ``\\f``, ``\\x1c-\\x1e``, ``\\x85``, U+2028, U+2029; Common Crawl has some) become
   spaces, so every tool sees the same lines. Files are decoded as UTF-8 (invalid bytes
   replaced).
2. sacremoses ``MosesTokenizer(lang)`` with aggressive hyphen splitting (``-a``) and no XML
   escaping (``-x``), as fairseq's prepare-wmt14en2de.sh, each token that was attached to the
   previous one in the raw text marked with :data:`.text.JOINER`, so that the output joins back to
   exactly the raw form it is scored against. No punctuation normalization (it rewrites
   typographic quotes, dashes and ellipses, which the references keep). With ``--bpe
   sentencepiece`` no Moses step at all (SentencePiece works on raw text).
3. Cleaning, training data only, each dataset's paper's (:class:`.catalog.Cleaning`): whitespace
   collapsed; for tensor2tensor's papers (Chen 2021a, DIET) a pair with an empty side is
   dropped, nothing else; for AT5 also a pair with a side over 120 tokens (its Table 5:
   5,850,267 pairs, printed beside ours). No paper filters by length ratio (fairseq's
   prepare-wmt14en2de.sh does: ``--max-ratio 1.5 --max-len 250`` gives its rule).
   ``--min-len``/``--max-len``/``--max-ratio`` override. Applied to the tokens before BPE,
   so that BPE is learned on the data that is kept; raw and kept pairs per corpus go into
   the manifest. Validation and test sets are never filtered.
4. Joint BPE: ``subword-nmt learn-joint-bpe-and-vocab -s 32000`` on the cleaned training
   data of both languages, applied with ``--vocabulary-threshold 50`` (subword-nmt's README).
   ``--bpe sentencepiece``: one SentencePiece model (``--spm-model-type``, vocabulary size
   ``--bpe-size``) trained on both languages.
5. ``fairseq-preprocess --source-lang en --target-lang X --joined-dictionary --workers N``.

Robustness: downloads go to ``NAME.part`` and resume with HTTP Range (also after the
process was killed); the size is checked against Content-Length / Content-Range; every
archive is read through completely (gzip CRC) before use; a corrupt or truncated archive is
reported, deleted and fetched once more, then the run stops with a message saying what to do.
The sha256 of each finished download is stored in ``NAME.sha256`` and checked whenever a rerun
uses the file; a download from an official URL must also have the published size and hash
(:data:`.catalog.PUBLISHED_ARCHIVES`; ``--ignore-published-checksums`` accepts another). Each
step writes a stamp; a rerun skips steps whose stamp and outputs exist and whose inputs and
settings are unchanged. Every output file is written under a temporary name and renamed.
Parallel files whose line counts differ stop the run with a message naming both files and their
counts.

Offline use (tests, CI smoke runs, a local mirror): ``--mirror BASE`` (an http(s)/file URL
or a directory) fetches every URL from ``BASE/<host>/<path>`` (the layout of ``wget -x``),
including sacreBLEU's test-set tarballs. If ``BASE/SHA256SUMS`` exists, training archives must
match it; if ``BASE/MD5SUMS`` lists a sacreBLEU tarball, that md5 replaces the one built into
sacreBLEU (this is how :mod:`.fake_archives`' small fake tarballs pass sacreBLEU's check).
sacreBLEU itself still downloads, checks the md5, extracts and converts the SGML files. In
mirror mode sacreBLEU's cache defaults to ``DIR/sacrebleu`` so fake test sets never enter
``~/.sacrebleu``; ``--sacrebleu-dir`` sets it explicitly (default otherwise: ``$SACREBLEU``
or ``~/.sacrebleu``, sacreBLEU's own default).

CzEng (``--czeng PATH``): the directory of CzEng 1.6's plain-text export; only its
``data.plaintext-format/??train.gz`` files are read (lines
``ID<TAB>filter-score<TAB>Czech<TAB>English``). CzEng 1.7, WMT18's corpus, is CzEng 1.6 less
the blocks that UFAL's ``convert_czeng16_to_17.pl`` lists (:data:`.catalog.CZENG17_FILTER`, fetched
and applied); ``--czeng-release 1.6`` keeps them, as tensor2tensor's translate_encs_wmt32k.

Importable helpers for the recipes: :func:`.text.detokenize` (the inverse of step 2 for
fairseq-generate output after ``--remove-bpe``/``--post-process``), :func:`.text.encode`
(steps 1-4 for new text, from a ``bpe/`` directory), :func:`.manifest.load_manifest`.

Modules, one responsibility each: :mod:`.catalog` (datasets, corpora, URLs, published
sizes and hashes, cleaning rules: data only), :mod:`.common` (the settings, errors, log,
atomic outputs, stamps), :mod:`.download` (resumable verified downloads, extraction),
:mod:`.text` (tokenization, joiners, cleaning, BPE, the worker pool, detokenization),
:mod:`.testsets` (sacreBLEU's test sets), :mod:`.czeng` (CzEng), :mod:`.pipeline` (the
steps, in order, with their stamps), :mod:`.manifest` (manifest.json and bpe/), :mod:`.cli`
(the command line), :mod:`.fake_archives` (small fake archives for offline tests). This
package does not import them: ``import fairseq_posenc.tools.textprep.text`` loads what it needs.
"""
