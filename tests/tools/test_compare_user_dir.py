"""posenc-compare --user-dir: a researcher's own encoding, in a fairseq user directory of
their own, compared with the built-in ones (fairseq_posenc/tools/experiment/user_dir.py).

End to end (slow): the user directory, written here, is imported by every process of the
comparison (the command, each ``--parallel`` worker, fairseq-train and fairseq-generate), and
the report has the encoding's row; its scores are sacreBLEU's command line on the files the
run wrote, its option reaches the model (the checkpoint's own saved arguments), and the
checkpoint holds its parameters. Fast: a directory that is missing, has no ``__init__.py``,
fails to import (a syntax error, an error raised by its code) or registers none of the
encodings asked for stops the command before anything is written, with the file and what to
do; so does an encoding whose constructor refuses the model's real head count (which
``check_encoding``'s 2 heads do not show) or whose ``check_options`` raises, each built
before any work, with the row, the user's file and line (found here in the module's text)
and a command whose traceback (run here) names them; an option of the user's encoding is a
flag that ``--train-args`` checks take.

The fast tests import the user directory in this process: the fixture ``isolated`` removes
what the import left (its modules, the encodings it registered, fairseq's record of it).
The slow test imports it only in the subprocesses.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fairseq_posenc.core.encodings import ENCODINGS
from fairseq_posenc.tools.compare import cli, fairseq_flags, plan, settings as settings_mod
from tests.support.cli_utils import console_script, subprocess_env
from tests.tools.test_compare import ROOT, base_args, raw, run_main  # noqa: F401  (raw: fixture)

#: The user's encoding, as docs/compare.md ("Your own encoding") writes one, under a name
#: that no other test registers.
ENCODING = '''\
from typing import Annotated

import torch

from fairseq_posenc.nn import DistanceBias, Option, register_encoding


@register_encoding
class Laplace(DistanceBias):
    name = "{name}"

    def __init__(self, *, num_heads: int,
                 {name}_width: Annotated[float, Option("width of the bias", metavar="W")] = 4.0):
        super().__init__()
        self.width = {name}_width
        self.scale = torch.nn.Parameter(torch.ones(num_heads))

    def distance_bias(self, r_lo, r_hi):
        r = torch.arange(r_lo, r_hi + 1, dtype=self.scale.dtype, device=self.scale.device)
        return -self.scale[:, None] * r.abs()[None, :] / self.width

    @classmethod
    def shares_layers(cls, values):
        return True
'''

INIT = "import fairseq_posenc  # noqa: F401  (the plugin)\nfrom . import laplace  # noqa: F401\n"


def user_dir(parent: Path, name: str, package: str = "my_encodings",
             module: str = ENCODING, init: str = INIT) -> Path:
    """A fairseq user directory ``parent/package`` whose ``laplace.py`` registers ``name``."""
    directory = parent / package
    directory.mkdir(parents=True)
    (directory / "laplace.py").write_text(module.format(name=name))
    (directory / "__init__.py").write_text(init)
    return directory


# --- end to end ----------------------------------------------------------------------------

SLOW_NAME = "laplace_compare_e2e"


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """The toy corpus with 2 test sentences: an untrained model's beam search is the
    comparison's longest step per sentence."""
    out = tmp_path_factory.mktemp("compare") / "raw"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_toy_corpus.py"), "--out",
                    str(out), "--seed", "3", "--train", "300", "--valid", "10", "--test", "2"],
                   check=True, capture_output=True)
    return out


def compare(out: Path, data: Path, directory: Path, *extra: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fairseq_posenc.tools.compare", str(out), "--data", str(data),
         "-s", "en", "-t", "de", "--user-dir", str(directory), "--test", "test", "--cpu",
         "--batch-tokens", "512", "--bpe-merges", "100", "--workers", "1", *extra],
        capture_output=True, text=True, env=subprocess_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


def saved(checkpoint: Path):
    import torch

    return torch.load(checkpoint, map_location="cpu", weights_only=False)


