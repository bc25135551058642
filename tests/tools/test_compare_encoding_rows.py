"""posenc-compare's rows (fairseq_posenc/tools/compare/encoding_rows.py): an encoding, a pair
``ENCODER/DECODER``, or ``LABEL=ENC:FLAGS`` with options of its encodings. Parsing and the
refusals, each before anything is written; a row's flags read as fairseq-train reads them
(fairseq's own parse of the row's command: ``--rope-fraction -0.1`` is a value), a flag given
twice refused, and a bad value blamed on the row with the option's own message (the
encoding's check, called here directly); what a row's run trains; its directory; the
settings record that refuses a label defined otherwise; variants of a pair. The end to end
run is in test_compare_extrapolation_study.py."""

from __future__ import annotations

import pickle

import pytest

from fairseq_posenc.tools.compare import cli, encoding_rows, fairseq_flags, plan
from fairseq_posenc.tools.compare import settings as settings_mod
from fairseq_posenc.tools.compare import variants
from tests.tools.test_compare import base_args, raw, run_main  # noqa: F401  (raw: fixture)

PAIR = encoding_rows.Row("t5/alibi", "t5", "alibi")


@pytest.mark.parametrize("spec, label, encoder, decoder, flags", [
    ("t5", "t5", "t5", "t5", ()),
    ("t5/alibi", "t5/alibi", "t5", "alibi", ()),
    ("r100=rope:--rope-base 100", "r100", "rope", "rope", ("--rope-base", "100")),
    ("tr=t5/rope:--rope-base=100 --t5-num-buckets 8", "tr", "t5", "rope",
     ("--rope-base=100", "--t5-num-buckets", "8")),
    ("named=t5/alibi", "named", "t5", "alibi", ()),
])
def test_rows_parse(spec, label, encoder, decoder, flags):
    row = encoding_rows.parse(spec)
    assert (str(row), row.encoder, row.decoder, row.flags) == (label, encoder, decoder, flags)


@pytest.mark.parametrize("spec, says", [
    ("t5/", "is not ENC, ENCODER/DECODER or LABEL=ENC[:FLAGS]"),
    ("t5/alibi/rope", "is not ENC"),
    ("rope:--rope-base 100", "is not ENC"),  # flags need a label
    ("x=rope:", "is not ENC"),
    ("a/b=rope:--rope-base 1", "the label 'a/b' may hold only letters"),
    ("x=rope:100 --rope-base", "FLAGS start with a flag, got '100'"),
])
def test_malformed_rows_are_refused(spec, says):
    with pytest.raises(ValueError, match="--encodings") as info:
        encoding_rows.parse(spec)
    assert says in str(info.value)


def test_a_pair_trains_its_encoder_s_architecture_with_both_flags_in_a_safe_directory(tmp_path):
    from fairseq import options

    assert PAIR.dirname == "t5-alibi" and encoding_rows.of("t5/alibi").to_json() == PAIR.to_json()
    run = plan.Run(encoding_rows.parse("tr=t5/rope:--rope-base 100"), 1)
    assert pickle.loads(pickle.dumps(run)).row.to_json() == run.row.to_json()  # to a worker
    assert plan.Run(PAIR, 2).dir(tmp_path) == tmp_path / "runs" / "t5-alibi" / "seed2"
    args = cli.parser().parse_args(base_args(tmp_path / "cmp", tmp_path, "--encodings", "t5"))
    settings = cli.settings_of(args, cli.parser())
    command = plan.train_args(settings, _Corpus(), run, tmp_path, plan.batch(settings, 0))
    _, parsed = fairseq_flags.parse(options.get_training_parser, command)
    assert (parsed.arch, parsed.encoder_pos_encoding, parsed.decoder_pos_encoding,
            parsed.rope_base) == ("transformer_tiny_t5", "t5", "rope", 100.0)


class _Corpus:
    bin, source_lang, target_lang = "/nonexistent/bin", "en", "de"


def test_repeated_labels_and_shared_directories_are_refused():
    assert encoding_rows.parse_all(["t5", "t5/alibi", "t5"]) == ["t5", "t5/alibi"]
    with pytest.raises(ValueError, match="the label x is defined twice"):
        encoding_rows.parse_all(["x=rope:--rope-base 1", "x=rope:--rope-base 2"])
    with pytest.raises(ValueError, match="t5/alibi and t5-alibi would train in the same "
                                         "directory runs/t5-alibi"):
        encoding_rows.parse_all(["t5/alibi", "t5-alibi=t5:--t5-num-buckets 8"])


