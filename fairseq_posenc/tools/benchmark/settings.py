"""What the benchmark compares, at which sizes, against which targets, with which defaults.

The names of the two stock models, the model sizes, the targets, the kinds of call and
level, the defaults of a full, a CUDA and a ``--quick`` run, and :class:`Config`, the
settings of one size x length x dtype resolved from them (:func:`make_configs`).
Methodology: ``docs/benchmark-methodology.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

STOCK = "stock"
#: A second, identical stock model timed like an encoding: its ratios (true value 1) show
#: how far the machine's noise alone moves a ratio in this run.
CONTROL = "stock_copy"

#: name -> (stock arch, flags for both models); ``transformer_posenc`` is
#: ``transformer_wmt_en_de``-sized, so flags only change what differs from it.
SIZES: dict[str, dict[str, Any]] = {
    # BERT-small-like: 4+4 layers, 512 wide, 8 heads, FFN 2048
    "small": {"stock_arch": "transformer", "layers": 4, "dim": 512, "heads": 8, "ffn": 2048},
    # fairseq's transformer_wmt_en_de, the papers' base model: 6+6 layers
    "base": {"stock_arch": "transformer_wmt_en_de", "layers": 6, "dim": 512, "heads": 8,
             "ffn": 2048},
    # base's 6+6 layers and 8 heads at width 64 (d_h = 8): on a CPU each call's arithmetic
    # is small, so a ratio measures the host's work per layer (Python, dispatch, kernel
    # launches), which bounds beam search on a GPU (docs/benchmark-methodology.md). A
    # proxy: its ratios get no verdicts (the targets are for real sizes; at d_h = 8 the
    # vocabulary's tensors outgrow len x len x d_h)
    "narrow": {"stock_arch": "transformer", "layers": 6, "dim": 64, "heads": 8, "ffn": 128,
               "proxy": True},
    # --quick only; few positions, so that tables over max positions stay small
    "tiny": {"stock_arch": "transformer", "layers": 2, "dim": 32, "heads": 4, "ffn": 64,
             "positions": 64},
}

#: (train, translate) limits on the ratio to stock; encodings not listed have no target.
TARGETS: dict[str, tuple[float, float]] = {
    **{name: (1.03, 1.03) for name in ("sinusoidal", "learned", "none", "shape")},
    **{name: (1.05, 1.05) for name in ("t5", "t5_nob", "diet_rel", "diet_abs", "alibi", "at5",
                                       "kerple_log", "kerple_power", "sandwich")},
    "shaw": (1.10, 1.15),
    "tupe_a": (1.05, 1.10),
    "tupe_r": (1.05, 1.10),
    # xPos: RoPE's rotation with its factors inside the same complex numbers
    **{name: (1.05, 1.05) for name in ("rope", "xpos")},
}
#: The GPU targets, in half precision at :data:`CUDA_DEFAULTS`: (train, translate)
#: limits. The input encodings keep stock's layers, as on CPU.
CUDA_TARGETS: dict[str, tuple[float, float]] = {
    **{name: (1.03, 1.03) for name in ("sinusoidal", "learned", "none", "shape")},
    **{name: (1.05, 1.05) for name in ("diet_abs", "tupe_a", "diet_rel", "t5", "t5_nob", "at5",
                                       "at5_nob", "alibi", "tupe_r", "kerple_log",
                                       "kerple_power", "sandwich")},
    **{name: (1.02, 1.02) for name in ("rope", "xpos")},
    "shaw": (1.13, 1.20),
    "xl": (1.20, 1.20),
    **{name: (1.30, 1.30) for name in ("huang1", "huang2", "huang4")},
}
#: On a GPU: the limit on a training step's peak memory over stock's; Huang's
#: methods 1, 2, 4 get 1.3, method 3 none (its documented ``len^2 x d_h`` cost), and
#: CoPE 2.0: its logits, probabilities and dropout mask are ``len x len`` per head on the
#: explicit path, its gates and positions one block of queries at a time.
CUDA_MEMORY_LIMIT = 1.05
CUDA_MEMORY_LIMITS: dict[str, Optional[float]] = {
    "huang1": 1.3, "huang2": 1.3, "huang4": 1.3, "huang3": None, "cope": 2.0}


def targets_for(device_type: str) -> dict[str, tuple[float, float]]:
    """The (train, translate) targets on a device: :data:`CUDA_TARGETS` or :data:`TARGETS`."""
    return CUDA_TARGETS if device_type == "cuda" else TARGETS


def memory_limit(name: str, device_type: str) -> Optional[float]:
    """The limit on a training step's peak memory ratio (GPU only; None: no limit)."""
    if device_type != "cuda" or name in (STOCK, CONTROL):
        return None
    return CUDA_MEMORY_LIMITS.get(name, CUDA_MEMORY_LIMIT)


#: The only encoding allowed (and expected) to build a len x len x d_h tensor.
QUADRATIC_DH = {"huang3"}

KINDS = ("train", "forward", "translate")
#: What is timed: whole models (``model``), their first self-attention layers (``layer``),
#: and everything but their layers (``rest``: the same models with 0 layers).
LEVELS = ("model", "layer", "rest")
#: The calls timed at the rest level (forward is a part of train).
REST_KINDS = ("train", "translate")
#: The layer level's counterparts of the model level's train and translate calls
#: (:mod:`.workload`, "the layer level's calls").
LAYER_KINDS = ("train", "translate")
#: What the layer level times: each kind for the first layer of each stack alone, and
#: (``_2``) for its first two layers in a row, one position context as the stack runs them.
#: The difference is what a later layer costs: layers 2..L do the same work (the shared
#: terms are the first's).
LAYER_CALLS = (*LAYER_KINDS, *(f"{kind}_2" for kind in LAYER_KINDS))
#: How the tables name a target's kind of call.
SHORT = {"train": "train", "translate": "transl"}

