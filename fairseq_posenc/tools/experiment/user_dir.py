"""A user's own fairseq ``--user-dir`` (their encodings), checked and imported in this process
as fairseq imports it.

A tool that runs fairseq for a user's encodings (``posenc-compare --user-dir DIR``) imports
DIR itself before any check: its own checks and models (the encodings' names and flags, the
``--train-args`` parse, parameter counts, the checkpoints it reads) then see the encodings
that DIR registers, and the tool passes ``--user-dir DIR`` to every fairseq command. DIR's
``__init__.py`` imports ``fairseq_posenc``, which registers the plugin.

:func:`load` imports DIR with fairseq's own ``import_user_module``: the same module name (DIR's
last component, DIR's parent on ``sys.path``) and fairseq's record of what it imported, so
that a fairseq command run in this process (``fairseq-generate`` in process) finds DIR
imported and does not import it again. What fairseq would stop on with a traceback, or not
at all until a later step, is a ``ValueError`` here that says what is wrong and what to do:
a missing directory, one without ``__init__.py``, a name that another module has, and an
import that fails (its file and line, and the command that shows the whole traceback).

An error that the user's code raises later, in a method the package calls (an encoding's
``check_options`` or constructor, while a tool builds a model), is told the same way
(:func:`failure`): the line of the user's code where it was raised, or where their code
called what raised it (:func:`users_line`), the error, and a command that shows the whole
traceback. An error raised without any frame of the user's code is the package's own
refusal (a ``ValueError`` whose message says what to do), not the user's code failing.
"""

from __future__ import annotations

import json
import os
import shlex
import site
import sys
import sysconfig
import traceback
from argparse import Namespace
from pathlib import Path
from typing import Optional

#: The package's own directory: its frames are no user's code.
_PACKAGE_DIR = Path(__file__).resolve().parents[2]

#: Where code that is no user's lies: the Python library, installed packages (the
#: environment's and the system's it may see), this package.
_LIBRARY = tuple(Path(p).resolve() for p in {
    *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
    *site.getsitepackages(), str(_PACKAGE_DIR)})

#: Where to read how a user directory is laid out.
HOW = 'docs/compare.md, "Your own encoding"'


def load(directory: Path) -> Path:
    """Import ``directory`` as fairseq's ``--user-dir`` (once per process); return its
    absolute path, the module named after its last component as given (a symbolic link is
    not resolved: fairseq names the module after the path it is given). ``ValueError``
    saying what is wrong and what to do (see the module docstring)."""
    path = Path(os.path.abspath(directory))
    name = path.name
    if not path.exists():
        raise ValueError(f"--user-dir {path}: no such directory; give the directory of your "
                         f"encodings, a Python package whose __init__.py imports "
                         f"fairseq_posenc and the modules that register them ({HOW})")
    if not path.is_dir():
        raise ValueError(f"--user-dir {path} is a file, not a directory; give a directory "
                         f"with an __init__.py that imports fairseq_posenc and "
                         f"{path.stem if path.suffix == '.py' else 'your module'} ({HOW})")
    if not (path / "__init__.py").is_file():
        modules = sorted(p.stem for p in path.glob("*.py"))
        example = modules[0] if modules else "YOUR_MODULE"
        raise ValueError(f"--user-dir {path} has no __init__.py: fairseq imports the directory "
                         f"as the Python package {name!r}. Add {path / '__init__.py'} with "
                         f"the lines 'import fairseq_posenc' and 'from . import {example}' "
                         f"(each module that registers an encoding) ({HOW})")
    already = sys.modules.get(name)
    if already is not None and str(path) not in list(getattr(already, "__path__", [])):
        where = getattr(already, "__file__", None) or "built in"
        raise ValueError(f"--user-dir {path}: fairseq imports it as the module {name!r}, but "
                         f"a module of that name is imported already ({where}); rename the "
                         "directory to a name of its own")
    from fairseq.utils import import_user_module

    saved_path = list(sys.path)
    try:
        import_user_module(Namespace(user_dir=str(path)))
    except Exception as error:  # the user's code: any error it raises
        # what fairseq recorded as imported, and the parent it put on sys.path, are undone:
        # a second attempt imports again
        getattr(import_user_module, "memo", set()).discard(str(path))
        sys.path[:] = saved_path
        raise ValueError(import_failure(path, error)) from error
    return path


def import_failure(path: Path, error: BaseException) -> str:
    """What went wrong importing ``path``: the file and line of the user's code where it
    did (a syntax error's own), the error, and how to see the whole traceback."""
    show = (f"{shlex.quote(sys.executable)} -c "
            + shlex.quote(f"import sys; sys.path.insert(0, {json.dumps(str(path.parent))}); "
                          f"import {path.name}"))
    return f"--user-dir {path}: " + failure("importing it", error, show, path)


def failure(what: str, error: BaseException, show: str,
            directory: Optional[Path] = None) -> str:
    """``WHAT failed at FILE, line N: TYPE: MESSAGE. Fix it there; SHOW shows the whole
    traceback``: the line :func:`users_line` finds (else the deepest frame, else
    ``directory``'s ``__init__.py``), ``show`` a command that reproduces the error."""
    frames = traceback.extract_tb(error.__traceback__)
    where = users_line(error, directory) or (
        f"{frames[-1].filename}, line {frames[-1].lineno}" if frames
        else str(Path(directory or ".") / "__init__.py"))
    return (f"{what} failed at {where}: {type(error).__name__}: {error}. Fix it there; "
            f"{show} shows the whole traceback")


def users_line(error: BaseException, directory: Optional[Path] = None) -> Optional[str]:
    """``FILE, line N`` of the user's code in ``error``: a syntax error's own line, else the
    deepest frame of code outside the Python library, the installed packages and this
    package (where their code raised, or called what raised), else the deepest frame
    inside ``directory`` (a user directory that lies among installed packages); None where
    the error went through no code of the user's."""
    directory = Path(directory).resolve() if directory is not None else None

    def inside(filename: str) -> bool:
        return directory is not None and Path(filename).resolve().is_relative_to(directory)

    if isinstance(error, SyntaxError) and error.filename and (
            _users(error.filename) or inside(error.filename)):
        return f"{error.filename}, line {error.lineno}"
    frames = traceback.extract_tb(error.__traceback__)
    frame = (next((f for f in reversed(frames) if _users(f.filename)), None)
             or next((f for f in reversed(frames) if inside(f.filename)), None))
    return f"{frame.filename}, line {frame.lineno}" if frame else None


def _users(filename: str) -> bool:
    """Whether ``filename`` is code of the user's: not importlib's frozen frames, the
    Python library, an installed package or this package."""
    if filename.startswith("<"):
        return False
    file = Path(filename).resolve()
    return not any(file.is_relative_to(d) for d in _LIBRARY)
