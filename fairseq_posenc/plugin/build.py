"""Models and dictionaries built as ``fairseq-train`` builds them, for tools and tests.

The benchmark, ``posenc-params`` and the tests' helpers all build models the same way:
fairseq's own argument parsing for an architecture and its flags (so every model flag and
every architecture default applies), a ``TranslationTask`` over one joined dictionary, and
the task's ``build_model``. This module is that one way; :func:`trial_build` is the same
build at the least cost, for a tool that checks before any work that a model builds.
"""

from __future__ import annotations

import argparse
import copy
from typing import Sequence

import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.tasks.translation import TranslationTask

from .position_args import uses_segments
from .registration import register


def toy_dictionary(size: int) -> Dictionary:
    """A joined dictionary of ``size`` types: fairseq's specials, then ``w0``, ``w1``, ..."""
    d = Dictionary()
    for i in range(size - len(d)):
        d.add_symbol(f"w{i}")
    return d


def model_args(arch: str, flags: Sequence[str] = ()) -> argparse.Namespace:
    """``fairseq-train``'s arguments for ``--task translation --arch ARCH FLAGS`` (no data:
    the data directory is never read)."""
    register()  # the architectures, which fairseq's parser offers
    return options.parse_args_and_arch(
        options.get_training_parser(),
        ["/nonexistent", "--task", "translation", "--arch", arch, *flags])


def build_from_args(args: argparse.Namespace, dictionary: Dictionary) -> torch.nn.Module:
    """The model ``args`` describe, over ``dictionary`` for source and target. fairseq's
    ``build_model`` fills the architecture's defaults into ``args`` in place."""
    register()
    return TranslationTask(args, dictionary, dictionary).build_model(args)


def build_model(arch: str, flags: Sequence[str], dictionary: Dictionary) -> torch.nn.Module:
    """:func:`build_from_args` of :func:`model_args`."""
    return build_from_args(model_args(arch, flags), dictionary)


def trial_build(args: argparse.Namespace) -> None:
    """Build the model ``args`` describe, as ``fairseq-train`` builds it (on the CPU), and
    discard it: the plugin's checks of the position flags and every encoding's
    ``check_options`` and constructor run with the model's own widths and head counts,
    and raise what they raise. The dictionary is a stand-in of a few types (the data's may
    not exist yet; the embeddings, the part of the model that grows with it, are then
    small), with the segment separator where segments are used. ``args`` is left as it
    is (the build fills in a copy).

    Not on the meta device: there, torch's first random fill (every model has one) imports
    ``torch._dynamo``, which costs more than building the small models on the CPU."""
    dictionary = toy_dictionary(8)
    if uses_segments(args):
        dictionary.add_symbol(args.segment_separator)
    build_from_args(copy.copy(args), dictionary)
