"""posenc-compare's --train-args and --variants, checked with fairseq's own parsers before
any work (fairseq_posenc/tools/compare/fairseq_flags.py): each bad flag stops the command
with nothing written in OUT, and the flags a comparison is for still pass.

The references: argparse's own message for an unknown flag, the plugin's foreign-flag
message, an encoding's constructor's refusal of the model's real sizes (the tiny
architecture's 4 heads: a width of 36 gives rope an odd head dimension), and fairseq's parse
of the full command (what each encoding's run gets).
"""

from __future__ import annotations

import pytest

from fairseq_posenc.tools.compare import cli, encoding_rows, fairseq_flags, plan, variants
from tests.tools.test_compare import base_args, raw, run_main  # noqa: F401  (raw: fixture)


def comparison(raw, tmp_path, *extra):  # noqa: F811
    return base_args(tmp_path / "cmp", raw, "--encodings", "t5", "rope", *extra)


@pytest.mark.parametrize("train_args, says", [
    # fairseq-train refused these after 22 s (--shaw-clip: inside the plugin's build_model)
    ("--shaw-clip 8", "the fairseq-train command of t5, rope refuses it: --shaw-clip is a "
                      "flag of --pos-encoding shaw, not of --pos-encoding t5"),
    ("--rope-base 100", "the fairseq-train command of t5 refuses it (rope takes it): "
                        "--rope-base is a flag of --pos-encoding rope"),
    ("--t5-num-buckets 16", "the fairseq-train command of rope refuses it (t5 takes it)"),
    # each row's model is built before any work: rope's constructor with the real head size
    ("--encoder-embed-dim 36",
     "the fairseq-train command of rope refuses it (t5 takes it): --pos-encoding rope needs an "
     "even head dimension, got 9"),
    ("--dropuot 0.3", "refuses it: unrecognized arguments: --dropuot 0.3"),
    ("--lr", "refuses it: argument --lr: expected one argument"),
    ("extra/data", "refuses it: unrecognized arguments: extra/data"),
    # what posenc-compare gives every run itself
    ("--save-dir X", "--save-dir: posenc-compare sets it for every run: every run saves into "
                     "OUT/runs/ENC/seedK/checkpoints"),
    ("--seed 3", "--seed: posenc-compare sets it for every run: run k of every encoding "
                 "trains with seed k (--seeds)"),
    ("-a transformer_tiny_t5", "-a: posenc-compare sets it for every run: each run trains "
                               "PREFIX_ENCODING"),
    ("--arch=transformer_tiny_t5", "--arch: posenc-compare sets it for every run"),
    ("-sde", "-s: posenc-compare sets it for every run: set it with posenc-compare's -s"),
    ("--target-lang en", "--target-lang: posenc-compare sets it"),
    ("--task translation_extrapolation", "--task: posenc-compare sets it"),
    ("--user-dir .", "--user-dir: posenc-compare sets it"),
    ("--max-update 20", "--max-update: posenc-compare sets it for every run: set it with "
                        "posenc-compare's --max-update"),
    ("--max-epoch 2", "--max-epoch: posenc-compare sets it"),
    ("--cpu", "--cpu: posenc-compare sets it"),
    ("--log-format json", "--log-format: posenc-compare sets it for every run: the report "
                          "reads train.log in fairseq's simple format"),
    ("--valid-subset test", "--valid-subset: posenc-compare sets it"),
    ("--distributed-rank 1", "--distributed-rank: posenc-compare sets it"),
    ("--validate-interval-updates 3", "--validate-interval-updates: posenc-compare sets it "
                                      "for every run: every run validates 20 times"),
    ("--save-interval-updates 4", "--save-interval-updates: posenc-compare sets it for every "
                                  "run: every run saves a checkpoint at each validation"),
    # what the comparison relies on: checkpoints saved, resumed whole, validated, same stop
    ("--no-save", "--no-save: it changes what the comparison relies on: every run is "
                  "evaluated from, and resumes from, its checkpoint_last.pt"),
    ("--no-last-checkpoints", "--no-last-checkpoints: it changes what the comparison relies on"),
    ("--no-save-optimizer-state", "--no-save-optimizer-state: it changes what the comparison "
                                  "relies on: an interrupted or continued run resumes"),
    ("--restore-file x.pt", "--restore-file: it changes what the comparison relies on"),
    ("--reset-optimizer --reset-dataloader", "--reset-optimizer: it changes"),
    ("--finetune-from-model x.pt", "--finetune-from-model: it changes"),
    ("--disable-validation", "--disable-validation: it changes what the comparison relies on: "
                             "the report's convergence check"),
    ("--best-checkpoint-metric bleu", "--best-checkpoint-metric: it changes"),
    ("--patience 3", "--patience: posenc-compare sets it for every run: set it with "
                     "posenc-compare's --until-converged --patience P"),
    ("--stop-time-hours 1", "--stop-time-hours: it changes"),
])
def test_bad_train_args_stop_before_anything_is_written(raw, tmp_path, capsys,  # noqa: F811
                                                        train_args, says):
    says_ = run_main(comparison(raw, tmp_path, f"--train-args={train_args}"), capsys)
    assert f'posenc-compare: --train-args "{train_args}"' in says_ and says in says_
    assert not (tmp_path / "cmp").exists()


def test_several_refused_flags_are_named_together(raw, tmp_path, capsys):  # noqa: F811
    says = run_main(comparison(raw, tmp_path, "--train-args=--save-dir X --lr 1e-3 --no-save "
                                              "--seed 2"), capsys)
    assert [line.split(":")[0] for line in says.splitlines()[1:]] == [
        "  --save-dir", "  --no-save", "  --seed"]


