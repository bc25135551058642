"""Judging the targets: the model level's summary and verdicts, the layer level's bounds,
and the list of targets failed.

Targets are ratios to stock (train and translate: :data:`.settings.TARGETS` on CPU,
:data:`.settings.CUDA_TARGETS` on a GPU) and, for memory, that no encoding but ``huang3``
builds a ``len x len x d_h`` tensor; on a GPU also a limit on a training step's peak
memory over stock's (:func:`.settings.memory_limit`).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .memory import quadratic_threshold
from .records import (LayerBound, LayerResult, LayerRow, Memory, ModelResult, ModelRow,
                      ModelSummary, Ratios, Times)
from .settings import (CONTROL, LAYER_KINDS, QUADRATIC_DH, STOCK, TARGETS, Config,
                       memory_limit)
from .timing import median, ratio_cell


def summarize(cfg: Config, names: Sequence[str], times: Times, ratios: Ratios,
              memory: dict[str, dict[str, Memory]]) -> ModelSummary:
    """The model level's summary: stock's times and their spread, and per model its ratios,
    memory against stock's, the largest activation against a ``len x len x d_h`` tensor
    and its verdict, for the calls timed (``cfg.kinds``)."""
    kinds = cfg.kinds
    stock_calls = {kind: [t for rep in times[STOCK][kind] for t in rep] for kind in kinds}
    out: ModelSummary = {
        "stock_seconds": {k: median(stock_calls[k]) for k in kinds},
        # how much identical stock calls vary within this run: the noise floor
        "stock_spread": {k: max(stock_calls[k]) / min(stock_calls[k]) for k in kinds},
        "models": {},
    }
    sentences = {"train": cfg.batch, "forward": cfg.batch, "translate": cfg.translate}
    threshold = {k: quadratic_threshold(cfg, sentences[k]) for k in kinds}
    # Where stock's own largest activation reaches the threshold (a tiny model's output
    # logits, B x len x vocab), the largest activation cannot show a len x len x d_h
    # tensor: no memory verdict for those calls.
    visible = [k for k in kinds if memory[STOCK][k]["largest_numel"] < threshold[k]]
    for name in names:
        row: dict[str, Any] = {}
        for kind in kinds:
            per_rep = [1.0] * cfg.reps if name == STOCK else ratios[name][kind]
            row[kind] = ratio_cell(per_rep, times[name][kind])
        mem = memory[name]
        row["peak_ratio"] = {k: mem[k]["peak_bytes"] / max(1, memory[STOCK][k]["peak_bytes"])
                             for k in kinds}
        row["largest_rel"] = {k: mem[k]["largest_numel"] / threshold[k] for k in kinds}
        row["quadratic_visible"] = visible
        row["quadratic_dh"] = [k for k in visible if row["largest_rel"][k] >= 1.0]
        row["verdict"] = ({} if cfg.spec.get("proxy") else
                          verdict(name, row, cfg.targets, memory_limit(name, cfg.device_type)))
        out["models"][name] = row
    return out


def verdict(name: str, row: dict[str, Any],
            targets: dict[str, tuple[float, float]] = TARGETS,
            peak_limit: Optional[float] = None) -> dict[str, Any]:
    """PASS/FAIL against the targets of the calls timed; ``None`` where the encoding has
    none. ``peak_limit``: a limit on the training step's peak memory ratio."""
    checks: dict[str, Any] = {}
    if peak_limit is not None and "train" in row["peak_ratio"]:
        ratio = row["peak_ratio"]["train"]
        checks["peak_memory"] = {"limit": peak_limit, "ratio": ratio, "pass": ratio <= peak_limit}
    if name in targets:
        for kind, limit in zip(("train", "translate"), targets[name]):
            if kind not in row:
                continue
            cell = row[kind]
            checks[kind] = {"limit": limit, "ratio": cell["ratio"],
                            "pass": cell["ratio"] <= limit,
                            # every repetition on the same side of the limit
                            "conclusive": cell["max"] <= limit or cell["min"] > limit}
    # runs recorded before quadratic_visible: every call could show the tensor
    if name not in (STOCK, CONTROL) and row.get("quadratic_visible", True):
        expected = name in QUADRATIC_DH
        checks["memory"] = {"expected_quadratic": expected,
                            "quadratic_in": row["quadratic_dh"],
                            "pass": bool(row["quadratic_dh"]) == expected}
    return checks


def layer_bounds(name: str, row: LayerRow,
                 targets: dict[str, tuple[float, float]] = TARGETS) -> dict[str, LayerBound]:
    """A model-level target against its layers: the stacks' ratio lies between the first
    and the later layers' ratios, so the worse of the two bounds it."""
    bounds: dict[str, LayerBound] = {}
    for kind, limit in zip(LAYER_KINDS, targets[name]):
        worst = max(row[kind]["ratio"], row["later"][kind]["ratio"])
        bounds[kind] = {"limit": limit, "ratio": worst, "holds": worst <= limit}
    return bounds


def failures(results: Sequence[ModelResult],
             layer_results: Sequence[LayerResult] = ()) -> list[str]:
    """Model-level targets not met, each with the ratio its measured parts account for
    (:func:`.parts.attach_part_estimates`); without model-level results, the layer ratios
    that do not show a target by themselves."""
    out = []
    if not results:
        for r in layer_results:
            for name, layer_row in r["summary"]["models"].items():
                for kind, b in layer_row.get("bound", {}).items():
                    if not b["holds"]:
                        out.append(f"len{r['length']} {name} {kind}: layer-level ratio "
                                   f"{b['ratio']:.3f} > {b['limit']:.2f}: the layers alone "
                                   "do not show the target")
        return out
    for result in results:
        for name, row in result["summary"]["models"].items():
            out.extend(_model_failures(f"{result['size']}/len{result['length']}", name, row))
    return out


def _model_failures(where: str, name: str, row: ModelRow) -> list[str]:
    out = []
    for kind, c in row["verdict"].items():
        if c["pass"]:
            continue
        if kind == "peak_memory":
            out.append(f"{where} {name} peak memory (train): {c['ratio']:.3f} > "
                       f"{c['limit']:.2f}")
            continue
        if kind == "memory":
            what = ("builds a len x len x d_h tensor" if c["quadratic_in"]
                    else "expected len x len x d_h tensor not seen")
            out.append(f"{where} {name} memory: {what} {c['quadratic_in']}")
            continue
        parts = row.get("from_parts", {}).get(kind)
        out.append(f"{where} {name} {kind}: {c['ratio']:.3f} > {c['limit']:.2f} "
                   f"(+{100 * (c['ratio'] / c['limit'] - 1):.1f}% over"
                   + ("" if c["conclusive"] else
                      ", inconclusive: some repetitions within the limit") + ")"
                   + ("" if parts is None else
                      f"; from its parts ({' + '.join(row['from_parts_of'])}): "
                      f"{parts:.3f}, "
                      + ("within the limit, so the target holds"
                         if parts <= c["limit"] else "over the limit too")))
    return out
