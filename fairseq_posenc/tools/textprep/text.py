"""Text processing of the preparation: sacremoses tokenization with joiner marks, cleaning,
subword-nmt and SentencePiece, over a chunked pool of worker processes; and the inverse for
the recipes (:func:`detokenize`), and the same encoding for new text (:func:`encode`).

Decisions:

* sacremoses ``MosesTokenizer(lang)`` with aggressive hyphen splitting (``-a``) and no XML
  escaping (``-x``), as fairseq's prepare-wmt14en2de.sh; each token that was attached to the
  previous one in the raw text is marked with :data:`JOINER`, so that the output joins back
  to exactly the raw text it is scored against.
* Data in an existing model's vocabulary (:mod:`.vocabulary`) is tokenized as that model's
  data was: plain Moses (:class:`Moses` without joiners, escaping and ``-a`` as flags), which
  the Moses detokenizer undoes with losses (spacing around some punctuation).
* No punctuation normalization: it rewrites typographic quotes, dashes and ellipses, which
  the references keep. SentencePiece runs without Unicode normalization for the same reason.
* Cleaning works on the tokens before BPE, so that BPE is learned on the data that is kept.
* Large files go through :func:`map_file`: chunks of lines to a ``multiprocessing`` pool,
  results written in order, the line count checked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .files import (PrepareError, atomic_output, count_lines, last_lines, open_text, progress,
                    sanitize)

CHUNK_LINES = 2000  # lines per task sent to a tokenizer worker

#: Per-process state of the pool's workers (set up by the ``_init_*`` functions).
_WORKER: dict = {}

#: Marks a token that nothing separated from the previous one in the raw text, so that the
#: tokens detokenize to exactly that text (the joiner of OpenNMT's tokenizer, U+FFED).
JOINER = "\uffed"
#: The subword-nmt path's tokenization, as bpe.json and the manifest record it (datasets
#: prepared before it record none: they detokenize with sacremoses, which loses „ “ etc.).
TOKENIZER = "sacremoses(-a, no escaping)+joiner"


@dataclasses.dataclass(frozen=True)
class Moses:
    """How sacremoses tokenizes. ``joiners``: the preparation's own tokens, each attached one
    marked with :data:`JOINER` (``-a``, no escaping: exactly invertible). Without them: plain
    Moses, as an existing model's data was made (fairseq's WMT recipes run ``tokenizer.perl
    -a`` with its default escaping); ``escape`` XML-escapes ``& | < > ' " [ ]``,
    ``aggressive_dash_splits`` (``-a``) writes a hyphen inside a word as `` @-@ ``."""

    joiners: bool = True
    escape: bool = False
    aggressive_dash_splits: bool = True

    def __post_init__(self) -> None:
        if self.joiners and (self.escape or not self.aggressive_dash_splits):
            raise ValueError("joiner marks are made with -a and without escaping")

    @property
    def name(self) -> str:
        """bpe.json's ``tokenizer``, by which :func:`detokenize` undoes it."""
        if self.joiners:
            return TOKENIZER
        return (f"sacremoses({'-a' if self.aggressive_dash_splits else 'no -a'}, "
                f"{'escaping' if self.escape else 'no escaping'})")


#: The preparation's own tokenization.
JOINED = Moses()
#: Plain Moses tokenizations by their bpe.json names.
PLAIN_MOSES = {m.name: m for m in (Moses(False, e, a) for e in (True, False)
                                   for a in (True, False))}


def mark_joints(raw: str, tokens: Sequence[str]) -> List[str]:
    """``tokens`` of ``raw`` (``MosesTokenizer.tokenize(escape=False)``), each prefixed with
    :data:`JOINER` when it directly follows the previous one in ``raw``. The hyphen that
    ``aggressive_dash_splits`` writes as ``@-@`` is the raw ``-``. A token that is not a
    substring of ``raw`` (nothing in sacremoses makes one from text without control
    characters) is kept as a word of its own."""
    out: List[str] = []
    pos = 0
    for token in tokens:
        text = "-" if token == "@-@" else token
        at = raw.find(text, pos)
        if at < 0:
            out.append(token)
            continue
        out.append(JOINER + text if out and at == pos else text)
        pos = at + len(text)
    return out