def test_an_epoch_interval_is_the_comparisons_only_under_until_converged(raw, tmp_path,  # noqa: F811
                                                                        capsys):
    says = run_main(comparison(raw, tmp_path, "--until-converged", "--validate-every", "5",
                               "--train-args=--save-interval 2"), capsys)
    assert "--save-interval: posenc-compare sets it for every run of this comparison" in says
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("train_args, dest, value", [
    ("--dropout 0.3 --lr 5e-4", "dropout", 0.3), ("--max-tokens 2048", "max_tokens", 2048),
    ("--keep-last-epochs 2", "keep_last_epochs", 2),
    ("--save-interval 2", "save_interval", 2),  # epochs: every validation saves anyway
    ("--max-source-positions 512 --max-target-positions=512", "max_target_positions", 512),
    ("--label-smoothing 0.2", "label_smoothing", 0.2), ("--encoder-layers 1", "encoder_layers", 1),
    ("--share-all-embeddings", "share_all_embeddings", True), ("--lr -1", "lr", [-1.0]),
])
def test_flags_every_encoding_takes_pass_and_reach_every_run(raw, train_args, dest,  # noqa: F811
                                                             value):
    """The check passes, and fairseq's parse of each run's command has the value."""
    from fairseq import options

    args = cli.parser().parse_args(comparison(raw, raw.parent, f"--train-args={train_args}"))
    settings = cli.settings_of(args, cli.parser())
    split = plan.batch(settings, 0)
    fairseq_flags.check_train_args(settings, ["t5", "rope"], split)
    for encoding in ("t5", "rope"):
        _, parsed = fairseq_flags.parse(options.get_training_parser, plan.train_args(
            settings, _Corpus(), plan.Run(encoding, 1), raw.parent / "cmp", split))
        assert parsed.arch == f"transformer_tiny_{encoding}"
        assert getattr(parsed, dest) == value


class _Corpus:
    bin, source_lang, target_lang = "/nonexistent/bin", "en", "de"


# --- variants -----------------------------------------------------------------------------

SCALING = "--rope-scaling ntk --rope-scaling-factor 2"
LLAMA3 = ("rope:--rope-scaling llama3 --rope-scaling-factor 8 --rope-scaling-original-len 20 "
          "--rope-scaling-low-freq-factor 1 --rope-scaling-high-freq-factor 4")


@pytest.mark.parametrize("flags", [
    "--score-reference",  # scored the references: "BLEU 100.00"
    "--prefix-size 3",  # forced the references' first tokens: "+1.50 (0.025*)"
    "--nbest 3", "--beam 5", "--lenpen 1.0", f"{SCALING} --lenpen=1", "--max-len-b 20",
    "--max-len-a 2", "--min-len 3", "--sampling", "--unkpen 5", "--no-repeat-ngram-size 2",
    "--match-source-len", "--replace-unk", "--print-alignment", "--quiet", "--fp16",
    "--model-overrides={}", "--batch-size 1", "--train-max-len 5",
    "--skip-invalid-size-inputs-valid-test", "--max-source-positions 9",
])
def test_a_variant_sets_only_the_rope_scaling_options(raw, tmp_path, capsys, flags):  # noqa: F811
    says = run_main(comparison(raw, tmp_path, "--variants", f"v=rope:{flags}"), capsys)
    assert "posenc-compare: --variants v:" in says
    refused = [f.split("=")[0] for f in flags.split() if f.startswith("--")
               and not f.startswith("--rope-scaling")]
    assert f"{', '.join(refused)}: a variant sets only --rope-scaling, --rope-scaling-factor, " \
           "--rope-scaling-high-freq-factor, --rope-scaling-low-freq-factor, " \
           "--rope-scaling-original-len" in says
    assert not (tmp_path / "cmp").exists()


def test_the_rope_scaling_options_are_a_variants_own(raw):  # noqa: F811
    args = cli.parser().parse_args(comparison(raw, raw.parent))
    settings = cli.settings_of(args, cli.parser())
    for spec in (f"rope:{SCALING}", "rope:--rope-scaling=linear --rope-scaling-factor=4",
                 "rope:--rope-scaling yarn --rope-scaling-factor 4 "
                 "--rope-scaling-original-len 20", LLAMA3,
                 "rope:--rope-scaling dynamic --rope-scaling-factor 4 "
                 "--rope-scaling-original-len 20"):
        variants.check([variants.parse(spec)], ["t5", "rope"], settings)
    assert variants.parse(LLAMA3).name == "rope+llama3-8-20-1-4"
    generated = fairseq_flags.variant_flags(LLAMA3.partition(":")[2].split(), variants.TASK)
    assert (generated.rope_scaling_low_freq_factor,
            generated.rope_scaling_high_freq_factor) == (1.0, 4.0)
    for spec, says in ((LLAMA3.replace("llama3", "yarn"), "read by --rope-scaling llama3 only"),
                       ("rope:--rope-scaling dynamic --rope-scaling-factor 4",
                        "--rope-scaling dynamic needs the training length")):
        with pytest.raises(ValueError, match=says):
            variants._check_flags(variants.parse(spec), settings, encoding_rows.parse("rope"))
    assert variants.parse("rope:--rope-scaling=linear --rope-scaling-factor=4").name == (
        "rope+linear-4")
    generated = fairseq_flags.variant_flags(SCALING.split(), variants.TASK)
    assert (generated.rope_scaling, generated.rope_scaling_factor) == ("ntk", 2.0)
