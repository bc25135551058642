"""``--sentence``: raw text -> the model's source tokens -> encoder self-attention maps.

Text preparation must be how the data was made, or the picture is of tokens the model never
saw (a joiner-marked full stop and a bare one are different tokens). :func:`choose` picks it,
or refuses with the flag to pass:

* ``--bpe-dir DIR`` (the ``bpe/`` directory of ``posenc-prepare-corpus`` or
  ``posenc-prepare-wmt`` output): the preparation's own encoder
  (:func:`fairseq_posenc.tools.textprep.text.encode`); its ``bpe.json`` must list the source
  language.
* No preparation flag, and the data directory has a sibling ``bpe/bpe.json`` (the layout
  ``DEST/bin``, ``DEST/bpe`` of those tools): that directory, said in one line.
* ``--bpe-codes FILE`` (data made elsewhere): sacremoses tokenization without escaping
  (``sacremoses tokenize -x``), then subword-nmt BPE (with ``--bpe-vocab`` as ``apply-bpe
  --vocabulary``). Refused for data of those tools (a sibling ``bpe/bpe.json``, or
  joiner-marked tokens in the dictionary): their tokens carry joiner marks that plain
  tokenization does not make.
* ``--tokenized``: the sentence as already tokenized and BPE'd (what
  ``fairseq-interactive`` reads without ``--tokenizer``/``--bpe``), split on spaces.
* Nothing given: sacremoses tokenization only, refused when the dictionary holds subword
  units (tokens ending in ``@@``, SentencePiece pieces) or joiner-marked tokens.

A ``--segment-separator`` token in the text is kept whole: each segment is prepared on its
own and the segments are joined by the separator, as multi-sentence sources were built.

Tokens missing from the dictionary become ``<unk>`` (warned about, with a hint), because a
picture of ``<unk>`` is still a true picture of what the model does with that input.

The attention maps are the probabilities of the model's own self-attention modules in one
ordinary encoder forward: a forward pre-hook asks each layer's attention for per-head
weights (fairseq's encoder layer asks for none). Stock fairseq attention (input encodings)
returns head-averaged weights on its fused path, so for the capture it is sent down its
explicit path (``skip_embed_dim_check``, the flag fairseq itself tests to leave the fused
path); both paths compute the same attention.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from fairseq.data import Dictionary
from torch import Tensor, nn

from ..textprep.text import JOINER
from . import captions
from .load import LoadedModel, fail
from .records import HeatmapPanel, Picture, floats, layer_label

#: SentencePiece's word-start mark.
SPM_WORD = "\u2581"
#: Where posenc-prepare-corpus / posenc-prepare-wmt put the preparation, beside ``bin/``.
PREPARATION = Path("bpe") / "bpe.json"


@dataclass(frozen=True)
class Preparation:
    """How the sentence becomes tokens: the arguments of :func:`prepare`."""

    tokenized: bool = False
    bpe_dir: Optional[Path] = None
    bpe_codes: Optional[Path] = None
    bpe_vocab: Optional[Path] = None
    vocab_threshold: int = 1
    #: The line said when the preparation was found rather than given.
    note: Optional[str] = None


def sibling_preparation(data: Path) -> Optional[Path]:
    """``DEST/bpe`` for a data directory ``DEST/bin`` when ``DEST/bpe/bpe.json`` exists."""
    parent = data.parent if data.name not in ("", ".", "..") else data.resolve().parent
    return parent / PREPARATION.parent if (parent / PREPARATION).is_file() else None


def source_languages(bpe_dir: Path) -> list[str]:
    from ..textprep.text import load_subword_settings

    return list(load_subword_settings(bpe_dir).get("langs", []))


def choose(data: Path, dictionary: Dictionary, lang: str, *, tokenized: bool = False,
           bpe_dir: Optional[Path] = None, bpe_codes: Optional[Path] = None,
           bpe_vocab: Optional[Path] = None, vocab_threshold: int = 1) -> Preparation:
    """The preparation of the data in ``data`` (its source dictionary ``dictionary``, source
    language ``lang``) from the flags given, or the exit that names the flag to pass (see
    the module docstring)."""
    if tokenized:
        return Preparation(tokenized=True)
    found = sibling_preparation(data)
    dict_file = data / f"dict.{lang}.txt"
    symbols = dictionary.symbols[dictionary.nspecial:]
    joined = [s for s in symbols if s.startswith(JOINER)]
    subwords = [s for s in symbols if s.endswith("@@") or s.startswith(SPM_WORD)]
    if bpe_dir is not None or (bpe_codes is None and found is not None):
        given = bpe_dir is not None
        bpe_dir = bpe_dir if given else found
        flag = f"--bpe-dir {bpe_dir}"
        if not (bpe_dir / "bpe.json").is_file():
            raise fail(f"{flag} has no bpe.json; pass the bpe/ directory of "
                       "posenc-prepare-corpus or posenc-prepare-wmt output.")
        langs = source_languages(bpe_dir)
        if lang not in langs:
            other = f" ({found})" if found is not None and found != bpe_dir else ""
            raise fail(f"{flag} prepares {', '.join(langs) or 'no language'} (its bpe.json), "
                       f"not the source language {lang}: pass --bpe-dir the bpe/ directory "
                       f"of this model's data{other}, or --source-lang.")
        note = None if given else (
            f"posenc-inspect: preparing the sentence as the data was, with {found} "
            f"(found beside {data}; same as {flag})")
        return Preparation(bpe_dir=bpe_dir, note=note)
    if bpe_codes is not None:
        if found is not None:
            raise fail(f"{data} was made by posenc-prepare-corpus or posenc-prepare-wmt "
                       f"({found / 'bpe.json'}): its tokens carry joiner marks that "
                       "sacremoses and --bpe-codes do not make, so the sentence would not be "
                       f"tokenized as the training data was. Pass --bpe-dir {found} instead "
                       "of --bpe-codes (or neither: it is found by default).")
        if joined:
            raise fail(f"the source dictionary {dict_file} has joiner-marked tokens (e.g. "
                       f"{' '.join(joined[:3])}), as posenc-prepare-corpus and "
                       "posenc-prepare-wmt make them, which sacremoses and --bpe-codes do not "
                       "make. Pass --bpe-dir DIR, the bpe/ directory of that output, instead "
                       "of --bpe-codes.")
        return Preparation(bpe_codes=bpe_codes, bpe_vocab=bpe_vocab,
                           vocab_threshold=vocab_threshold)
    if joined:
        raise fail(f"the source dictionary {dict_file} has joiner-marked tokens (e.g. "
                   f"{' '.join(joined[:3])}): the data was made by posenc-prepare-corpus or "
                   "posenc-prepare-wmt. Pass --bpe-dir DIR, the bpe/ directory of that "
                   "output, or --tokenized for a sentence prepared already.")
    if subwords:
        raise fail(f"the source dictionary {dict_file} holds subword units ({len(subwords)} "
                   f"of {len(symbols)} tokens, e.g. {' '.join(subwords[:3])}): the sentence "
                   "must be split into subwords as the training data was. Pass --bpe-codes "
                   "FILE (the "
                   "subword-nmt codes; --bpe-vocab FILE too if apply-bpe used a vocabulary), "
                   "--bpe-dir DIR for posenc-prepare-corpus or posenc-prepare-wmt output, or "
                   "--tokenized for a sentence already split.")
    return Preparation()


def prepare(text: str, *, lang: Optional[str], tokenized: bool, bpe_codes: Optional[Path],
            bpe_vocab: Optional[Path], vocab_threshold: int,
            separator: Optional[str], bpe_dir: Optional[Path] = None) -> list[str]:
    """The sentence as the model's source tokens (without the final ``</s>``)."""
    if tokenized:
        return text.split()
    if bpe_dir is not None:
        if not (bpe_dir / "bpe.json").is_file():
            raise fail(f"--bpe-dir {bpe_dir} has no bpe.json; pass the bpe/ directory of "
                       "posenc-prepare-corpus or posenc-prepare-wmt output.")
        from ..textprep.text import encode

        def prepared(part: str) -> str:
            return encode([part], lang or "en", bpe_dir)[0]
    else:
        from sacremoses import MosesTokenizer

        tokenizer = MosesTokenizer(lang=lang or "en")
        bpe = load_bpe(bpe_codes, bpe_vocab, vocab_threshold) if bpe_codes else None

        def prepared(part: str) -> str:
            line = tokenizer.tokenize(part, escape=False, return_str=True)
            return bpe.process_line(line) if bpe else line
    parts = text.split(separator) if separator else [text]
    tokens: list[str] = []
    for index, part in enumerate(parts):
        tokens += prepared(part.strip()).split()
        if index < len(parts) - 1:
            tokens.append(separator)
    return tokens