def join_marked(tokens: Sequence[str]) -> str:
    """The inverse of :func:`mark_joints`: a token starting with :data:`JOINER` is attached
    to the previous one. A joiner anywhere else (model output can have one) is dropped."""
    words: List[str] = []
    for token in tokens:
        attached = token.startswith(JOINER) and words
        token = token.replace(JOINER, "")
        if attached:
            words[-1] += token
        elif token:
            words.append(token)
    return " ".join(words)


def _init_worker(lang: str, tokenize: bool, moses: Moses = JOINED) -> None:
    from sacremoses import MosesTokenizer

    _WORKER["tok"] = MosesTokenizer(lang=lang) if tokenize else None
    _WORKER["moses"] = moses


def _process_chunk(lines: List[str]) -> List[str]:
    tok, moses = _WORKER["tok"], _WORKER["moses"]
    out = []
    for line in lines:
        text = " ".join(sanitize(line).split())
        if tok is not None and moses.joiners:
            text = text.replace(JOINER, "\u25a0")  # a raw joiner would be read as a mark
            tokens = tok.tokenize(text, aggressive_dash_splits=True, return_str=False,
                                  escape=False)
            text = " ".join(mark_joints(text, tokens))
        elif tok is not None:
            text = tok.tokenize(text, aggressive_dash_splits=moses.aggressive_dash_splits,
                                return_str=True, escape=moses.escape)
        out.append(text)
    return out


def _chunks(path: Path, size: int = CHUNK_LINES) -> Iterator[List[str]]:
    with open_text(path) as f:
        chunk = []
        for line in f:
            chunk.append(line)
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def moses_process_lines(lines: Sequence[str], lang: str, tokenize: bool = True,
                        moses: Moses = JOINED) -> List[str]:
    """Clean up whitespace (and tokenize) lines in this process, as the pipeline does."""
    key = (lang, tokenize, moses)
    if _WORKER.get("key") != key:
        _init_worker(lang, tokenize, moses)
        _WORKER["key"] = key
    return _process_chunk(list(lines))


def map_file(src: Path, out: Path, init: Callable[..., None], initargs: tuple,
             process: Callable[[List[str]], List[str]], workers: int, what: str,
             chunk_lines: int = CHUNK_LINES) -> int:
    """``out``'s lines = ``process(chunk)`` over ``src``'s chunks of ``chunk_lines`` lines, in
    order, with ``workers`` processes (each set up by ``init(*initargs)``) and a progress
    bar; the line count must not change. Returns it."""
    n = 0
    n_in = count_lines(src)
    with atomic_output(out) as tmp, open_text(tmp, "w") as fout, progress(
            n_in, f"{what} {src.name}") as bar:
        if workers <= 1:
            init(*initargs)
            results: Iterable[List[str]] = map(process, _chunks(src, chunk_lines))
            pool = None
        else:
            import multiprocessing

            pool = multiprocessing.Pool(workers, initializer=init, initargs=initargs)
            results = pool.imap(process, _chunks(src, chunk_lines), chunksize=1)
        try:
            for chunk in results:
                for line in chunk:
                    fout.write(line + "\n")
                n += len(chunk)
                bar.update(len(chunk))
        except BaseException:
            if pool is not None:
                pool.terminate()
            raise
        finally:
            if pool is not None:
                pool.close()
                pool.join()
    if n != n_in:
        raise PrepareError(f"{what} turned {src} ({n_in} lines) into {n} lines: please report "
                           "this")
    return n


def _init_tokenizer(lang: str, tokenize: bool, moses: Moses = JOINED) -> None:
    _init_worker(lang, tokenize, moses)
    _WORKER["key"] = (lang, tokenize, moses)


def moses_process_file(src: Path, out: Path, lang: str, tokenize: bool, workers: int,
                       moses: Moses = JOINED) -> int:
    """Whitespace clean-up (+ sacremoses tokenization as ``moses`` says: with joiners by
    default) of a file, with ``workers`` processes."""
    return map_file(src, out, _init_tokenizer, (lang, tokenize, moses), _process_chunk,
                    workers, "tokenize")


def _init_bpe(codes: Path, vocab: Optional[Path], threshold: Optional[int]) -> None:
    from subword_nmt.apply_bpe import BPE, read_vocabulary

    vocabulary = None
    if vocab is not None:
        with open(vocab, encoding="utf-8") as v:
            vocabulary = read_vocabulary(v, threshold)
    with open(codes, encoding="utf-8") as c:
        _WORKER["bpe"] = BPE(c, vocab=vocabulary)


