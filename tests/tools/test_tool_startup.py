"""The command-line tools start without fairseq, and the plugin still registers with it.

Each check runs in a fresh interpreter (``sys.modules`` of this test process holds fairseq
already): every console script of setup.py answers ``--help`` without importing fairseq (and
the text-only tools without torch), with a help text for every option and no Sphinx markup;
``posenc-convert --help`` imports no torch either and answers within 2 seconds;
``posenc-score`` scores without fairseq; ``import fairseq_posenc`` imports neither, and
``import fairseq_posenc.nn`` no fairseq and no tool. The plugin registers its model,
architectures, tasks and checkpoint globals whether fairseq imports it as the
``--user-dir`` or the process imported the package first.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from functools import lru_cache
from pathlib import Path

import pytest

from tests.support.cli_utils import REPO_ROOT, USER_DIR, subprocess_env

#: ``posenc-NAME = module:function`` of setup.py's console scripts.
SCRIPTS = dict(re.findall(r'"(posenc-[a-z-]+) = ([\w.]+):main"',
                          (REPO_ROOT / "setup.py").read_text(encoding="utf-8")))
#: The tools that only read and write text: no torch either.
TEXT_ONLY = ("posenc-score", "posenc-prepare-corpus", "posenc-prepare-wmt")
#: The tools whose --help imports no torch: the text-only ones, and posenc-convert, whose
#: --help must answer within 2 seconds (torch's import alone takes about that).
LIGHT_HELP = (*TEXT_ONLY, "posenc-convert")
#: reST/Sphinx markup: ``literal`` and roles such as :func:`name`.
MARKUP = re.compile(r"``|:[a-z]+:`")


def python(code: str, cwd: Path = REPO_ROOT) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


LOADED = """
def loaded():
    return {name: name in sys.modules for name in ("fairseq", "torch")}
"""


@lru_cache(maxsize=None)
def help_of(script: str) -> dict:
    """``main(["--help"])`` of ``script``'s module: what it imported, its output, and every
    option (of the parser and its subcommands) without a help text, or whose parser's
    rendered help has markup."""
    return python(LOADED + f"""
import argparse, importlib, io, json, re, sys, contextlib
parsers = []
parse = argparse.ArgumentParser.parse_known_args

def recording(self, *args, **kwargs):
    parsers.append(self)
    return parse(self, *args, **kwargs)

argparse.ArgumentParser.parse_known_args = recording
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    try:
        importlib.import_module({SCRIPTS[script]!r}).main(["--help"])
    except SystemExit:
        pass
imported = loaded()
missing, markup = [], []
todo = parsers[:1]
while todo:
    parser = todo.pop()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            todo += action.choices.values()
            missing += [f"{{parser.prog}} {{choice.dest}}" for choice in action._choices_actions
                        if not (choice.help or "").strip()]
            continue
        if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
            missing.append(f"{{parser.prog}} {{'/'.join(action.option_strings) or action.dest}}")
    markup += [f"{{parser.prog}}: {{line.strip()}}" for line in parser.format_help().splitlines()
               if re.search({MARKUP.pattern!r}, line)]
print(json.dumps({{**imported, "parsers": len(parsers), "output": out.getvalue(),
                  "missing": missing, "markup": markup}}))
""")


def test_every_console_script_is_checked():
    assert len(SCRIPTS) == 11 and "posenc-score" in SCRIPTS and "posenc-convert" in SCRIPTS


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_does_not_import_fairseq(script):
    run = help_of(script)
    assert run["parsers"], f"{script} --help built no parser"
    assert "usage:" in run["output"]
    assert not run["fairseq"], f"{script} --help imports fairseq"
    assert "tensorboardX" not in run["output"]
    if script in LIGHT_HELP:
        assert not run["torch"], f"{script} --help imports torch"


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_option_has_plain_help(script):
    run = help_of(script)
    assert run["missing"] == [], f"options without a help text: {run['missing']}"
    assert run["markup"] == [], "Sphinx markup in --help:\n" + "\n".join(run["markup"])


def test_convert_answers_help_within_two_seconds():
    """The console script's own start: a fresh interpreter, the package, the parser."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "fairseq_posenc.tools.convert_cli", "--help"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          env=subprocess_env())
    elapsed = time.monotonic() - started
    assert done.returncode == 0 and "usage: posenc-convert" in done.stdout, done.stderr
    assert elapsed < 2.0, f"posenc-convert --help took {elapsed:.2f} s"