def load_bpe(codes: Path, vocab: Optional[Path], threshold: int) -> Any:
    from subword_nmt.apply_bpe import BPE, read_vocabulary

    for path, flag in ((codes, "--bpe-codes"), (vocab, "--bpe-vocab")):
        if path is not None and not path.is_file():
            raise fail(f"{flag} {path} does not exist; pass the subword-nmt file the "
                       "training data was segmented with.")
    vocabulary = None
    if vocab is not None:
        with open(vocab, encoding="utf-8") as f:
            vocabulary = read_vocabulary(f, threshold)
    with open(codes, encoding="utf-8") as f:
        return BPE(f, vocab=vocabulary)


def encode(tokens: list[str], dictionary: Dictionary, bpe_given: bool) -> Tensor:
    ids = [dictionary.index(token) for token in tokens] + [dictionary.eos()]
    unknown = [t for t, i in zip(tokens, ids) if i == dictionary.unk()]
    if unknown:
        hint = ("" if bpe_given else " If the training data was BPE'd, pass --bpe-codes "
                "(and --bpe-vocab); if the sentence is already prepared, --tokenized.")
        print(f"posenc-inspect: warning: {len(unknown)} of {len(tokens)} tokens are not in "
              f"the source dictionary and become <unk>: {' '.join(unknown[:10])}.{hint}",
              file=sys.stderr)
    return torch.tensor([ids])


