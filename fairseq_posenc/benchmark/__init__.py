"""Speed and memory of every position encoding against stock fairseq ``transformer``.

The command is :func:`.cli.main` (``posenc-benchmark``, ``python -m
fairseq_posenc.benchmark``, ``scripts/benchmark.py``); the API is :func:`run`. The modules,
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

from fairseq_posenc.build import toy_dictionary as shared_dictionary

from .cli import main
from .levels import run_layer_config, run_model_config, run_rest_config
from .memory import LiveTensorTracker, measure_memory
from .parts import FROM_PARTS_FORMULA, attach_part_estimates, later_layer_cell
from .report import markdown_document
from .runner import run
from .settings import (CONTROL, KINDS, LAYER_CALLS, LAYER_KINDS, LEVELS, REST_KINDS, SIZES, STOCK,
                       TARGETS, Config)
from .targets import failures
from .workload import (MasterWeightAdam, attention_decode, attention_encode, attention_train,
                       build_model, layer_parameters, make_batch, make_generator, make_optimizer,
                       translate)

__all__ = [
    "CONTROL", "FROM_PARTS_FORMULA", "KINDS", "LAYER_CALLS", "LAYER_KINDS", "LEVELS",
    "REST_KINDS", "SIZES", "STOCK", "TARGETS", "Config", "LiveTensorTracker", "MasterWeightAdam",
    "attach_part_estimates", "attention_decode", "attention_encode", "attention_train",
    "build_model", "failures", "later_layer_cell", "layer_parameters", "main", "make_batch",
    "make_generator", "make_optimizer", "markdown_document", "measure_memory", "run",
    "run_layer_config", "run_model_config", "run_rest_config", "shared_dictionary",
    "translate",
]