def check_rows(raw, tmp_path, specs, train_args=""):  # noqa: F811
    """fairseq_flags.check_train_args, which reads and checks every row's flags, on the
    rows ``specs``."""
    args = cli.parser().parse_args(base_args(tmp_path / "cmp", raw, "--encodings", *specs,
                                             f"--train-args={train_args}"))
    settings = cli.settings_of(args, cli.parser())
    fairseq_flags.check_train_args(settings, encoding_rows.parse_all(specs),
                                   plan.batch(settings, 0))


@pytest.mark.parametrize("specs, train_args, says", [
    (["x=rope:--lr 0.1"], "", "--encodings x: --lr is not an option of rope: a row's flags "
                              "are its encodings' options (--rope-base"),
    (["x=rope:--t5-num-buckets 8"], "", "--encodings x: --t5-num-buckets (an option of t5) "
                                        "is not an option of rope"),
    (["x=t5/alibi:--rope-base 9"], "", "--encodings x: --rope-base (an option of rope) "
                                       "is not an option of t5 or alibi"),
    (["x=rope:--rope-base 9"], "--rope-base 5", "--encodings x: --rope-base is in --train-args "
                                                "too"),
    (["x=rope:--rope-base=9"], "--lr 1e-3 --rope-base=5", "--encodings x: --rope-base is in "
                                                          "--train-args too"),
    # fairseq-train would train the last; the row's record would keep both
    (["x=rope:--rope-fraction 0.5 --rope-fraction 0.7"], "",
     "--encodings x: --rope-fraction is given twice in the row: give it once"),
    (["x=rope:--rope-fraction=0.5 --rope-base 9 --rope-fraction 0.5"], "",
     "--encodings x: --rope-fraction is given twice in the row"),
])
def test_a_row_s_flags_are_its_encodings_options_each_once(raw, tmp_path, specs,  # noqa: F811
                                                           train_args, says):
    with pytest.raises(SystemExit) as stop:
        check_rows(raw, tmp_path, specs, train_args)
    assert f"posenc-compare: {says}" in str(stop.value.code)
    check_rows(raw, tmp_path, ["y=t5/rope:--t5-num-buckets 8 --rope-base 9"], "--lr 1e-3")


def test_a_label_that_is_an_encoding_s_name_trains_only_it():
    with pytest.raises(ValueError, match="t5 is an encoding's name"):
        encoding_rows.check(encoding_rows.parse_all(["t5=rope:--rope-base 9"]))
    encoding_rows.check(encoding_rows.parse_all(["t5", "t5=t5"]))


def test_a_negative_value_is_the_flag_s_value_as_fairseq_train_reads_it(tmp_path):
    from fairseq import options

    row = encoding_rows.parse("r=rope:--rope-fraction -0.1")
    args = cli.parser().parse_args(base_args(tmp_path / "cmp", tmp_path, "--encodings", "t5"))
    settings = cli.settings_of(args, cli.parser())
    command = plan.train_args(settings, _Corpus(), plan.Run(row, 1), tmp_path,
                              plan.batch(settings, 0))
    parser, parsed = fairseq_flags.parse(options.get_training_parser, command)
    assert parsed.rope_fraction == -0.1
    assert fairseq_flags.named(parser, row.flags) == [("--rope-fraction", "rope_fraction")]


