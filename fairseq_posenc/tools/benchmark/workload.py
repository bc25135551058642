"""What the benchmark runs: its models, batches, optimizers and the calls it times.

The model level's calls are a training step (``train_step``), a teacher-forced forward
(``full_forward``) and beam search (``translate``); the layer level's run the first
self-attention layers of a stack the way the stack runs them (``attention_*``). Timing
them is :mod:`.timing`'s and :mod:`.levels`' business, not this module's.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, ContextManager, Iterable, Optional, Sequence

import torch
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator

from fairseq_posenc.core.encodings import ENCODINGS
from fairseq_posenc.plugin import build
from fairseq_posenc.plugin.attention import PositionalMultiheadAttention
from fairseq_posenc.core.context import PositionContext

from .settings import CONTROL, SIZES, STOCK

# --- models and data ------------------------------------------------------------------


def model_flags(size: str, layers: Optional[int] = None,
                attention_dropout: float = 0.0) -> list[str]:
    """fairseq flags for a size of :data:`.settings.SIZES`, with ``layers`` per stack and
    ``attention_dropout`` (``--attention-dropout``; 0 as in ``transformer_wmt_en_de``)."""
    spec = SIZES[size]
    layers = spec["layers"] if layers is None else layers
    return [
        "--encoder-layers", str(layers), "--decoder-layers", str(layers),
        "--encoder-embed-dim", str(spec["dim"]), "--decoder-embed-dim", str(spec["dim"]),
        "--encoder-ffn-embed-dim", str(spec["ffn"]), "--decoder-ffn-embed-dim", str(spec["ffn"]),
        "--encoder-attention-heads", str(spec["heads"]),
        "--decoder-attention-heads", str(spec["heads"]),
        "--dropout", "0.1", "--share-all-embeddings",
        *([] if "positions" not in spec else
          ["--max-source-positions", str(spec["positions"]),
           "--max-target-positions", str(spec["positions"])]),
        *(["--attention-dropout", str(attention_dropout)] if attention_dropout else []),
    ]


def build_model(name: str, size: str, dictionary: Dictionary, seed: int,
                device: torch.device, layers: Optional[int] = None,
                dtype: torch.dtype = torch.float32,
                attention_dropout: float = 0.0) -> torch.nn.Module:
    """Stock fairseq (``name`` is :data:`STOCK` or :data:`CONTROL`) or
    ``transformer_posenc --pos-encoding name``; ``layers``: per stack, instead of the size's;
    ``dtype``: the parameters' (half precision as ``fairseq-train --fp16`` / ``--bf16``
    casts the model); ``attention_dropout``: as :func:`model_flags`."""
    if name in (STOCK, CONTROL):
        arch, encoding = SIZES[size]["stock_arch"], []
    else:
        arch, encoding = "transformer_posenc", ["--pos-encoding", name]
        if ENCODINGS[name].causal_only():  # the decoder's; the encoder's is stock's
            encoding += ["--encoder-pos-encoding", "sinusoidal"]
    torch.manual_seed(seed)  # the same seed: every model starts from the same draws
    model = build.build_model(arch, [*encoding, *model_flags(size, layers, attention_dropout)],
                              dictionary)
    return model.to(device=device, dtype=dtype)


@dataclass
class Batch:
    src_tokens: torch.Tensor
    src_lengths: torch.Tensor
    prev_output_tokens: torch.Tensor
    target: torch.Tensor

    @property
    def sentences(self) -> int:
        return self.src_tokens.size(0)


def random_lengths(n: int, length: int, gen: torch.Generator) -> list[int]:
    """``n`` lengths in ``[0.8 length, length]`` (eos included), the first exactly ``length``."""
    lo = max(2, math.ceil(0.8 * length))
    rest = torch.randint(lo, length + 1, (n - 1,), generator=gen).tolist() if n > 1 else []
    return [length, *rest]


def make_batch(d: Dictionary, n: int, length: int, seed: int,
               device: torch.device) -> Batch:
    """``n`` random sentence pairs: sources left-padded, targets right-padded (fairseq's
    defaults), both ending in eos; ``prev_output_tokens`` is eos + target[:-1]."""
    gen = torch.Generator().manual_seed(seed)
    pad, eos = d.pad(), d.eos()

    def sentences() -> list[torch.Tensor]:
        out = []
        for n_tok in random_lengths(n, length, gen):
            words = torch.randint(d.nspecial, len(d), (n_tok - 1,), generator=gen)
            out.append(torch.cat([words, torch.tensor([eos])]))
        return out

    src, tgt = sentences(), sentences()
    src_tokens = torch.full((n, length), pad, dtype=torch.long)
    target = torch.full((n, length), pad, dtype=torch.long)
    prev = torch.full((n, length), pad, dtype=torch.long)
    for i, (s, t) in enumerate(zip(src, tgt)):
        src_tokens[i, length - len(s):] = s
        target[i, : len(t)] = t
        prev[i, 0] = eos
        prev[i, 1: len(t)] = t[:-1]
    lengths = torch.tensor([len(s) for s in src])
    return Batch(src_tokens.to(device), lengths.to(device), prev.to(device), target.to(device))


# --- optimizers -----------------------------------------------------------------------


class MasterWeightAdam:
    """Adam as ``fairseq-train --fp16`` / ``--bf16`` runs it (``FP16Optimizer``): on float32
    master copies of the half-precision parameters, gradients copied up, new weights copied
    back. Dynamic loss scaling, one multiply of the loss and of the gradients, is left out."""

    def __init__(self, params: Sequence[torch.nn.Parameter], lr: float) -> None:
        self.params = list(params)
        self.master = [p.detach().float().requires_grad_() for p in self.params]
        self.adam = torch.optim.Adam(self.master, lr=lr, betas=(0.9, 0.98), eps=1e-8)
        self.param_groups = [{"params": self.params}]

    def step(self) -> None:
        for p, m in zip(self.params, self.master):
            m.grad = None if p.grad is None else p.grad.float()
        self.adam.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.master):
                p.copy_(m)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
        self.adam.zero_grad(set_to_none=True)


def make_optimizer(params: Iterable[torch.nn.Parameter], lr: float = 1e-5):
    """fairseq's Adam: plain for float32 parameters, on float32 master weights for half."""
    params = list(params)
    if any(p.dtype != torch.float32 for p in params):
        return MasterWeightAdam(params, lr)
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-8)


