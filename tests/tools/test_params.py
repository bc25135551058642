"""``posenc-params --user-dir DIR``: the architecture of an encoding that a user's fairseq
directory registers is counted, and one that is not registered stops before any model is
built, saying what to give (``add --user-dir DIR`` where that is what is missing).

Reference for the count: the user's encoding (tests/tools/test_compare_user_dir.py's, as
docs/compare.md writes one) holds one scale per head and shares it between a stack's
layers, so the tiny model (4 heads, an encoder and a decoder) has 2 x 4 parameters more than
``sinusoidal``. The user directory is imported in this process (``isolated`` removes it).
"""

from __future__ import annotations

import pytest

from fairseq_posenc.tools.params import main
from tests.tools.test_compare_user_dir import isolated, user_dir  # noqa: F401  (a fixture)

HEADS = 4  # transformer_tiny


def test_an_encoding_of_a_user_dir_is_counted(tmp_path, capsys, isolated):  # noqa: F811
    name = "laplace_params"
    directory = user_dir(tmp_path, name)
    assert main(["--user-dir", str(directory), "--arch", f"transformer_tiny_{name}",
                 "--vocab", "40"]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"transformer_tiny_{name}\tparameters ")
    assert f"\t+{2 * HEADS} (" in line and "vocabulary 40" in line


def test_without_user_dir_an_unknown_architecture_says_to_add_it(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--arch", "transformer_tiny_laplace_not_registered", "--vocab", "40"])
    says = str(stop.value.code)
    assert says.startswith("posenc-params: error: --arch transformer_tiny_laplace_not_registered "
                           "is not a registered architecture. For an encoding of your own, add "
                           "--user-dir DIR")
    assert "shaw, sinusoidal, " in says  # the encodings it has, for a misspelt name


def test_a_user_dir_that_does_not_register_the_architecture_is_named(tmp_path,
                                                                      isolated):  # noqa: F811
    directory = user_dir(tmp_path, "laplace_params_other")
    with pytest.raises(SystemExit) as stop:
        main(["--user-dir", str(directory), "--arch", "transformer_tiny_laplace_params_typo"])
    says = str(stop.value.code)
    assert f"registered neither by --user-dir {directory} nor by fairseq-posenc" in says
    assert "laplace_params_other" in says  # the directory's encoding among the names


def test_a_missing_user_dir_and_a_fairseq_architecture_are_refused(tmp_path):
    with pytest.raises(SystemExit, match=f"^posenc-params: --user-dir {tmp_path / 'nowhere'}: "
                                         "no such directory"):
        main(["--user-dir", str(tmp_path / "nowhere"), "--arch", "transformer_tiny_t5"])
    with pytest.raises(SystemExit, match="^posenc-params: error: --arch transformer is "
                                         "fairseq's TransformerModel, not a fairseq-posenc"):
        main(["--arch", "transformer"])