@pytest.mark.slow  # two comparisons: the user's encoding against sinusoidal, then alone
def test_a_users_encoding_is_compared_and_its_option_reaches_the_model(small, tmp_path):
    started = time.monotonic()
    directory = user_dir(tmp_path, SLOW_NAME)
    out = tmp_path / "cmp"
    # --parallel 2: each run in a worker process of its own, which imports the directory
    said = compare(out, small, directory, "--encodings", SLOW_NAME, "sinusoidal",
                   "--max-update", "12", "--parallel", "2")
    assert f"report: {out / 'report.md'}" in said

    assert json.loads((out / "settings.json").read_text())["user_dir"] == str(directory)
    for encoding in (SLOW_NAME, "sinusoidal"):  # every fairseq command got the directory
        run = out / "runs" / encoding / "seed1"
        for log in (run / "train.log", run / "tests" / "test" / "generate.log"):
            assert f"'user_dir': '{directory}'" in log.read_text(), log
    report = json.loads((out / "report.json").read_text())
    row = next(r for r in report["summary"] if r["encoding"] == SLOW_NAME)
    [run] = [r for r in report["runs"] if r["encoding"] == SLOW_NAME]
    assert run["finished"] and row["n"] == 1
    ref = out / "data" / "raw" / "test.de"
    hyp = out / run["tests"]["test"]["hypotheses"]
    bleu, chrf = json.loads(subprocess.run(
        [console_script("sacrebleu"), str(ref), "-i", str(hyp), "-m", "bleu", "chrf", "-w", "6"],
        capture_output=True, text=True, check=True, env=subprocess_env()).stdout)
    assert row["bleu_mean"] == pytest.approx(bleu["score"], abs=0.01)
    assert row["chrf_mean"] == pytest.approx(chrf["score"], abs=0.01)
    page = (out / "report.md").read_text()
    assert f"| `{SLOW_NAME}`" in page and f"ran with `--user-dir {directory}`" in page
    assert (out / "runs" / SLOW_NAME / "seed1" / "inspect" / "index.html").is_file()
    state = saved(out / run["checkpoint"])
    assert state["cfg"]["model"].arch == f"transformer_tiny_{SLOW_NAME}"
    assert getattr(state["cfg"]["model"], f"{SLOW_NAME}_width") == 4.0  # the default
    assert state["model"]["encoder.pos_encodings.0.scale"].shape == (4,)  # one per head
    first = time.monotonic() - started

    # its option in --train-args (an option of its own: a comparison of its own), on the
    # data the first comparison prepared, in this process (the default launcher)
    alone = tmp_path / "alone"
    compare(alone, out / "data", directory, "--encodings", SLOW_NAME, "--max-update", "1",
            f"--train-args=--{SLOW_NAME.replace('_', '-')}-width 2")
    report = json.loads((alone / "report.json").read_text())
    assert [(r["encoding"], r["finished"]) for r in report["runs"]] == [(SLOW_NAME, True)]
    state = saved(alone / report["runs"][0]["checkpoint"])
    assert getattr(state["cfg"]["model"], f"{SLOW_NAME}_width") == 2.0
    print(f"\nagainst sinusoidal {first:.1f} s, alone {time.monotonic() - started - first:.1f} s")


# --- before any work -----------------------------------------------------------------------

@pytest.fixture
def isolated():
    """What importing a user directory in this process leaves, removed afterwards: its
    modules, the encodings it registered, the sys.path entry and fairseq's record of it."""
    from fairseq.utils import import_user_module

    modules, encodings, path = set(sys.modules), set(ENCODINGS), list(sys.path)
    memo = set(getattr(import_user_module, "memo", set()))
    yield
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    for name in set(ENCODINGS) - encodings:
        del ENCODINGS[name]
    sys.path[:] = path
    import_user_module.memo = memo


def stops(raw: Path, tmp_path: Path, capsys, directory: Path, *encodings: str,  # noqa: F811
          extra: tuple[str, ...] = ()) -> str:
    """What the command says when it stops; nothing is written."""
    out = tmp_path / "cmp"
    said = run_main(base_args(out, raw, "--user-dir", str(directory), "--encodings",
                              *(encodings or ("sinusoidal",)), *extra), capsys)
    assert not out.exists()
    return said


def test_a_missing_directory_or_a_file_is_refused(raw, tmp_path, capsys):  # noqa: F811
    said = stops(raw, tmp_path, capsys, tmp_path / "nowhere")
    assert f"posenc-compare: --user-dir {tmp_path / 'nowhere'}: no such directory" in said
    assert "__init__.py imports fairseq_posenc" in said
    (tmp_path / "laplace.py").write_text(ENCODING.format(name="laplace_as_file"))
    said = stops(raw, tmp_path, capsys, tmp_path / "laplace.py")
    assert f"--user-dir {tmp_path / 'laplace.py'} is a file, not a directory" in said
    assert "imports fairseq_posenc and laplace" in said


def test_a_directory_without_init_is_refused(raw, tmp_path, capsys):  # noqa: F811
    directory = user_dir(tmp_path, "laplace_no_init")
    (directory / "__init__.py").unlink()
    said = stops(raw, tmp_path, capsys, directory)
    assert (f"--user-dir {directory} has no __init__.py: fairseq imports the directory as the "
            f"Python package 'my_encodings'. Add {directory / '__init__.py'} with the lines "
            "'import fairseq_posenc' and 'from . import laplace'") in said


