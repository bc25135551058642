"""The launchers' pieces (fairseq_posenc.tools.launch) and the options' checks in both tools,
before anything long starts. The launchers end to end: test_compare_launch.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fairseq_posenc.tools.compare import cli, settings as settings_mod
from fairseq_posenc.tools.launch import batch, lock
from fairseq_posenc.tools.launch.local import Slots
from fairseq_posenc.tools.launch.slurm import parse_time
from fairseq_posenc.tools.wmt import recipes, reproduce, runs as wmt_runs
from tests.tools.test_compare import base_args, raw, run_main  # noqa: F401  (raw: fixture)


@pytest.mark.parametrize("tokens, per_pass, gpus, split", [
    (4096, 4096, 0, (4096, 1)),  # the tiny recipe on the CPU: one pass
    (4096, 4096, 1, (4096, 1)),
    (4096, 4096, 2, (2048, 1)),  # two GPUs share the pass
    (32768, 4096, 1, (4096, 8)),  # the base recipe: 8 passes on one GPU
    (32768, 4096, 2, (4096, 4)),
    (32768, 4096, 8, (4096, 1)),
    (32768, 4096, 16, (2048, 1)),
])
def test_the_batch_is_the_same_on_any_number_of_gpus(tokens, per_pass, gpus, split):
    got = batch.split(tokens, per_pass, gpus)
    assert (got.max_tokens, got.update_freq) == split
    assert got.tokens_per_update == tokens
    assert got.flags()[-1] == str(max(gpus, 1))  # --distributed-world-size, always


def test_a_batch_that_does_not_divide_is_refused():
    with pytest.raises(ValueError, match="multiple of 9"):
        batch.split(32768, 4096, 3)


def test_reproduce_derives_its_update_frequency_as_before():
    # ceil(25000 / (max_tokens * gpus)), posenc-reproduce's commands unchanged
    for gpus, freq in ((1, 7), (2, 4), (4, 2), (8, 1)):
        assert wmt_runs.update_freq(recipes.AT5, wmt_runs.Scale(gpus=gpus)) == freq


def test_slots_divide_the_gpus_or_the_cores():
    cpu = Slots.plan(2, 0, (), ncores=2).envs
    assert [e["OMP_NUM_THREADS"] for e in cpu] == ["1", "1"]
    assert all("CUDA_VISIBLE_DEVICES" not in e for e in cpu)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in Slots.plan(None, 1, ["0", "1"], 16).envs] == [
        "0", "1"]  # default: one run per GPU
    assert [e["CUDA_VISIBLE_DEVICES"] for e in Slots.plan(4, 1, ["0", "1"], 16).envs] == [
        "0", "1", "0", "1"]  # asked for more: they share
    assert [e["CUDA_VISIBLE_DEVICES"] for e in Slots.plan(None, 2, list("0123"), 8).envs] == [
        "0,1", "2,3"]
    with pytest.raises(ValueError, match="needs 2 GPU"):
        Slots.plan(None, 2, ["0"], 8)


def test_slurm_times():
    assert [parse_time(t) for t in ("30", "1:30", "2:00:00", "1-0", "1-2:30")] == [
        30, 2, 120, 1440, 1590]
    for bad in ("", "x", "0", "1:2:3:4"):
        with pytest.raises(ValueError):
            parse_time(bad)


def test_a_second_command_on_a_directory_is_refused(tmp_path):
    with lock.hold(tmp_path, "tool"):
        other = subprocess.run([sys.executable, "-c", (
            "import sys; from pathlib import Path; from fairseq_posenc.tools.launch import lock\n"
            f"with lock.hold(Path({str(tmp_path)!r}), 'tool'): pass")],
            capture_output=True, text=True)
    assert other.returncode == 1
    assert f"tool: {tmp_path} is in use by pid" in other.stderr
    with lock.hold(tmp_path, "tool"):  # released when the holder ended
        pass


@pytest.mark.parametrize("extra, says", [
    (["--parallel", "0"], "--parallel must be at least 1"),
    (["--slurm-partition", "gpu"], "--slurm-partition is for --launcher slurm"),
    (["--launcher", "slurm", "--parallel", "2"], "--parallel is for --launcher local"),
    (["--launcher", "slurm", "--slurm-gpus-per-run", "1"], "--cpu asks SLURM for CPUs only"),
    (["--launcher", "slurm", "--slurm-time", "soon"], "--slurm-time soon"),
    (["--launcher", "slurm", "--slurm-option", "qos"], "write KEY=VALUE"),
    (["--train-args=--update-freq 2"], "set --batch-tokens instead"),
    (["--batch-tokens", "0"], "--batch-tokens must be at least 1"),
])
def test_bad_launcher_options_stop_before_anything_is_written(raw, tmp_path, capsys,  # noqa: F811
                                                              extra, says):
    out = tmp_path / "cmp"
    assert says in run_main(base_args(out, raw, "--encodings", "t5", *extra), capsys)
    assert not out.exists()


def test_slurm_without_sbatch_says_where_to_run(raw, tmp_path, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setenv("PATH", str(tmp_path))  # no SLURM commands here
    out = tmp_path / "cmp"
    says = run_main(base_args(out, raw, "--encodings", "t5", "--launcher", "slurm"), capsys)
    assert "--launcher slurm needs SLURM's sbatch, squeue, srun on the PATH" in says
    assert not out.exists()
    with pytest.raises(SystemExit) as stop:
        reproduce.main(["train", "--paper", "diet", "--launcher", "slurm", "--work",
                        str(tmp_path / "work")])
    assert "posenc-reproduce: --launcher slurm needs SLURM's" in str(stop.value.code)
    with pytest.raises(SystemExit):
        reproduce.main(["train", "--paper", "diet", "--parallel", "0"])
    assert "--parallel must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("option, value", [
    ("--slurm-option", "qos=high\ntouch /tmp/x"),  # the user's: sbatch stops reading there
    ("--slurm-option", "comment=a\rb"),
    ("--slurm-partition", "gpu\n#SBATCH --time=1"),
    ("--slurm-account", "lab\x00"),
    ("--slurm-time", "60\n"),
    ("--slurm-mem", "8G\t"),
    ("--slurm-option", "comment=a\u2028b"),  # a Unicode line separator
    ("--slurm-setup", "module load cuda\nrm -rf ~"),
    ("--slurm-setup", "echo \x1b[31m"),
])
def test_control_characters_in_job_script_values_are_refused_when_parsed(
        raw, tmp_path, capsys, monkeypatch, option, value):  # noqa: F811
    """Refused by the option's type, before any check or SLURM command: fake sbatch, squeue
    and srun on the PATH record any call, and none is made; nothing is written."""
    bin_dir, called = tmp_path / "bin", tmp_path / "called"
    bin_dir.mkdir()
    for command in ("sbatch", "squeue", "srun"):
        (bin_dir / command).write_text(f"#!/bin/sh\necho {command} >> {called}\n")
        (bin_dir / command).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    out = tmp_path / "cmp"
    says = run_main(base_args(out, raw, "--encodings", "t5", "--launcher", "slurm",
                              option, value), capsys)
    assert f"argument {option}: {value!r} holds the control character" in says
    assert not out.exists() and not called.exists()
    with pytest.raises(SystemExit):
        reproduce.main(["train", "--paper", "diet", "--launcher", "slurm", "--work",
                        str(tmp_path / "work"), option, value])
    assert f"argument {option}: {value!r} holds the control character" in (
        capsys.readouterr().err)
    assert not (tmp_path / "work").exists() and not called.exists()


def test_a_tab_in_a_setup_line_and_unicode_in_values_are_kept():
    from fairseq_posenc.tools.launch import launcher_flags

    p = cli.parser()
    args = p.parse_args(["out", "--data", "d", "-s", "en", "-t", "de", "--encodings", "t5",
                         "--max-update", "1", "--launcher", "slurm",
                         "--slurm-setup", "export A=1\t# tab", "--slurm-account", "Žluťoučký",
                         "--slurm-option", "comment=naïve «run»"])
    assert args.slurm_setup == ["export A=1\t# tab"]
    assert args.slurm_account == "Žluťoučký" and args.slurm_option == ["comment=naïve «run»"]
    assert launcher_flags.directive("gpu") == "gpu"


def test_a_locked_comparison_is_refused(raw, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "cmp"
    with lock.hold(out, "posenc-compare"):
        says = run_main(base_args(out, raw, "--encodings", "t5"), capsys)
    assert f"posenc-compare: {out} is in use by pid" in says
    assert not (out / "settings.json").exists()


def test_settings_record_the_batch_and_read_earlier_comparisons(raw, tmp_path):  # noqa: F811
    parsed = cli.parser().parse_args(base_args(tmp_path, raw, "--encodings", "t5"))
    settings = cli.settings_of(parsed, cli.parser())
    assert settings.batch_tokens == 4096
    path = tmp_path / "settings.json"
    settings_mod.write(path, settings, {"launcher": "local", "batch": {"update_freq": 1}})
    assert settings_mod.read(path) == settings
    assert json.loads(path.read_text())["launch"]["batch"] == {"update_freq": 1}
    earlier = {k: v for k, v in settings.to_json().items() if k != "batch_tokens"}
    path.write_text(json.dumps(earlier))  # written before --batch-tokens existed
    assert settings_mod.read(path) == settings
    base = cli.settings_of(cli.parser().parse_args(
        base_args(tmp_path, raw, "--encodings", "t5", "--size", "base")), cli.parser())
    assert base.batch_tokens == 32768
