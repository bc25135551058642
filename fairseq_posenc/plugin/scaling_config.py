"""The ``--rope-scaling`` flags of the plugin's translation tasks, made from the registry of
RoPE scalings (:mod:`fairseq_posenc.core.rope_scaling_registry`): ``--rope-scaling``'s
choices, the flags every scaling shares and each scaling's options, with their declared
types, defaults and help.

fairseq reads a task's flags from its configuration dataclass twice: when it builds the
parser (the task's ``add_args``) and when it turns the parsed flags into the task's
configuration (the dataclass registered for the task's name). Both come after the
``--user-dir`` modules are imported, so :func:`refresh_task_config`, which the tasks'
``add_args`` calls, remakes the dataclass from the registry then, with the scalings a
``--user-dir`` registered, and registers it for the task in fairseq's three places
(the task's class, fairseq's map of task configurations, Hydra's config store). The
dataclass made at import (:data:`RopeScalingConfig`) holds the built-in scalings' flags.
"""

import dataclasses  # no ``from __future__ import annotations``: fairseq reads the config's
from typing import Any, Optional, Sequence  # field types at run time

from fairseq.dataclass import ChoiceEnum
from fairseq.tasks.translation import TranslationConfig

from ..core.declarations import Declared
from ..core.rope_scaling_registry import (COMMON, ROPE_SCALINGS, length_readers,
                                          scaling_help, scaling_options)
from ..core.rope_scalings import BUILT_IN


def _original_len_help(names: Sequence[str]) -> str:
    readers = [name for name in length_readers() if name in names]
    named = (", ".join(readers[:-1]) + " or " + readers[-1]) if len(readers) > 1 else (
        "".join(readers) or "a scaling that reads it")
    return (f"with --rope-scaling {named}: the training length L in tokens with </s> "
            "(default: the checkpoint's --train-max-len)")


def _field(option: Declared, names: Sequence[str]) -> tuple[str, Any, Any]:
    """``option`` as a dataclass field of fairseq's: name, type, field (``--rope-scaling``:
    the scalings ``names``)."""
    if option.name == "rope_scaling":
        kind: Any = Optional[ChoiceEnum(list(names))]
        text = scaling_help(names)
    else:
        kind = (bool if option.type is None
                else ChoiceEnum(list(option.choices)) if option.choices else option.type)
        kind = Optional[kind] if option.optional else kind
        text = (_original_len_help(names) if option.name == "rope_scaling_original_len"
                else option.help)
    return option.name, kind, dataclasses.field(default=option.default,
                                                metadata={"help": text})


def scaling_fields(names: Optional[Sequence[str]] = None) -> list[tuple[str, Any, Any]]:
    """The fields of every flag that the scalings ``names`` (None: every registered one)
    read: the common ones, then each scaling's options (an option two scalings declare is
    one flag)."""
    names = list(ROPE_SCALINGS) if names is None else names
    return [_field(option, names) for option in (*COMMON, *scaling_options(names))]


def scaling_config(base: type, name: Optional[str] = None,
                   names: Optional[Sequence[str]] = None) -> type:
    """A dataclass of ``base`` and the scaling flags (:func:`scaling_fields`)."""
    return dataclasses.make_dataclass(name or base.__name__, scaling_fields(names),
                                      bases=(base,))


#: The configuration of a translation task with the built-in scalings' flags (whatever
#: else is registered when the plugin is imported: the tasks' ``add_args`` adds it).
RopeScalingConfig = scaling_config(TranslationConfig, "RopeScalingConfig", BUILT_IN)
RopeScalingConfig.__module__ = __name__


def refresh_task_config(task: type) -> type:
    """The configuration dataclass of ``task`` (a class registered with fairseq) remade
    with every scaling registered now, and registered for it: fairseq's parser, its
    conversion of the flags and Hydra's config store read it."""
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY
    from hydra.core.config_store import ConfigStore

    current = getattr(task, "__dataclass")
    base = getattr(current, "scaling_base", current)
    remade = scaling_config(base, base.__name__)
    remade.__module__ = base.__module__
    remade.scaling_base = base
    setattr(task, "__dataclass", remade)
    for name in [name for name, cls in TASK_REGISTRY.items() if cls is task]:
        TASK_DATACLASS_REGISTRY[name] = remade
        node = remade()
        node._name = name
        ConfigStore.instance().store(name=name, group="task", node=node, provider="fairseq")
    return remade
