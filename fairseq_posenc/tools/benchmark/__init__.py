"""Speed and memory of every position encoding against stock fairseq ``transformer``.

The command is :func:`.cli.main` (``posenc-benchmark``, ``python -m
fairseq_posenc.tools.benchmark``, ``scripts/benchmark.py``); the API is :func:`run`. The modules,
by responsibility:

* :mod:`.settings` -- sizes, targets, defaults, one configuration (:class:`Config`);
* :mod:`.workload` -- models, batches, optimizers and the calls that are timed;
* :mod:`.timing` -- timed calls, stock-bracketed interleaving, ratio statistics;
* :mod:`.memory` -- peak live bytes and the largest activation of a call;
* :mod:`.levels` -- the model, layer and rest levels of one configuration;
* :mod:`.parts` -- the *from parts* ratio (a model's ratio from its layers and rest);
* :mod:`.targets` -- verdicts against the targets, failures;
* :mod:`.records` -- the results, typed; :mod:`.report` -- their Markdown and flat JSON;
* :mod:`.machine` -- what the run measured on; :mod:`.runner` -- a whole run.

Methodology: docs/benchmark-methodology.md.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Where each name of the API is defined: the package imports a module (and with it torch
#: and fairseq) when one of its names is first read, so ``posenc-benchmark --help`` and
#: ``--render`` start without fairseq.
_HOMES = {
    "main": ".cli",
    "run_layer_config": ".levels", "run_model_config": ".levels", "run_rest_config": ".levels",
    "LiveTensorTracker": ".memory", "measure_memory": ".memory",
    "FROM_PARTS_FORMULA": ".parts", "attach_part_estimates": ".parts",
    "later_layer_cell": ".parts",
    "markdown_document": ".report",
    "run": ".runner",
    **{name: ".settings" for name in ("CONTROL", "KINDS", "LAYER_CALLS", "LAYER_KINDS",
                                      "LEVELS", "REST_KINDS", "SIZES", "STOCK", "TARGETS",
                                      "Config")},
    "failures": ".targets",
    **{name: ".workload" for name in ("MasterWeightAdam", "attention_decode",
                                      "attention_encode", "attention_train", "build_model",
                                      "layer_parameters", "make_batch", "make_generator",
                                      "make_optimizer", "translate")},
}

__all__ = sorted([*_HOMES, "shared_dictionary"])


def __getattr__(name: str) -> Any:
    if name == "shared_dictionary":
        from fairseq_posenc.plugin.build import toy_dictionary as value
    elif name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name], __name__), name)
    else:  # a module of the package, e.g. ``benchmark.levels``
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as missing:
            if missing.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value  # read once
    return value