def init_optimizer_state(optimizer) -> None:
    """Allocate Adam's state with a step on zero gradients (parameters stay unchanged):
    the first real step then runs as in steady-state training, at a fraction of the cost
    of an untimed warm-up training step."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


# --- the model level's calls ----------------------------------------------------------


def train_step(model, optimizer, batch: Batch, pad: int) -> None:
    model.train()
    optimizer.zero_grad(set_to_none=True)
    net_output = model(batch.src_tokens, batch.src_lengths, batch.prev_output_tokens)
    lprobs = model.get_normalized_probs(net_output, log_probs=True)
    loss, _ = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), batch.target.view(-1),
                                      0.1, ignore_index=pad, reduce=True)
    loss.backward()
    optimizer.step()


def full_forward(model, batch: Batch) -> None:
    model.eval()
    with torch.no_grad():
        model(batch.src_tokens, batch.src_lengths, batch.prev_output_tokens)


def make_generator(model, d: Dictionary, beam: int, length: int,
                   half: bool = False) -> SequenceGenerator:
    # min_len = max_len = length: eos is forbidden before step `length` and forced at it,
    # so every model, whatever its random weights, decodes `length + 1` steps. In half
    # precision that can hit fairseq's `assert step < max_len` (docs/fairseq-notes.md), so
    # min_len = length - 2 there, and random weights put eos among the beam's best within
    # those 2 steps with a probability of about beam / vocab per step.
    return SequenceGenerator([model], d, beam_size=beam, max_len_a=0, max_len_b=length,
                             min_len=length - 2 if half else length, len_penalty=0.6)


def translate(model, generator: SequenceGenerator, sources: Batch) -> list:
    model.eval()
    sample = {"net_input": {"src_tokens": sources.src_tokens,
                            "src_lengths": sources.src_lengths}}
    with torch.no_grad():
        return generator.generate([model], sample)


# --- the layer level's calls ----------------------------------------------------------
#
# ``train``: the first encoder self-attention layer, forward + backward on the padded
# source batch, then the first decoder self-attention layer likewise on the right-padded
# targets with fairseq's causal mask (dropout on), then an Adam step over the layers'
# parameters and their encoding's (``layer_parameters``). ``translate``: the encoder
# layer's forward on the sources to translate, then the decoder layer over ``length + 1``
# incremental steps for ``sentences x beam`` rows, as beam search runs it.


def position_scope(attn: torch.nn.Module,
                   context: Optional[PositionContext] = None) -> ContextManager[Any]:
    """The stack's position scope (one for all its layers) opened as the stack opens it;
    stock layers have none."""
    if isinstance(attn, PositionalMultiheadAttention):
        return attn.scope.open(context)
    return contextlib.nullcontext()


def layer_parameters(attns: Sequence[torch.nn.Module]) -> list[torch.nn.Parameter]:
    """The parameters the layers' training step updates, each once: each layer's own and
    those of its position terms (its encoding's, its segment attention's), which the stack
    owns rather than the layer. A term the stack shares counts with the first layer, so
    the first two layers' list less the first's is what each later layer adds."""
    params: list[torch.nn.Parameter] = []
    for attn in attns:
        params.extend(attn.parameters())
        if isinstance(attn, PositionalMultiheadAttention):
            for term in (attn.encoding, *attn.position_terms()):
                if term is not None:
                    params.extend(term.parameters())
    return list(dict.fromkeys(params))  # tensors hash by identity


def attention_train(attns: Sequence[torch.nn.Module], x: torch.Tensor,
                    padding: Optional[torch.Tensor],
                    causal_mask: Optional[torch.Tensor] = None) -> None:
    """The layers in a row (each one's output is the next one's input), then backward."""
    with position_scope(attns[0]):
        for attn in attns:
            attn.train()
            x, _ = attn(x, x, x, key_padding_mask=padding, need_weights=False,
                        attn_mask=causal_mask)
    x.sum().backward()


def attention_encode(attns: Sequence[torch.nn.Module], x: torch.Tensor,
                     padding: Optional[torch.Tensor]) -> None:
    with torch.no_grad(), position_scope(attns[0]):
        for attn in attns:
            attn.eval()
            x, _ = attn(x, x, x, key_padding_mask=padding, need_weights=False)


def attention_decode(attns: Sequence[torch.nn.Module], steps: torch.Tensor) -> None:
    """Incremental steps through the layers in a row, one cache per layer (fairseq keys
    ``incremental_state`` by module) and one position context per generated sequence."""
    for attn in attns:
        attn.eval()
    state: dict = {}
    context = PositionContext(incremental=True)
    with torch.no_grad():
        for t in range(steps.size(0)):
            x = steps[t: t + 1]
            with position_scope(attns[0], context):
                for attn in attns:
                    x, _ = attn(x, x, x, incremental_state=state, need_weights=False)
