"""Models and dictionaries built as ``fairseq-train`` builds them, for tools and tests.

The benchmark, ``posenc-params`` and the tests' helpers all build models the same way:
fairseq's own argument parsing for an architecture and its flags (so every model flag and
every architecture default applies), a ``TranslationTask`` over one joined dictionary, and
the task's ``build_model``. This module is that one way.
"""

from __future__ import annotations

import argparse
from typing import Sequence

import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.tasks.translation import TranslationTask

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
