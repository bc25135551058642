"""A fresh interpreter's preamble that makes some top-level packages unimportable.

``blocked_run(names)`` is Python source for ``python -c``: it puts a finder first on
``sys.meta_path`` that raises ``ImportError`` for each of ``names`` and their submodules
and records each attempt, checks that the block holds, runs the script named by
``sys.argv[1]`` (its own arguments after it) as ``__main__``, and prints
``blocked imports tried: [...] loaded: [...]``: what the script tried to import of them,
and what of them is loaded at its end (both ``[]`` for a script that never needs them).
"""

from __future__ import annotations

import textwrap


def blocked_run(names: tuple[str, ...]) -> str:
    return textwrap.dedent(f"""
        import runpy, sys

        NAMES = {tuple(names)!r}
        attempts = []

        def blocked(name):
            return any(name == n or name.startswith(n + ".") for n in NAMES)

        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if blocked(name):
                    attempts.append(name)
                    raise ImportError(f"blocked: {{name}}")
                return None

        sys.meta_path.insert(0, Blocker())
        for name in NAMES:
            try:
                __import__(name)
            except ImportError:
                pass
            else:
                raise SystemExit(f"the blocker let {{name}} through")
        attempts.clear()
        sys.argv = [sys.argv[1], *sys.argv[2:]]
        runpy.run_path(sys.argv[0], run_name="__main__")
        loaded = [m for m in sys.modules if blocked(m)]
        print("blocked imports tried:", attempts, "loaded:", loaded)
    """)