#: Defaults of the full run (its time on the build VM: docs/benchmark-methodology.md).
DEFAULTS: dict[str, Any] = {
    "sizes": ["small", "base"],
    "lengths": [30, 120],
    "reps": 5,
    # repetitions of the layer-level timings (milliseconds each)
    "layer_reps": 30,
    # repetitions of the rest-level timings (0-layer models, 0.05-0.5 s each)
    "rest_reps": 20,
    # stock is timed before the first encoding and after every this many
    "stock_every": 3,
    # sentences per training / forward batch, per length (CPU; CUDA: CUDA_DEFAULTS)
    "batch": {30: 8, 120: 2},
    # sentences translated with beam 10, per length (CPU; CUDA: CUDA_DEFAULTS)
    "translate": {30: 2, 120: 1},
    "vocab": 10000,
    "beam": 10,
}
#: On a GPU, the configuration people train in: the base model, half precision,
#: batches of 32k source tokens, 64 sentences translated, 128 and 512 tokens.
CUDA_DEFAULTS: dict[str, Any] = {
    "sizes": ["base"],
    "lengths": [128, 512],
    "dtypes": ["float16", "bfloat16"],
    "batch_tokens": 32768,
    "translate_sentences": 64,
}
#: ``--dtype`` names.
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
QUICK: dict[str, Any] = {
    "sizes": ["tiny"],
    "lengths": [12],
    "reps": 2,
    "layer_reps": 2,
    "rest_reps": 2,
    "stock_every": 3,
    "batch": {12: 2},
    "translate": {12: 2},
    "vocab": 64,
    "beam": 4,
    "encodings": ["sinusoidal", "diet_rel", "huang3"],
}


@dataclass
class Config:
    """One size x source length x dtype, with every count the levels need."""
    size: str
    length: int
    batch: int
    translate: int
    reps: int
    stock_every: int
    beam: int
    vocab: int
    seed: int
    layer_reps: int = 30
    rest_reps: int = 20
    dtype: str = "float32"
    #: the model level's calls timed (``--calls``): a subset of :data:`KINDS`
    kinds: tuple[str, ...] = KINDS
    #: ``cpu`` or ``cuda``: which targets apply (:func:`targets_for`)
    device_type: str = "cpu"
    #: ``--attention-dropout`` of every model (0: ``transformer_wmt_en_de``'s)
    attention_dropout: float = 0.0
    #: ``--layer-stacks``: the layer level times both stacks' layers, or the decoder's
    layer_stacks: str = "both"

    @property
    def key(self) -> str:
        dtype = "" if self.dtype == "float32" else f"/{self.dtype}"
        return f"{self.size}/len{self.length}{dtype}"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def targets(self) -> dict[str, tuple[float, float]]:
        return targets_for(self.device_type)

    @property
    def spec(self) -> dict[str, Any]:
        """The size's shape, and the attention dropout where there is one (the records'
        ``"model"``)."""
        spec = SIZES[self.size]
        return {**spec, "attention_dropout": self.attention_dropout} \
            if self.attention_dropout else spec


def per_length(table: dict[int, int], length: int, given: Optional[int]) -> int:
    """``given``, else ``table``'s count at ``length``; at a length not in the table, about
    as many tokens as at the nearest one."""
    if given:
        return given
    if length in table:
        return table[length]
    ref = min(table, key=lambda k: abs(k - length))
    return max(1, round(table[ref] * ref / length))


def make_configs(
    defaults: dict[str, Any], sizes: Sequence[str], lengths: Sequence[int],
    dtypes: Sequence[str], seed: int, batch: Optional[int] = None,
    batch_tokens: Optional[int] = None, translate_sentences: Optional[int] = None,
    reps: Optional[int] = None, stock_every: Optional[int] = None, beam: Optional[int] = None,
    vocab: Optional[int] = None, layer_reps: Optional[int] = None,
    rest_reps: Optional[int] = None, kinds: Sequence[str] = KINDS, device_type: str = "cpu",
    attention_dropout: float = 0.0, layer_stacks: str = "both",
) -> list[Config]:
    """Every dtype x size x length, each count as given or else from ``defaults``."""
    return [
        Config(size=size, length=length, dtype=dtype,
               batch=(batch or max(1, batch_tokens // length) if batch_tokens
                      else per_length(defaults["batch"], length, batch)),
               translate=per_length(defaults["translate"], length, translate_sentences),
               reps=reps or defaults["reps"],
               stock_every=stock_every or defaults["stock_every"],
               beam=beam or defaults["beam"], vocab=vocab or defaults["vocab"], seed=seed,
               layer_reps=layer_reps or defaults["layer_reps"],
               rest_reps=rest_reps or defaults["rest_reps"],
               kinds=tuple(k for k in KINDS if k in kinds), device_type=device_type,
               attention_dropout=attention_dropout, layer_stacks=layer_stacks)
        for dtype in dtypes for size in sizes for length in lengths]


def configs_per_length(configs: Sequence[Config]) -> list[Config]:
    """The first configuration of each (length, dtype): the layer and rest levels are the
    same for every size (512 wide, 8 heads; 0 layers)."""
    firsts: dict[tuple[int, str], Config] = {}
    for cfg in configs:
        firsts.setdefault((cfg.length, cfg.dtype), cfg)
    return list(firsts.values())
