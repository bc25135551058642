"""The benchmark's results, as typed records.

Every result is written to JSON (``--out-json``) and read back by ``--render``, and the
Markdown report is rendered from that JSON alone, so the records are ``TypedDict``s:
typed for the code that builds and reads them, plain dicts (the JSON's own shape) at run
time. The JSON key order is set where each record is built, not by these classes.
"""

from __future__ import annotations

from typing import Any, NotRequired, Optional, TypedDict

#: Per name (stock, the noise control, each encoding), per kind of call: a list per
#: repetition of the seconds of each call in it (stock is called several times a repetition).
Times = dict[str, dict[str, list[list[float]]]]
#: Per timed name, per kind of call: the ratio to stock in each repetition.
Ratios = dict[str, dict[str, list[float]]]


class Spread(TypedDict):
    """A ratio over repetitions: median, min-max, interquartile range, the raw ratios."""
    ratio: float
    min: float
    max: float
    q1: float
    q3: float
    per_rep_ratios: list[float]


class RatioCell(Spread):
    """:class:`Spread`, and the median seconds of the calls timed."""
    seconds: float


class LaterCell(Spread):
    """The second layer's ratio (first two layers less the first), and stock's seconds of it."""
    stock_seconds: float


class Memory(TypedDict):
    """One call under the memory tracker (:mod:`.memory`)."""
    peak_bytes: int
    tracked_peak_bytes: int
    largest_numel: int
    largest_shape: list[int]
    largest_op: str
    tracked_call_seconds: float


# "pass" is a keyword: these two records are declared in the functional form.
#: A train or translate target: the median ratio against its limit; conclusive when every
#: repetition falls on the same side of the limit.
TargetCheck = TypedDict("TargetCheck", {
    "limit": float, "ratio": float, "pass": bool, "conclusive": bool})
#: Whether a model builds a ``len x len x d_h`` tensor exactly when it is expected to.
MemoryCheck = TypedDict("MemoryCheck", {
    "expected_quadratic": bool, "quadratic_in": list[str], "pass": bool})


class ModelRow(TypedDict):
    """One model of the model level: per kind of call (train, forward, translate) its
    :class:`RatioCell` (the kinds timed: ``--calls``), then memory, verdicts and (from
    :mod:`.parts`) the from-parts ratio."""
    train: NotRequired[RatioCell]
    forward: NotRequired[RatioCell]
    translate: NotRequired[RatioCell]
    peak_ratio: dict[str, float]
    largest_rel: dict[str, float]
    #: the calls where stock's largest activation is below a ``len x len x d_h`` tensor's
    #: size, so that the largest activation can show one
    quadratic_visible: NotRequired[list[str]]
    quadratic_dh: list[str]
    verdict: dict[str, Any]  # "train"/"translate": TargetCheck, "memory": MemoryCheck
    from_parts: NotRequired[dict[str, float]]
    from_parts_of: NotRequired[list[str]]


class ModelSummary(TypedDict):
    stock_seconds: dict[str, float]
    stock_spread: dict[str, float]  # max / min of identical stock calls: the noise floor
    models: dict[str, ModelRow]
    self_attention_share: NotRequired[dict[str, float]]
    rest_share: NotRequired[dict[str, float]]


class _Timed(TypedDict):
    """What every level's record of one configuration holds (in JSON key order, a
    level's own keys come between these)."""
    size: str
    length: int
    dtype: str
    batch_sentences: int
    translate_sentences: int
    beam: int
    reps: int
    seed: int
    model: dict[str, Any]  # the size's spec (settings.SIZES)
    seconds: float
    times_s: Times
    ratios: Ratios


class ModelResult(_Timed):
    """One size x length x dtype of the model level."""
    kinds: NotRequired[list[str]]  # the calls timed (absent in runs before --calls: all)
    out_of_memory: NotRequired[list[str]]  # models left out: their warm-up ran out of memory
    vocab: int
    head_dim: int
    stock_every: int
    other_processes_cores: Optional[float]
    memory: dict[str, dict[str, Memory]]
    summary: ModelSummary


class LayerBound(TypedDict):
    """The worse of the first and later layers' ratios against a model-level target."""
    limit: float
    ratio: float
    holds: bool


class LayerRow(TypedDict):
    later: dict[str, LaterCell]
    train: RatioCell
    translate: RatioCell
    bound: NotRequired[dict[str, LayerBound]]


class LayerSummary(TypedDict):
    stock_seconds: dict[str, float]  # per call of settings.LAYER_CALLS
    models: dict[str, LayerRow]


class LayerResult(_Timed):
    """One length x dtype of the layer level."""
    level: str  # "layer"
    decode_rows: int
    summary: LayerSummary


class RestSummary(TypedDict):
    stock_seconds: dict[str, float]
    models: dict[str, dict[str, RatioCell]]  # per name, per kind of settings.REST_KINDS


class RestResult(_Timed):
    """One length x dtype of the rest level (the models with 0 layers)."""
    level: str  # "rest"
    summary: RestSummary


class Document(TypedDict):
    """A whole run: what ``--out-json`` holds and ``--render`` reads."""
    command: Optional[list[str]]
    machine: dict[str, Any]
    wall_seconds: float
    encodings: list[str]
    targets: dict[str, dict[str, float]]
    levels: list[str]
    results: list[ModelResult]
    layer_results: list[LayerResult]
    rest_results: list[RestResult]
    failures: list[str]
    markdown: NotRequired[str]
