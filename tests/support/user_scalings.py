"""A RoPE scaling written as a user writes one (``docs/rope-scaling.md``), for the tests that
show the package treats it as its own: as a ``--user-dir`` directory's source
(:data:`USER_DIR_SOURCE`, written by :func:`write_user_dir`) and registered in this process
for one test (:func:`registered`)."""

from __future__ import annotations

import contextlib
import sys
import textwrap
from pathlib import Path
from typing import Iterator

from fairseq_posenc.core.rope_scaling_registry import ROPE_SCALINGS

#: ``power``: every frequency divided by ``s^p`` (``--test-scale-power p``, 0 <= p <= 1);
#: ``p = 1`` is position interpolation, ``p = 0.5`` with ``s = 4`` is ``linear`` with 2.
USER_DIR_SOURCE = textwrap.dedent('''
    """A user's RoPE scaling, registered when fairseq imports this --user-dir."""

    from typing import Annotated, Any, Mapping, Optional

    import fairseq_posenc  # noqa: F401  (the plugin: this directory replaces its --user-dir)
    from fairseq_posenc.nn import Option, Scaled, Unscaled, register_rope_scaling


    def check_power(values: Mapping[str, Any]) -> None:
        if values["test_scale_power"] > 1:
            raise ValueError("--test-scale-power must be at most 1 (1: position "
                             f"interpolation), got {values['test_scale_power']}")


    @register_rope_scaling("power", check=check_power, help="frequencies divided by s^p")
    def power(rope: Unscaled, factor: float, original_len: Optional[int], lengths, *,
              test_scale_power: Annotated[float, Option(
                  "with --rope-scaling power: p, the frequencies divided by s^p (default 0.5)",
                  minimum=0)] = 0.5) -> Scaled:
        return Scaled(rope.theta / factor ** test_scale_power)
''')


def write_user_dir(parent: Path, name: str = "myscale") -> Path:
    """The directory ``parent/name`` with :data:`USER_DIR_SOURCE` as its ``__init__.py``."""
    directory = parent / name
    directory.mkdir()
    (directory / "__init__.py").write_text(USER_DIR_SOURCE)
    return directory


@contextlib.contextmanager
def registered(tmp_path: Path) -> Iterator[str]:
    """The user's scaling imported from a directory under ``tmp_path`` and registered
    while the block runs (afterwards removed, and the plugin's task configurations remade
    without it); its name."""
    write_user_dir(tmp_path, "user_scaling_under_test")
    sys.path.insert(0, str(tmp_path))
    try:
        import user_scaling_under_test  # noqa: F401
        yield "power"
    finally:
        ROPE_SCALINGS.pop("power", None)
        sys.modules.pop("user_scaling_under_test", None)
        sys.path.remove(str(tmp_path))
        if "fairseq" in sys.modules:
            from fairseq_posenc.plugin.extrapolation import TranslationExtrapolationTask
            from fairseq_posenc.plugin.generation import TranslationGNMTTask
            from fairseq_posenc.plugin.scaling_config import refresh_task_config

            for task in (TranslationExtrapolationTask, TranslationGNMTTask):
                refresh_task_config(task)
