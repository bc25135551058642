"""A model's ratio to stock from its parts: the *from parts* ratio, written once.

A model is its ``L`` encoder and ``L`` decoder layers plus the rest (timed as the 0-layer
model), and within the layers it differs from stock only in self-attention, where layers
2..L of a stack all do the second layer's work. So a call's extra time over stock's is the
rest's, the first self-attention layers' and ``L - 1`` times the second ones', and its
ratio is :data:`FROM_PARTS_FORMULA`, with the ratios ``r`` of the rest (0), the first (1)
and the later (2) self-attention layers, stock's median times ``S`` of the same parts
(encoder + decoder, the same batches) and stock's model time ``t_model``. Why and how the
parts are timed: docs/benchmark-methodology.md.
"""

from __future__ import annotations

from typing import Optional, Sequence

from fairseq_posenc.core.encodings import ENCODINGS

from .records import LaterCell, LayerResult, ModelResult, RestResult
from .settings import CONTROL, LAYER_KINDS, REST_KINDS, STOCK
from .timing import ratio_spread

#: The from-parts ratio, as the report prints it.
FROM_PARTS_FORMULA = "1 + ((r_0 - 1) S_0 + (r_1 - 1) S_1 + (L - 1)(r_2 - 1) S_2) / t_model"


def later_layer_cell(first: Sequence[float], first_two: Sequence[float], stock_first: float,
                     stock_first_two: float) -> LaterCell:
    """The second layer's ratio to stock's second layer, per repetition: its extra time,
    ``(r_12 - 1) S_12 - (r_1 - 1) S_1`` from the ratios of the first two layers (``r_12``)
    and of the first (``r_1``) to stock's median times ``S``, over ``S_12 - S_1``."""
    stock_later = stock_first_two - stock_first
    per_rep = [1 + ((r12 - 1) * stock_first_two - (r1 - 1) * stock_first) / stock_later
               for r1, r12 in zip(first, first_two)]
    return {**ratio_spread(per_rep), "stock_seconds": stock_later}


def attach_part_estimates(results: Sequence[ModelResult],
                          layer_results: Sequence[LayerResult],
                          rest_results: Sequence[RestResult] = ()) -> None:
    """Store, per model row of each model-level result, the ratio its measured parts
    account for (:data:`FROM_PARTS_FORMULA`) as ``from_parts``, with the parts used as
    ``from_parts_of``; per result, stock's shares of self-attention
    ``(S_1 + (L - 1) S_2) / t_model`` and of the rest ``S_0 / t_model``.

    The layer and rest results are matched by length. Input encodings keep stock's layers
    (no layer term); a part not timed (``--level``) is left out, a call the model level
    did not time (``--calls``) gets no estimate, and a model whose own layers were not timed
    gets none."""
    layers_at = {r["length"]: r for r in layer_results}
    rest_at = {r["length"]: r for r in rest_results}
    for r in results:
        layer, rest = layers_at.get(r["length"]), rest_at.get(r["length"])
        n_layers = r["model"]["layers"]
        t_model = r["summary"]["stock_seconds"]
        # the calls the model level timed (--calls) whose parts were timed too
        kinds = [kind for kind in LAYER_KINDS if kind in t_model]
        if not kinds:
            continue
        first: Optional[dict[str, float]] = None
        later: Optional[dict[str, float]] = None
        if layer is not None:
            stock = layer["summary"]["stock_seconds"]
            first = {kind: stock[kind] for kind in kinds}
            later = {kind: stock[f"{kind}_2"] - stock[kind] for kind in kinds}
            r["summary"]["self_attention_share"] = {
                kind: (first[kind] + (n_layers - 1) * later[kind]) / t_model[kind]
                for kind in kinds}
        if rest is not None:
            r["summary"]["rest_share"] = {
                kind: rest["summary"]["stock_seconds"][kind] / t_model[kind]
                for kind in REST_KINDS if kind in kinds}
        for name, row in r["summary"]["models"].items():
            if name == STOCK:
                continue
            own_layers = name == CONTROL or not ENCODINGS[name].at_input
            layer_row = None if layer is None else layer["summary"]["models"].get(name)
            rest_row = None if rest is None else rest["summary"]["models"].get(name)
            if (own_layers and layer_row is None) or (layer_row is None and rest_row is None):
                continue
            extra = {kind: 0.0 for kind in kinds}  # seconds over stock's, per kind
            parts = []
            if layer_row is not None:
                assert first is not None and later is not None
                parts.append("layers")
                for kind in kinds:
                    extra[kind] += ((layer_row[kind]["ratio"] - 1) * first[kind]
                                    + (n_layers - 1) * (layer_row["later"][kind]["ratio"] - 1)
                                    * later[kind])
            if rest_row is not None:
                assert rest is not None
                parts.append("rest")
                for kind in REST_KINDS:
                    if kind not in kinds:
                        continue
                    extra[kind] += ((rest_row[kind]["ratio"] - 1)
                                    * rest["summary"]["stock_seconds"][kind])
            row["from_parts"] = {kind: 1 + extra[kind] / t_model[kind] for kind in kinds}
            row["from_parts_of"] = parts