def test_a_name_taken_by_another_module_is_refused(raw, tmp_path, capsys):  # noqa: F811
    directory = user_dir(tmp_path, "laplace_json", package="json")
    said = stops(raw, tmp_path, capsys, directory)
    assert (f"--user-dir {directory}: fairseq imports it as the module 'json', but a module of "
            f"that name is imported already ({sys.modules['json'].__file__}); rename") in said


def test_a_syntax_error_names_its_file_and_line(raw, tmp_path, capsys, isolated):  # noqa: F811
    broken = ENCODING.replace("super().__init__()", "super().__init__(")
    directory = user_dir(tmp_path, "laplace_syntax", module=broken)
    line = broken.splitlines().index("        super().__init__(") + 1
    said = stops(raw, tmp_path, capsys, directory)
    assert (f"--user-dir {directory}: importing it failed at {directory / 'laplace.py'}, line "
            f"{line}: SyntaxError: ") in said
    # the command it gives, run as given, shows the traceback
    show = said.split("Fix it there; ", 1)[1].split(" shows the whole traceback")[0]
    assert show.startswith(sys.executable) and "import my_encodings" in show
    shown = subprocess.run(show, shell=True, capture_output=True, text=True,
                           env=subprocess_env())
    assert shown.returncode == 1 and "SyntaxError" in shown.stderr
    assert f'File "{directory / "laplace.py"}", line {line}' in shown.stderr


@pytest.mark.parametrize("old, new, at, error", [
    # a name misspelt in a line that runs at import (an annotation)
    ('Option("width', 'Opton("width', 'Opton("width', "NameError: name 'Opton' is not defined"),
    ("import torch\n", "import torch\nimport torch_not_installed\n",
     "import torch_not_installed", "ModuleNotFoundError: No module named 'torch_not_installed'"),
    # the registration refuses the class: the line of the user's decorator, the registry's
    # words
    ('name = "{name}"', 'name = "t5"', "@register_encoding",
     "ValueError: my_encodings.laplace.Laplace: the encoding name 't5' is registered already"),
], ids=["NameError", "ModuleNotFoundError", "a name taken"])
def test_an_error_raised_by_the_users_code_names_its_line(  # noqa: F811  (raw)
        raw, tmp_path, capsys, isolated, old, new, at, error):
    module = ENCODING.replace(old, new)
    directory = user_dir(tmp_path, "laplace_raises", module=module)
    line = next(i for i, text in enumerate(module.splitlines(), 1) if at in text)
    said = stops(raw, tmp_path, capsys, directory)
    assert (f"--user-dir {directory}: importing it failed at {directory / 'laplace.py'}, line "
            f"{line}: {error}") in said


#: The user's encoding, taking 2 heads only: ``check_encoding``'s stacks have 2, the tiny
#: architecture 4.
TWO_HEADS = ENCODING.replace(
    "        super().__init__()\n",
    "        super().__init__()\n"
    "        if num_heads != 2:\n"
    "            raise ValueError(f\"{name} takes 2 heads, got {{num_heads}}\")\n")


def test_a_constructor_that_refuses_the_model_s_heads_stops_before_any_work(  # noqa: F811
        raw, tmp_path, capsys, isolated):
    from fairseq_posenc.testing import check_encoding

    name = "laplace_two_heads"
    directory = user_dir(tmp_path, name, module=TWO_HEADS)
    line = TWO_HEADS.splitlines().index("            raise ValueError(f\"{name} takes 2 "
                                        "heads, got {{num_heads}}\")") + 1
    said = stops(raw, tmp_path, capsys, directory, "sinusoidal", name)  # nothing written
    assert (f"posenc-compare: --encodings {name}: building its model failed at "
            f"{directory / 'laplace.py'}, line {line}: ValueError: {name} takes 2 heads, got "
            "4. Fix it there; ") in said
    check_encoding(name)  # what it passes: 2 heads
    # the command it gives, run as given, shows the traceback through the user's line
    show = said.split("Fix it there; ", 1)[1].split(" shows the whole traceback")[0]
    shown = subprocess.run(show, shell=True, capture_output=True, text=True,
                           env=subprocess_env(), timeout=120)
    assert shown.returncode == 1 and f"{name} takes 2 heads, got 4" in shown.stderr
    assert f'File "{directory / "laplace.py"}", line {line}, in __init__' in shown.stderr