def _bpe_chunk(lines: List[str]) -> List[str]:
    bpe = _WORKER["bpe"]
    return [bpe.process_line(line.rstrip("\n")) for line in lines]


#: Why :func:`clean_corpus` drops a pair, by the :class:`Cleaning` field that decides it.
@dataclasses.dataclass(frozen=True)
class Cleaning:
    """Which training pairs are kept: both sides of ``min_len`` to ``max_len`` tokens (None:
    no limit), the longer side at most ``max_ratio`` times the shorter (None: no ratio
    filter), no token over ``max_word_length`` characters (None: any). ``rule``: whose rule
    this is; ``paper_pairs``: the training pairs the paper reports, if it does."""

    min_len: int = 1
    max_len: Optional[int] = None
    max_ratio: Optional[float] = None
    max_word_length: Optional[int] = None
    rule: str = ""
    paper_pairs: Optional[int] = None


DROP_REASONS = {"min_len": "a side shorter than min_len tokens",
                "max_len": "a side longer than max_len tokens",
                "max_ratio": "length ratio over max_ratio",
                "max_word_length": "a token longer than max_word_length characters"}


def clean_corpus(
    inputs: Tuple[Path, Path],
    outputs: Tuple[Path, Path],
    cleaning: Cleaning,
    corpora: Sequence[Tuple[str, int]] = (),
    reasons: Optional[Dict[str, int]] = None,
) -> Tuple[int, int, Dict[str, Dict[str, int]]]:
    """Keep the pairs of a pair of tokenized files that ``cleaning`` keeps (whitespace
    collapsed). ``corpora``: (name, pairs) of the consecutive corpora the files hold.
    Returns (read, kept, {corpus: {"raw": n, "kept": k}}); ``reasons``, when given, gets
    the number of pairs dropped by each rule (the first that drops a pair), by
    :data:`DROP_REASONS`' names."""
    c = cleaning
    dropped = dict.fromkeys(DROP_REASONS.values(), 0)
    per_corpus = {name: {"raw": n, "kept": 0} for name, n in corpora}
    # the corpus of each line, lazily (a list would hold one entry per training pair)
    corpus_at = itertools.chain.from_iterable(itertools.repeat(name, n) for name, n in corpora)
    read = kept = 0
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(atomic_output(o)) for o in outputs]
        fa, fb = (stack.enter_context(open_text(p)) for p in inputs)
        oa, ob = (stack.enter_context(open_text(t, "w")) for t in tmps)
        for a, b in zip(fa, fb):
            read += 1
            corpus = next(corpus_at, None)
            wa, wb = a.split(), b.split()
            na, nb = len(wa), len(wb)
            if na < c.min_len or nb < c.min_len:
                dropped[DROP_REASONS["min_len"]] += 1
                continue
            if c.max_len is not None and (na > c.max_len or nb > c.max_len):
                dropped[DROP_REASONS["max_len"]] += 1
                continue
            if c.max_ratio is not None and (na / nb > c.max_ratio or nb / na > c.max_ratio):
                dropped[DROP_REASONS["max_ratio"]] += 1
                continue
            if c.max_word_length is not None and any(
                    len(w) > c.max_word_length for w in (*wa, *wb)):
                dropped[DROP_REASONS["max_word_length"]] += 1
                continue
            oa.write(" ".join(wa) + "\n")
            ob.write(" ".join(wb) + "\n")
            kept += 1
            if corpus is not None:
                per_corpus[corpus]["kept"] += 1
    if reasons is not None:
        reasons.update(dropped)
    return read, kept, per_corpus


def learn_subword_nmt(
    inputs: Sequence[Path], codes: Path, vocabs: Sequence[Path], merges: int, workers: int
) -> int:
    """subword-nmt learn-joint-bpe-and-vocab (its own function, argument parser and all)."""
    from subword_nmt import learn_joint_bpe_and_vocab as lj

    with contextlib.ExitStack() as stack:
        tmp_codes = stack.enter_context(atomic_output(codes))
        tmp_vocabs = [stack.enter_context(atomic_output(v)) for v in vocabs]
        args = lj.create_parser().parse_args(
            ["--input", *map(str, inputs), "--output", str(tmp_codes), "--symbols", str(merges)]
            + ["--write-vocabulary", *map(str, tmp_vocabs), "--num-workers", str(workers)]
        )
        for f in [*args.input, args.output, *args.vocab]:
            f.close()  # argparse.FileType opened them; subword-nmt reopens them by name
        lj.learn_joint_bpe_and_vocab(args)
    with open_text(codes) as f:
        return sum(1 for line in f if not line.startswith("#version"))