@pytest.mark.parametrize("spec, encoding, given", [
    ("r=rope:--rope-fraction -0.1", "rope", {"rope_fraction": -0.1}),  # read as a flag before
    ("r=rope:--rope-fraction 1.5", "rope", {"rope_fraction": 1.5}),  # blamed on --train-args
    ("r=t5/rope:--t5-num-buckets 8 --rope-base=0.5", "rope", {"rope_base": 0.5}),
])
def test_a_row_s_bad_value_is_blamed_on_the_row_with_the_option_s_message(  # noqa: F811
        raw, tmp_path, capsys, spec, encoding, given):
    from fairseq_posenc.core.encodings import ENCODINGS
    from fairseq_posenc.core.encodings.registry import option_values

    with pytest.raises(ValueError) as own:  # the option's own check, called directly
        option_values(ENCODINGS[encoding], given)
    said = run_main(base_args(tmp_path / "cmp", raw, "--encodings", "sinusoidal", spec,
                              "--train-args=--dropout 0.2"), capsys)
    assert f'posenc-compare: --encodings r: "{spec[2:]}" is refused: {own.value}' in said
    assert "--train-args" not in said
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("extra, says", [
    (["--encodings", "t5", "x=rope:--dropout 0.3"], "--dropout is not an option of rope"),
    # the value, checked by the plugin in the row's fairseq-train command
    (["--encodings", "t5", "x=t5:--t5-num-buckets 2"], "--encodings x: \"t5:--t5-num-buckets "
                                                       "2\" is refused: --t5-num-buckets "),
    (["--encodings", "t5", "x=t5:--t5-num-bucket 8"], "--encodings x: \"t5:--t5-num-bucket 8\""
                                                      " is refused: unrecognized arguments: "
                                                      "--t5-num-bucket 8"),
    (["--encodings", "t5/alibi", "x=t5/alibi:--t5-num-buckets 8", "--baseline", "x",
      "--train-args=--shaw-clip 4"], "the fairseq-train command of t5/alibi, x refuses it: "
                                     "--shaw-clip is a flag of --pos-encoding shaw, not of "
                                     "the stacks' encodings (t5 and alibi)"),
    (["--encodings", "t5/nothere"], "unknown encoding nothere"),
    (["--encodings", "t5", "--train-args=--encoder-pos-encoding rope"],
     "--encoder-pos-encoding: posenc-compare sets it for every run: each row's encodings"),
    (["--encodings", "t5/alibi", "--variants", "v=t5/alibi:--rope-scaling linear "
      "--rope-scaling-factor 2"], "this one has --encoder-pos-encoding t5 "
                                  "--decoder-pos-encoding alibi"),
])
def test_bad_rows_stop_before_anything_is_written(raw, tmp_path, capsys, extra,  # noqa: F811
                                                  says):
    said = run_main(base_args(tmp_path / "cmp", raw, *extra), capsys)
    assert says in said
    assert not (tmp_path / "cmp").exists()


def test_a_variant_of_a_pair_with_a_rotation_is_checked_and_passes(raw, tmp_path):  # noqa: F811
    args = cli.parser().parse_args(base_args(tmp_path / "cmp", raw, "--encodings", "t5/rope"))
    settings = cli.settings_of(args, cli.parser())
    row = encoding_rows.parse("t5/rope")
    variants.check([variants.parse("lin=t5/rope:--rope-scaling linear "
                                   "--rope-scaling-factor 2")], [row], settings)
    with pytest.raises(ValueError, match="the row name 't5/rope\\+linear-2' may hold only"):
        variants.parse("t5/rope:--rope-scaling linear --rope-scaling-factor 2")


def test_a_label_defined_otherwise_on_a_rerun_is_refused(raw, tmp_path, capsys):  # noqa: F811
    args = cli.parser().parse_args(base_args(tmp_path / "cmp", raw, "--encodings", "t5"))
    settings = cli.settings_of(args, cli.parser())
    out = tmp_path / "cmp"
    first = encoding_rows.parse_all(["t5", "x=rope:--rope-base 100"])
    settings_mod.write(out / "settings.json", settings, None,
                       {row.label: row.to_json() for row in first})
    cli.start(out, settings, False, rows=first)  # the same rows: nothing to say
    cli.start(out, settings, False, rows=encoding_rows.parse_all(["t5/alibi"]))  # a new row
    with pytest.raises(SystemExit) as stop:
        cli.start(out, settings, False, rows=encoding_rows.parse_all(["x=rope:--rope-base 50"]))
    assert ("x: rope, --rope-base 100 before, rope, --rope-base 50 now"
            in str(stop.value.code))
    # a rerun records its new rows beside the earlier ones
    settings_mod.write(out / "settings.json", settings, None, {"t5/alibi": PAIR.to_json()})
    assert set(settings_mod.read_rows(out / "settings.json")) == {"t5", "x", "t5/alibi"}
    assert settings_mod.read(out / "settings.json") == settings
