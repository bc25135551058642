"""Typed records of what ``posenc-inspect`` shows: one :class:`Picture` per PNG.

A picture is a grid of panels that share axes and a caption: :class:`CurvePanel` (values by
relative distance, one curve per head) or :class:`HeatmapPanel` (a matrix: positional
logits over pairs of positions, attention probabilities over tokens). The same record is
drawn by :mod:`.plots`, listed by :mod:`.report` and written as the JSON file beside the
PNG (:meth:`Picture.to_json`), so the JSON holds exactly the numbers that were plotted.

Decisions: values are plain Python floats (from the model's own float32 tensors, unrounded),
so the JSON is readable without torch; each panel names the layers it stands for (a module
shared by several layers is one panel) and, for heatmaps, its head, so a reader (or a test)
finds a layer's values without parsing titles. Layers and heads are 0-based in the JSON and
1-based in titles.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Sequence, Union

from torch import Tensor


def layer_label(layers: Sequence[int], total: int) -> str:
    """``"layer 2"``, ``"layers 1-6"``, ``"all 6 layers"`` (1-based)."""
    if len(layers) == 1:
        return f"layer {layers[0] + 1}"
    if len(layers) == total:
        return f"all {total} layers"
    return "layers " + ", ".join(str(layer + 1) for layer in layers)


def floats(values: Tensor) -> list:
    """A tensor as nested lists of Python floats (what the JSON holds)."""
    return values.detach().double().cpu().tolist()


@dataclass(frozen=True)
class CurvePanel:
    """Curves over :attr:`Picture.x`: ``series[label]`` has one value per x."""

    title: str
    layers: tuple[int, ...]
    series: dict[str, list[float]]


@dataclass(frozen=True)
class HeatmapPanel:
    """``values[row][col]``; ``head`` is None when the panel stands for every head."""

    title: str
    layers: tuple[int, ...]
    head: Optional[int]
    values: list[list[float]]


Panel = Union[CurvePanel, HeatmapPanel]


@dataclass
class Picture:
    """One PNG (``{key}.png``) and its JSON (``{key}.json``).

    ``stack``: "encoder", "decoder" or "model"; ``term``: the name of the position term (or
    "attention" for attention maps); ``x``: the distances of curve panels; ``row_labels`` /
    ``col_labels``: tick labels of heatmaps (tokens, positions). ``scale``: "diverging"
    (a signed bias, centred at 0), "sequential" (probabilities, norms) or "factor"
    (multiplicative, centred at 1).
    """

    key: str
    stack: str
    term: str
    title: str
    caption: str
    kind: Literal["curves", "heatmaps"]
    panels: list[Panel]
    xlabel: str = ""
    ylabel: str = ""
    x: list[int] = field(default_factory=list)
    row_labels: list[str] = field(default_factory=list)
    col_labels: list[str] = field(default_factory=list)
    scale: Literal["diverging", "sequential", "factor"] = "diverging"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def write_json(self, directory: Path) -> Path:
        path = directory / f"{self.key}.json"
        path.write_text(json.dumps(self.to_json(), indent=1), encoding="utf-8")
        return path


@dataclass(frozen=True)
class Note:
    """A sentence for the report where a stack has nothing to draw (``none``)."""

    stack: str
    text: str


@dataclass
class Report:
    """Everything one run shows: the checkpoint's facts, pictures and notes, in order."""

    checkpoint: str
    encoding: str
    summary: list[str]
    pictures: list[Picture] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