def test_an_error_in_check_options_names_the_row_and_the_users_line(  # noqa: F811
        raw, tmp_path, capsys, isolated):
    name = "laplace_checks"
    check = ("    @classmethod\n    def check_options(cls, values):\n"
             "        if values[\"{name}_widht\"] <= 0:\n"
             "            raise ValueError(\"--{name}-width must be positive\")\n\n")
    module = ENCODING.replace("    @classmethod\n    def shares_layers", check
                              + "    @classmethod\n    def shares_layers")
    directory = user_dir(tmp_path, name, module=module)
    line = module.splitlines().index('        if values["{name}_widht"] <= 0:') + 1
    said = stops(raw, tmp_path, capsys, directory, "sinusoidal",
                 f"wide={name}:--{name.replace('_', '-')}-width 8")
    assert (f"posenc-compare: --encodings wide: building its model failed at "
            f"{directory / 'laplace.py'}, line {line}: KeyError: '{name}_widht'. Fix it "
            "there; ") in said and "Traceback" not in said


def test_an_encoding_the_directory_does_not_register_is_refused(raw, tmp_path, capsys,  # noqa: F811
                                                                isolated):
    directory = user_dir(tmp_path, "laplace_registered")
    said = stops(raw, tmp_path, capsys, directory, "laplace_registred", "sinusoidal")
    assert "posenc-compare: unknown encoding laplace_registred; choose from" in said
    assert " laplace_registered " in said.split("; ")[1]  # the directory's, among the choices
    assert (f"--user-dir {directory} registers laplace_registered; to register "
            "laplace_registred, its __init__.py imports the module whose encoding class has "
            "@register_encoding and name = \"laplace_registred\"") in said


def test_a_directory_that_imports_no_module_of_its_own_registers_none(raw, tmp_path,  # noqa: F811
                                                                      capsys, isolated):
    quiet = user_dir(tmp_path, "laplace_not_imported", init="import fairseq_posenc  # noqa\n")
    said = stops(raw, tmp_path, capsys, quiet, "laplace_not_imported")
    assert "unknown encoding laplace_not_imported" in said
    assert f"--user-dir {quiet} registers none; to register laplace_not_imported, its " in said


def test_without_user_dir_an_unknown_encoding_points_to_it(raw, tmp_path, capsys):  # noqa: F811
    said = run_main(base_args(tmp_path / "cmp", raw, "--encodings", "laplace_nowhere"), capsys)
    assert "an encoding of your own: pass --user-dir DIR" in said


def test_the_users_options_are_flags_that_train_args_checks_take(  # noqa: F811  (raw)
        raw, tmp_path, capsys, isolated):
    """Its flag passes for it and reaches its run's command as fairseq parses it; against
    sinusoidal it is refused as a flag of another encoding (the plugin's message), which it
    could only be when fairseq's parser knows it."""
    from fairseq import options

    directory = user_dir(tmp_path, "laplace_flags")
    args = base_args(tmp_path / "cmp", raw, "--user-dir", str(directory), "--encodings",
                     "laplace_flags", "--train-args=--laplace-flags-width 2.5")
    settings = cli.settings_of(cli.parser().parse_args(args), cli.parser())
    assert settings.user_dir == str(directory)
    plan.import_user_dir(settings)
    split = plan.batch(settings, 0)
    fairseq_flags.check_train_args(settings, ["laplace_flags"], split)
    command = plan.train_args(settings, _Corpus(), plan.Run("laplace_flags", 1), tmp_path, split)
    assert command[command.index("--user-dir") + 1] == str(directory)
    _, parsed = fairseq_flags.parse(options.get_training_parser, command)
    assert (parsed.arch, parsed.laplace_flags_width) == ("transformer_tiny_laplace_flags", 2.5)

    said = stops(raw, tmp_path, capsys, directory, "laplace_flags", "sinusoidal",
                 extra=("--train-args=--laplace-flags-width 2.5",))
    assert ("the fairseq-train command of sinusoidal refuses it (laplace_flags takes it): "
            "--laplace-flags-width is a flag of --pos-encoding laplace_flags") in said


class _Corpus:
    bin, source_lang, target_lang = "/nonexistent/bin", "en", "de"


def test_a_rerun_without_its_user_dir_stops_and_names_it(raw, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "cmp"
    first = user_dir(tmp_path / "a", "laplace_rerun")
    args = base_args(out, raw, "--encodings", "sinusoidal")
    settings_mod.write(out / "settings.json", cli.settings_of(
        cli.parser().parse_args(args + ["--user-dir", str(first)]), cli.parser()))
    said = run_main(args, capsys)  # without it now
    assert f"user_dir: '{first}' before, None now" in said
    assert not (out / "runs").exists()
