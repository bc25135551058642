"""The package's layers are import-linter's contracts in ``.importlinter``, and they hold.

``lint-imports`` (import-linter, pinned in requirements-test.txt) builds the graph of every
import in the package, those inside functions too, and checks the six contracts of
``.importlinter``: the layers (tools over plugin over core, none importing from one above
it); core without fairseq; core below the torch API (``fairseq_posenc.nn``); the torch API
without fairseq, the plugin or the tools; the plugin beside the torch API, not on it; no
import circles. The first test runs it on the checkout. The others run it, with the same
file, on a small package of the same layout in a temporary folder: clean, it keeps every
contract; with one forbidden import added, exactly the contracts that forbid that import or
where it leads are broken, and the report names the import.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".importlinter"


def contract_names() -> dict[str, str]:
    """Each contract's id (its section's last part) and name, as ``.importlinter`` has them."""
    parser = configparser.ConfigParser()
    parser.read(CONFIG, encoding="utf-8")
    prefix = "importlinter:contract:"
    return {section[len(prefix):]: parser[section]["name"]
            for section in parser.sections() if section.startswith(prefix)}


def lint_imports(cwd: Path) -> tuple[int, str, dict[str, str]]:
    """Run the venv's ``lint-imports`` with ``.importlinter`` in ``cwd`` (which it puts first
    on ``sys.path``, so that the ``fairseq_posenc`` there is the one checked): its exit
    status, its output, and each contract's name with ``KEPT`` or ``BROKEN``."""
    command = Path(sys.executable).parent / "lint-imports"
    if not command.exists():
        pytest.fail(f"{command} is missing: install the test requirements "
                    "(pip install -r requirements-test.txt; bash scripts/test.sh does)")
    env = dict(os.environ, COLUMNS="300", NO_COLOR="1")  # one line per contract, no colours
    done = subprocess.run([str(command), "--no-cache", "--no-logo", str(CONFIG)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    status = dict(re.findall(r"^(.+?) (KEPT|BROKEN)$", output, flags=re.MULTILINE))
    return done.returncode, output, status


def test_the_package_keeps_every_contract():
    names = contract_names()
    assert len(names) == 6, names  # this file's docstring names each one
    code, output, status = lint_imports(ROOT)
    assert code == 0, output
    assert status == {name: "KEPT" for name in names.values()}, output


# A package with the layout the contracts name, each layer importing only what it may.
CLEAN = {
    "__init__.py": "from .plugin import registration\n",
    "core/__init__.py": "",
    "core/attention.py": "import torch\n",
    "core/encodings/__init__.py": "from .. import attention\n",
    "nn_checks.py": "import torch\n",
    "nn.py": "from . import nn_checks\nfrom .core import attention\n",
    "plugin/__init__.py": "",
    "plugin/registration.py": "",
    "plugin/models.py": "from ..core import encodings\n",
    "plugin/glue.py": "import fairseq.models\nfrom . import models\n",
    "tools/__init__.py": "",
    "tools/compare.py": "from fairseq_posenc.plugin import models\n",
    "tools/layers.py": "from fairseq_posenc import nn\nfrom . import compare\n",
}

# (the file, the import added to it, the contracts it breaks, what the report shows): the
# first contract forbids the import; the others forbid where it leads, since every importer
# of the file imports it too (nn imports core.attention, the plugin core.encodings and so
# core.attention), and an import up a layer closes a circle with the imports down.
VIOLATIONS = [
    ("core/attention.py", "from ..plugin import models", {"layers", "torch-api", "no-circles"},
     "fairseq_posenc.core.attention -> fairseq_posenc.plugin.models"),
    ("core/encodings/__init__.py", "import fairseq_posenc.tools.compare",
     {"layers", "no-circles"}, "fairseq_posenc.core.encodings -> fairseq_posenc.tools.compare"),
    ("core/attention.py", "def later():\n    from fairseq_posenc.plugin import models",
     {"layers", "torch-api", "no-circles"},
     "fairseq_posenc.core.attention -> fairseq_posenc.plugin.models (l.3)"),
    ("plugin/models.py", "from ..tools import compare", {"layers", "no-circles"},
     "fairseq_posenc.plugin.models -> fairseq_posenc.tools.compare"),
    ("core/attention.py", "import fairseq", {"core-torch-only", "torch-api"},
     "fairseq_posenc.core.attention -> fairseq"),
    ("core/encodings/__init__.py", "from fairseq.models import transformer",
     {"core-torch-only"}, "fairseq_posenc.core.encodings -> fairseq"),
    ("core/attention.py", "from .. import nn",
     {"core-below-torch-api", "plugin-beside-torch-api", "no-circles"},
     "fairseq_posenc.core.attention -> fairseq_posenc.nn"),
    ("nn_checks.py", "import fairseq", {"torch-api"}, "fairseq_posenc.nn_checks -> fairseq"),
    ("nn.py", "from .plugin import registration", {"torch-api"},
     "fairseq_posenc.nn -> fairseq_posenc.plugin.registration"),
    ("plugin/models.py", "from ..nn import attention", {"plugin-beside-torch-api"},
     "fairseq_posenc.plugin.models -> fairseq_posenc.nn"),
    ("core/attention.py", "from . import encodings", {"no-circles"},
     "No cycles are allowed in fairseq_posenc.core."),
]


def write_package(where: Path, extra: tuple[str, str] | None = None) -> None:
    package = where / "fairseq_posenc"
    for name, text in CLEAN.items():
        if extra and extra[0] == name:
            text += extra[1] + "\n"
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text, encoding="utf-8")


def test_a_package_that_follows_the_layers_keeps_every_contract(tmp_path):
    write_package(tmp_path)
    code, output, status = lint_imports(tmp_path)
    assert code == 0, output
    assert status == {name: "KEPT" for name in contract_names().values()}, output


@pytest.mark.parametrize("file, line, contracts, report", VIOLATIONS,
                         ids=[f"{file}: {line.splitlines()[-1].strip()}"
                              for file, line, _, _ in VIOLATIONS])
def test_a_forbidden_import_breaks_its_contracts(tmp_path, file, line, contracts, report):
    write_package(tmp_path, (file, line))
    code, output, status = lint_imports(tmp_path)
    assert code != 0, output
    assert status == {name: "BROKEN" if contract in contracts else "KEPT"
                      for contract, name in contract_names().items()}, output
    assert report in output, output


def test_the_core_and_the_torch_api_know_no_command_line():
    """An encoding's options are its constructor's arguments: ``argparse`` (and a Namespace)
    belongs to the plugin and the tools, never to the core or ``fairseq_posenc.nn``."""
    package = ROOT / "fairseq_posenc"
    files = [*sorted((package / "core").rglob("*.py")), package / "nn.py", package / "nn_checks.py"]
    found = [f"{path.relative_to(ROOT)}:{number}" for path in files
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bargparse\b|\bNamespace\b", line)]
    assert not found, found