def apply_subword_nmt(
    src: Path, out: Path, codes: Path, vocab: Optional[Path], threshold: Optional[int],
    workers: int
) -> None:
    """subword-nmt apply-bpe -c codes --vocabulary vocab --vocabulary-threshold T (its
    ``BPE.process_line``, over chunks in ``workers`` processes, with a progress bar);
    ``vocab`` None: no vocabulary filter."""
    map_file(src, out, _init_bpe, (codes, vocab, threshold), _bpe_chunk, workers,
             "subword-nmt apply-bpe")


def train_sentencepiece(
    inputs: Sequence[Path], model: Path, vocab_size: int, model_type: str, sample: int, workers: int
) -> None:
    import sentencepiece as spm

    with atomic_output(model) as tmp_model, atomic_output(model.with_suffix(".vocab")) as tmp_vocab:
        prefix = tmp_model.with_name(f".spm.train.{os.getpid()}")
        spm.SentencePieceTrainer.train(
            input=[str(p) for p in inputs],
            model_prefix=str(prefix),
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,
            # no NFKC: it would turn "…" into "...", and the output must come back to the
            # raw references
            normalization_rule_name="identity",
            input_sentence_size=sample,
            shuffle_input_sentence=True,
            hard_vocab_limit=False,
            num_threads=max(1, workers),
            minloglevel=1,
        )
        os.replace(f"{prefix}.model", tmp_model)
        os.replace(f"{prefix}.vocab", tmp_vocab)


def _init_spm(model: Path, threads: int) -> None:
    import sentencepiece as spm

    _WORKER["spm"] = (spm.SentencePieceProcessor(model_file=str(model)), threads)


def _spm_chunk(lines: List[str]) -> List[str]:
    sp, threads = _WORKER["spm"]
    pieces = sp.encode([line.rstrip("\n") for line in lines], out_type=str, num_threads=threads)
    return [" ".join(p) for p in pieces]


def apply_sentencepiece(src: Path, out: Path, model: Path, workers: int) -> None:
    """spm_encode --output_format piece, in this process: SentencePiece's own threads do
    the work (``workers`` of them) on chunks of 10,000 lines."""
    map_file(src, out, _init_spm, (model, workers), _spm_chunk, 1, "sentencepiece",
             chunk_lines=10000)


