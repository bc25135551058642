"""``--sentence``: raw text -> the model's source tokens -> encoder self-attention maps.

Text preparation is how the data was made: with ``--bpe-dir`` (the ``bpe/`` directory of
``posenc-prepare-corpus`` or ``posenc-prepare-wmt``, as in ``scripts/demo.sh``) the
preparation's own encoder (:func:`fairseq_posenc.wmt.text.encode`); for data made
elsewhere, sacremoses tokenization without escaping (``sacremoses tokenize -x``), then
subword-nmt BPE when ``--bpe-codes`` is given (with ``--bpe-vocab`` as ``apply-bpe
--vocabulary``).
``--tokenized`` takes the sentence as already tokenized and BPE'd (what
``fairseq-interactive`` reads without ``--tokenizer``/``--bpe``). A
``--segment-separator`` token in the text is kept whole: each segment is prepared on its
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
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from fairseq.data import Dictionary
from torch import Tensor, nn

from . import captions
from .load import LoadedModel, fail
from .records import HeatmapPanel, Picture, floats, layer_label


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
        from ..wmt.text import encode

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
