"""Tiny ``posenc-inspect`` checkpoints and the JSON of its reports, for the tests in
``tests/tools/test_inspect_*.py``."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import torch
from fairseq import options
from fairseq.tasks.translation import TranslationTask

from tests.fixtures.make_legacy_checkpoints import FLAGS
from tests.support.model_utils import dictionary


def tiny_checkpoint(encoding: str, extra: list[str], path: Path) -> torch.nn.Module:
    torch.manual_seed(0)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "/nonexistent", "--task", "translation", "--arch", f"transformer_tiny_{encoding}",
        "--dropout", "0", *FLAGS, *extra])
    d = dictionary()
    # build_model adds config objects to the namespace it gets; fairseq saves the parsed one
    model = TranslationTask(args, d, d).build_model(copy.deepcopy(args))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if re.search(r"pos_encodings|embed_positions|segment_attention|"
                         r"self_attn\.[qk]_proj\.bias", name):
                p.normal_(0.0, 1.0)
    torch.save({"args": None, "cfg": {"model": args, "task": {
        "_name": "translation", "source_lang": "src", "target_lang": "tgt"}},
        "model": model.state_dict()}, path)
    return model.eval()


def read_pictures(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def layer_values(picture: dict, layer: int) -> torch.Tensor:
    """A picture's values for ``layer``: curves ``(series, x)``; heatmaps ``(H, rows,
    cols)`` (one entry when the panel stands for every head)."""
    panels = [p for p in picture["panels"] if layer in p["layers"]]
    if "series" in panels[0]:
        return torch.tensor(list(panels[0]["series"].values()), dtype=torch.float64)
    return torch.tensor([p["values"] for p in panels], dtype=torch.float64)
