"""A small translation model from ``torch.nn`` pieces and ``fairseq_posenc.nn``, no fairseq.

Trains an encoder-decoder Transformer for a few hundred steps on the toy corpus of
``scripts/make_toy_corpus.py`` (English to German-like text, read as plain text files),
then translates test sentences greedily with incremental decoding: each step feeds one
token per sentence with a ``DecodingCache`` (every layer's keys and values so far), and
``cache.reorder(rows)`` drops the sentences that have ended. Each step's logits are
checked against the full forward over the tokens so far.

    python examples/pytorch/translate.py                      # t5; a corpus in a temp dir
    python examples/pytorch/translate.py --encoding rope      # any --pos-encoding name
    python examples/pytorch/translate.py --data DIR           # DIR/train.en, train.de, test.en
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor, nn

import fairseq_posenc.nn as posenc

PAD, BOS, EOS = 0, 1, 2
CORPUS_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_toy_corpus.py"


def tokenize(line: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", line)


class Block(nn.Module):
    """A pre-norm Transformer layer: self-attention with the position encoding
    (``positions``: the stack's, or None for plain attention), torch's cross-attention
    in the decoder, a feed-forward network."""

    def __init__(self, dim: int, heads: int, positions: Optional[posenc.PositionStack],
                 layer: int, causal: bool) -> None:
        super().__init__()
        self.self_attn = posenc.PositionalSelfAttention(dim, heads, positions, layer=layer,
                                                        causal=causal)
        self.cross = nn.MultiheadAttention(dim, heads, batch_first=True) if causal else None
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(3 if causal else 2))

    def forward(self, x: Tensor, padding: Optional[Tensor], memory: Optional[Tensor] = None,
                memory_padding: Optional[Tensor] = None,
                cache: Optional[posenc.DecodingCache] = None) -> Tensor:
        x = x + self.self_attn(self.norms[0](x), padding, cache=cache)
        if self.cross is not None:
            h = self.norms[1](x)
            x = x + self.cross(h, memory, memory, key_padding_mask=memory_padding,
                               need_weights=False)[0]
        return x + self.ffn(self.norms[-1](x))


class Translator(nn.Module):
    def __init__(self, vocab: int, encoding: str, dim: int = 64, heads: int = 4,
                 layers: int = 2, max_len: int = 64) -> None:
        super().__init__()
        self.dim = dim
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        at_input = encoding in posenc.encoding_names(input_level=True)
        # An input-level encoding is added to the embeddings; an attention-level one is
        # built once per stack and shared by its layers (T5: one table per stack).
        self.input_positions = posenc.PositionEmbedding(encoding, dim, max_len) if at_input else None

        def stack(causal: bool) -> nn.ModuleList:
            positions = None if at_input else posenc.PositionStack(
                encoding, num_layers=layers, embed_dim=dim, num_heads=heads, causal=causal,
                max_len=max_len)
            return nn.ModuleList(Block(dim, heads, positions, i, causal) for i in range(layers))

        self.encoder, self.decoder = stack(causal=False), stack(causal=True)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab)

    def embedding(self, tokens: Tensor, padding: Optional[Tensor], offset: int = 0) -> Tensor:
        x = self.embed(tokens) * math.sqrt(self.dim)
        if self.input_positions is not None:
            x = x + self.input_positions(x, padding, offset)
        return x

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        padding = src.eq(PAD)
        x = self.embedding(src, padding)
        for block in self.encoder:
            x = block(x, padding)
        return x, padding

    def decode(self, tokens: Tensor, memory: Tensor, memory_padding: Tensor,
               cache: Optional[posenc.DecodingCache] = None) -> Tensor:
        """Logits ``(B, T, vocab)`` of ``tokens``: with ``cache``, the tokens after those
        it holds."""
        offset = 0 if cache is None else len(cache)
        padding = None if cache is not None else tokens.eq(PAD)
        x = self.embedding(tokens, padding, offset)
        for block in self.decoder:
            x = block(x, padding, memory, memory_padding, cache)
        return self.out(self.norm(x))


def batches(pairs: list[tuple[list[int], list[int]]], size: int, generator: torch.Generator):
    order = torch.randperm(len(pairs), generator=generator).tolist()
    for start in range(0, len(order) - size + 1, size):
        chunk = [pairs[i] for i in order[start:start + size]]
        src = nn.utils.rnn.pad_sequence([torch.tensor(s) for s, _ in chunk], batch_first=True)
        tgt = nn.utils.rnn.pad_sequence([torch.tensor([BOS] + t + [EOS]) for _, t in chunk],
                                        batch_first=True)
        yield src, tgt


@torch.no_grad()
def translate(model: Translator, src: Tensor, max_len: int) -> tuple[list[list[int]], float]:
    """Greedy decoding, one token per step through the cache; the largest difference
    between a step's logits and the full forward's."""
    memory, memory_padding = model.encode(src)
    cache = posenc.DecodingCache()
    rows = torch.arange(src.size(0))  # the sentences still running
    prefix = torch.full((src.size(0), 1), BOS)
    done: dict[int, list[int]] = {}
    worst = 0.0
    for _ in range(max_len):
        step = model.decode(prefix[:, -1:], memory, memory_padding, cache)[:, -1]
        full = model.decode(prefix, memory, memory_padding)[:, -1]
        worst = max(worst, float((step - full).abs().max()))
        prefix = torch.cat([prefix, step.argmax(-1, keepdim=True)], dim=1)
        running = prefix[:, -1].ne(EOS)
        for row, tokens in zip(rows[~running].tolist(), prefix[~running].tolist()):
            done[row] = tokens[1:-1]
        if not running.any():
            break
        keep = running.nonzero().squeeze(1)  # ended sentences leave the batch
        cache.reorder(keep)
        rows, prefix = rows[keep], prefix[keep]
        memory, memory_padding = memory[keep], memory_padding[keep]
    for row, tokens in zip(rows.tolist(), prefix.tolist()):
        done.setdefault(row, tokens[1:])
    return [done[i] for i in range(src.size(0))], worst


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoding", default="t5",
                        choices=posenc.encoding_names(), help="a --pos-encoding name")
    parser.add_argument("--data", type=Path, help="train.en, train.de, test.en (default: "
                        "a toy corpus of short sentences written to a temporary directory)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's threads (a model this small runs fastest on one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            data = Path(tmp)
            subprocess.run([sys.executable, str(CORPUS_SCRIPT), "--out", tmp, "--train", "3000",
                            "--valid", "0", "--test", "5", "--min-len", "3", "--max-len", "6"],
                           check=True, stdout=subprocess.DEVNULL)
        read = {name: (data / name).read_text(encoding="utf-8").splitlines()
                for name in ("train.en", "train.de", "test.en")}
    words = ["<pad>", "<s>", "</s>"] + sorted({w for lines in read.values()
                                               for line in lines for w in tokenize(line)})
    index = {w: i for i, w in enumerate(words)}

    def encode(line: str) -> list[int]:
        return [index[w] for w in tokenize(line)]

    pairs = [(encode(en), encode(de)) for en, de in zip(read["train.en"], read["train.de"])]
    model = Translator(len(words), args.encoding)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD)
    generator, step, losses = torch.Generator().manual_seed(1), 0, []
    while step < args.steps:
        for src, tgt in batches(pairs, args.batch, generator):
            memory, memory_padding = model.encode(src)
            logits = model.decode(tgt[:, :-1], memory, memory_padding)
            loss = loss_fn(logits.flatten(0, 1), tgt[:, 1:].flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
            if step == args.steps:
                break
    print(f"{args.encoding}: {step} steps, loss {losses[0]:.2f} -> "
          f"{sum(losses[-20:]) / len(losses[-20:]):.2f} (mean of the last 20)")
    model.eval()
    test = nn.utils.rnn.pad_sequence([torch.tensor(encode(line)) for line in read["test.en"]],
                                     batch_first=True)
    hypotheses, worst = translate(model, test, max_len=20)
    for line, hypothesis in zip(read["test.en"], hypotheses):
        print(f"  {line}  ->  {' '.join(words[i] for i in hypothesis)}")
    print(f"incremental decoding against the full forward: largest difference {worst:.1e}")
    print(f"time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