@contextmanager
def head_weights(layers: nn.ModuleList, captured: list[Tensor]) -> Iterator[None]:
    """Within the block, each layer's self-attention returns per-head probabilities and
    appends them, ``(H, T, T)`` of the first sentence, to ``captured``."""
    def ask(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, {**kwargs, "need_weights": True, "need_head_weights": True}

    def keep(module: nn.Module, args: tuple, output: tuple) -> None:
        captured.append(output[1][:, 0])  # (H, B, T, S) -> first sentence

    handles, saved = [], []
    for layer in layers:
        attn = layer.self_attn
        handles += [attn.register_forward_pre_hook(ask, with_kwargs=True),
                    attn.register_forward_hook(keep)]
        saved.append((attn, attn.skip_embed_dim_check))
        attn.skip_embed_dim_check = True  # stock attention: per-head weights (docstring)
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for attn, flag in saved:
            attn.skip_embed_dim_check = flag


@torch.no_grad()
def attention_picture(loaded: LoadedModel, tokens: list[str], ids: Tensor) -> Picture:
    """Encoder self-attention probabilities of the sentence, a panel per layer and head."""
    limit = loaded.args.max_source_positions
    if ids.size(1) > limit:
        raise fail(f"the sentence has {ids.size(1)} tokens (with </s>), more than the "
                   f"model's {limit} source positions; pass a shorter sentence.")
    encoder = loaded.model.encoder
    captured: list[Tensor] = []
    with head_weights(encoder.layers, captured):
        try:
            encoder(ids, torch.tensor([ids.size(1)]))
        except ValueError as err:  # e.g. too many segments for --num-segments
            raise fail(f"the encoder rejected the sentence: {err}") from None
    labels = [*tokens, "</s>"]
    panels = [HeatmapPanel(f"{layer_label((layer,), len(captured))}, head {head + 1}",
                           (layer,), head, floats(weights[head]))
              for layer, weights in enumerate(captured) for head in range(weights.size(0))]
    return Picture("encoder-attention", "encoder", "attention",
                   captions.title("attention", "probabilities", "encoder"),
                   captions.caption("attention", "probabilities", False), "heatmaps", panels,
                   xlabel="key", ylabel="query", row_labels=labels, col_labels=labels,
                   scale="sequential")