def binarize(src_lang: str, tgt_lang: str, train: str, valid: str, tests: Sequence[str],
             dest: Path, workers: int, logfile: Path,
             dictionaries: Optional[Tuple[Path, Path]] = None) -> None:
    """``fairseq-preprocess --joined-dictionary`` of BPE-encoded ``PREFIX.LANG`` files into
    ``dest`` (written whole or not at all); the test prefixes become fairseq's ``test``,
    ``test1``, ... ``dictionaries``: an existing model's (source, target) dictionaries
    instead of one built from the training split: ``--srcdict --tgtdict``, or, when both
    are the same file, ``--joined-dictionary --srcdict`` (fairseq-preprocess's joined
    dictionary given as ``--srcdict``). A subprocess (fairseq's main configures logging
    and may exit), its output in ``logfile``, whose end a failure quotes."""
    if dictionaries is None:
        dicts = ["--joined-dictionary"]
    elif dictionaries[0] == dictionaries[1]:
        dicts = ["--joined-dictionary", "--srcdict", str(dictionaries[0])]
    else:
        dicts = ["--srcdict", str(dictionaries[0]), "--tgtdict", str(dictionaries[1])]
    cmd = [
        sys.executable, "-m", "fairseq_cli.preprocess",
        "--source-lang", src_lang, "--target-lang", tgt_lang,
        "--trainpref", train, "--validpref", valid, "--testpref", ",".join(tests),
        *dicts, "--workers", str(workers),
    ]  # fmt: skip
    with atomic_output(dest) as tmp:
        with open(logfile, "w") as lf:
            proc = subprocess.run([*cmd, "--destdir", str(tmp)], stdout=lf,
                                  stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            tail = "\n".join(last_lines(logfile, 20))
            raise PrepareError(
                f"fairseq-preprocess failed (exit {proc.returncode}); {logfile} ends with:\n"
                f"{tail}")


def subword_settings(bpe: dict, langs: Sequence[str], moses: Moses = JOINED) -> dict:
    """``bpe/bpe.json``: the subword settings (``bpe``, with ``merges`` and
    ``vocabulary_threshold``, or SentencePiece's) and how the text was tokenized
    (``moses``, for subword-nmt), which :func:`encode` and :func:`detokenize` read back."""
    tokenize = bpe["bpe"] == "subword-nmt"  # SentencePiece works on the raw text
    call = (f"MosesTokenizer(lang).tokenize(aggressive_dash_splits="
            f"{moses.aggressive_dash_splits}, escape={moses.escape})")
    return {
        **bpe,
        "langs": list(langs),
        "moses_tokenize": tokenize,
        "tokenizer": moses.name if tokenize else None,
        "sacremoses": {
            "normalizer": None,
            "tokenizer": ((f"{call}, attached tokens marked with {JOINER}" if moses.joiners
                           else call) if tokenize else None),
        },
    }


def moses_of(settings: dict) -> Optional[Moses]:
    """The Moses tokenization of bpe.json's ``settings`` (None: no Moses step); data
    prepared before the tokenizer was recorded was tokenized with joiners."""
    if not settings["moses_tokenize"]:
        return None
    return PLAIN_MOSES.get(settings.get("tokenizer"), JOINED)


def load_subword_settings(bpe_dir: str | os.PathLike) -> dict:
    """``bpe_dir/bpe.json`` (:func:`subword_settings`) as written by the preparation."""
    return json.loads((Path(bpe_dir) / "bpe.json").read_text())


_DETOK: dict = {}  # sacremoses detokenizers by language, made once


def detokenize(lines: Iterable[str], lang: str, bpe: str = "subword-nmt",
               tokenizer: Optional[str] = TOKENIZER) -> List[str]:
    """Detokenize fairseq-generate hypotheses (after ``--remove-bpe``/``--post-process``).

    ``bpe`` is the manifest's ``bpe`` ("subword-nmt": the tokens are joined as their
    joiners say, the exact inverse of the preparation's tokenizer; "sentencepiece": the
    text is already detokenized by fairseq's sentencepiece post-processing and only
    stripped). ``tokenizer``: the manifest's; plain Moses (:data:`PLAIN_MOSES`: data in an
    existing model's vocabulary) and None (datasets prepared before joiners) are undone by
    sacremoses' detokenizer, unescaping what was escaped: lossy (spacing around some
    punctuation, „ “ and times do not always come back)."""
    if bpe in ("sentencepiece", "spm"):
        return [line.strip() for line in lines]
    if bpe not in ("subword-nmt", "subword_nmt"):
        raise ValueError(f"unknown bpe {bpe!r}: expected 'subword-nmt' or 'sentencepiece'")
    if tokenizer == TOKENIZER:
        return [join_marked(line.split()) for line in lines]
    if tokenizer is not None and tokenizer not in PLAIN_MOSES:
        raise ValueError(f"unknown tokenizer {tokenizer!r}: expected one of "
                         f"{[TOKENIZER, *PLAIN_MOSES]}")
    unescape = tokenizer is not None and PLAIN_MOSES[tokenizer].escape
    if lang not in _DETOK:
        from sacremoses import MosesDetokenizer

        _DETOK[lang] = MosesDetokenizer(lang=lang)
    detok = _DETOK[lang]
    return [detok.detokenize(line.split(), unescape=unescape) for line in lines]


def encode(lines: Iterable[str], lang: str, bpe_dir: str | os.PathLike) -> List[str]:
    """Encode raw text as the preparation encoded the data in ``bpe_dir``'s dataset."""
    bpe_dir = Path(bpe_dir)
    settings = load_subword_settings(bpe_dir)
    moses = moses_of(settings)
    text = moses_process_lines([sanitize(x) for x in lines], lang, moses is not None,
                               moses or JOINED)
    # the pipeline's own per-chunk functions, run here on one chunk
    if settings["bpe"] == "subword-nmt":
        threshold = settings["vocabulary_threshold"]  # None: applied without a vocabulary
        _init_bpe(bpe_dir / "codes", None if threshold is None else bpe_dir / f"vocab.{lang}",
                  threshold)
        return _bpe_chunk(text)
    _init_spm(bpe_dir / "spm.model", 1)
    return _spm_chunk(text)