def test_scoring_imports_neither_fairseq_nor_torch(tmp_path):
    (tmp_path / "ref.de").write_text("Das ist ein kleiner Test.\nNoch ein Satz hier.\n")
    (tmp_path / "a.de").write_text("Das ist ein Test.\nNoch ein Satz hier.\n")
    (tmp_path / "b.de").write_text("Das ist kleiner Test.\nEin Satz.\n")
    (tmp_path / "src.en").write_text("This is a small test.\nAnother sentence here.\n")
    run = python(LOADED + """
import json, sys
from fairseq_posenc.tools.evaluation.cli import main
code = main(["--ref", "ref.de", "--hyp", "a=a.de", "--hyp", "b=b.de", "--src", "src.en",
             "--out", "out"])
print(json.dumps({**loaded(), "code": code}))
""", cwd=tmp_path)
    assert run == {"fairseq": False, "torch": False, "code": 0}
    assert json.loads((tmp_path / "out" / "scores.json").read_text())["systems"]["b"]


def test_importing_the_package_imports_neither():
    assert python(LOADED + """
import json, sys
import fairseq_posenc
print(json.dumps(loaded()))
""") == {"fairseq": False, "torch": False}


def test_the_torch_api_imports_no_fairseq_and_no_tool():
    """``fairseq_posenc.nn`` loads torch and the model core alone: no fairseq, none of the
    tools' packages, not the plugin's fairseq glue."""
    run = python(LOADED + """
import json, sys
import fairseq_posenc.nn
glue = ("models", "attention", "architectures", "generation", "extrapolation", "build",
        "input_positions", "checkpoint", "wmt", "compare", "benchmark", "experiment",
        "evaluation", "inspection", "corpus", "hypotheses")
ours = [m for m in sys.modules if m.split(".")[0] == "fairseq_posenc"]
print(json.dumps({**loaded(), "glue": [m for m in ours if m.split(".")[1:2] and
                                       m.split(".")[1] in glue]}))
""")
    assert run == {"fairseq": False, "torch": True, "glue": []}


REGISTERED = """
import argparse, json
import torch.serialization
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY

def registered():
    return {"model": "transformer_posenc" in MODEL_REGISTRY,
            "archs": all(a in ARCH_MODEL_REGISTRY for a in
                         ("transformer_wmt_en_de_diet_rel", "transformer_tiny_t5",
                          "transformer_posenc_tiny")),
            "tasks": all(t in TASK_REGISTRY
                         for t in ("translation_gnmt", "translation_extrapolation")),
            "globals": argparse.Namespace in torch.serialization.get_safe_globals()}
"""
ALL = {"model": True, "archs": True, "tasks": True, "globals": True}


def test_user_dir_registers_after_fairseq(tmp_path):
    """fairseq-train's order: fairseq first, then ``import_user_module`` imports us."""
    assert python(f"""
import argparse, json, sys
import fairseq
from fairseq import utils
assert "fairseq_posenc" not in sys.modules
{REGISTERED}
before = registered()
utils.import_user_module(argparse.Namespace(user_dir={USER_DIR!r}))
print(json.dumps({{"before": before["model"], **registered()}}))
""", cwd=tmp_path) == {"before": False, **ALL}


@pytest.mark.parametrize("first", [
    "fairseq_posenc",  # the package alone: import_user_module then skips it as imported
    "fairseq_posenc.tools.textprep.text",  # a module of ours that needs no fairseq
    "fairseq_posenc.plugin.models",  # one that imports fairseq itself, before it is complete
    "fairseq_posenc.plugin.attention",
    "fairseq_posenc.nn",  # the torch-only API
])
def test_package_first_then_fairseq_registers(tmp_path, first):
    assert python(f"""
import argparse, importlib, json, sys
importlib.import_module({first!r})
import fairseq
from fairseq import utils
utils.import_user_module(argparse.Namespace(user_dir={USER_DIR!r}))
{REGISTERED}
print(json.dumps(registered()))
""", cwd=tmp_path) == ALL


def test_register_is_idempotent():
    assert python(f"""
import json
import fairseq_posenc
fairseq_posenc.register()
fairseq_posenc.register()
{REGISTERED}
print(json.dumps(registered()))
""") == ALL
