"""scripts/benchmark.py: the --quick run's Markdown and JSON, and its memory tracker.

The quick run (tiny models, length 12, 2 repetitions) compares stock fairseq with
``sinusoidal``, ``diet_rel`` and ``huang3``; the tracker must find ``huang3``'s
``B x H x len x len x d_h`` tensor (Huang et al.'s method 3 builds it by design) and no such
tensor in the others. Timings of tiny models mean nothing: only their structure is checked.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from fairseq_posenc.tools import benchmark
from fairseq_posenc.tools.benchmark import levels, report

ENCODINGS = ["sinusoidal", "diet_rel", "huang3"]
MODELS = ["stock", "stock_copy", *ENCODINGS]  # stock_copy: the noise control
FLAT: dict = {}  # the quick run's --out-flat-json


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("benchmark")
    # folders that do not exist yet: the run makes them before it times anything
    md, js, flat = out / "bench.md", out / "runs" / "bench.json", out / "flat" / "flat.json"
    threads, log_level = torch.get_num_threads(), logging.getLogger("fairseq").level
    benchmark.main(["--quick", "--encodings", *ENCODINGS, "--threads", "1",
                    "--out-md", str(md), "--out-json", str(js), "--out-flat-json", str(flat)])
    assert torch.get_num_threads() == threads  # run() restores the thread count
    assert logging.getLogger("fairseq").level == log_level  # and main() fairseq's log level
    assert (out / "runs" / "bench.json.partial").exists()  # written after each configuration
    FLAT.update(json.loads(flat.read_text()))
    return md.read_text(), json.loads(js.read_text())


def test_json_has_every_raw_timing_machine_and_command(quick):
    _, doc = quick
    assert doc["command"][1:4] == ["--quick", "--encodings", *ENCODINGS[:1]]
    machine = doc["machine"]
    for key in ("cpu", "cores", "torch", "torch_threads", "device"):
        assert machine[key], key
    assert machine["torch_threads"] == 1 and machine["device"] == "cpu"
    assert doc["encodings"] == ENCODINGS
    [result] = doc["results"]
    assert (result["size"], result["length"], result["reps"]) == ("tiny", 12, 2)
    for name in MODELS:
        for kind in benchmark.KINDS:
            reps = result["times_s"][name][kind]
            assert len(reps) == result["reps"]
            assert all(len(calls) >= 1 and all(t > 0 for t in calls) for calls in reps)
        row = result["summary"]["models"][name]
        for kind in benchmark.KINDS:
            cell = row[kind]
            assert cell["min"] <= cell["ratio"] <= cell["max"]
            assert len(cell["per_rep_ratios"]) == result["reps"]
            assert row["peak_ratio"][kind] > 0
    stock = result["summary"]["models"]["stock"]
    assert all(stock[k]["ratio"] == 1.0 for k in benchmark.KINDS)
    assert set(result["summary"]["stock_seconds"]) == set(benchmark.KINDS)


def test_memory_tracker_flags_huang3_only(quick):
    _, doc = quick
    [result] = doc["results"]
    rows, memory = result["summary"]["models"], result["memory"]
    length, heads = result["length"], result["model"]["heads"]
    head_dim, batch = result["head_dim"], result["batch_sentences"]
    # Huang et al.'s method 3: q_i * k_j * a[j-i] over d_h for every (i, j) pair
    assert rows["huang3"]["quadratic_dh"] == ["train", "forward", "translate"]
    shape = memory["huang3"]["forward"]["largest_shape"]
    assert sorted(shape) == sorted([batch, heads, length, length, head_dim])
    assert rows["huang3"]["verdict"]["memory"]["pass"]
    for name in ("stock", "sinusoidal", "diet_rel"):
        assert rows[name]["quadratic_dh"] == [], name
        assert max(rows[name]["largest_rel"].values()) < 1 / 2, name
    # diet_rel does build its (B, H, len, len) float mask: a len x len tensor, not x d_h
    assert memory["diet_rel"]["forward"]["peak_bytes"] > 0
    assert rows["diet_rel"]["verdict"]["memory"]["pass"]


def test_markdown_table(quick):
    md, doc = quick
    assert md.strip() == doc["markdown"].strip()
    lines = md.splitlines()
    header = [i for i, line in enumerate(lines) if line.startswith("| encoding |")]
    # the summary; one size x one length: the models, their layers, the rest
    assert len(header) == 4
    rows = [line for line in lines[header[1] + 2: header[2]] if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows] == ["stock (2nd copy: noise control)",
                                                       *ENCODINGS]
    cells = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]] for r in rows}
    assert all(len(c) == 7 for c in cells.values())
    assert "len x len x d_h" in cells["huang3"][4] and "memory PASS" in cells["huang3"][6]
    assert "len x len x d_h" not in cells["diet_rel"][4]
    assert cells["stock (2nd copy: noise control)"][6] == "- (no target)"
    # from the parts: layers and rest, or the rest alone (input encodings keep stock layers)
    models = doc["results"][0]["summary"]["models"]
    for name, parts in (("diet_rel", ["layers", "rest"]), ("sinusoidal", ["rest"])):
        estimate = models[name]["from_parts"]
        assert cells[name][5] == f"{estimate['train']:.3f} / {estimate['translate']:.3f}"
        assert models[name]["from_parts_of"] == parts
    # targets: PASS/FAIL against the targets' limits
    assert "train <= 1.03" in cells["sinusoidal"][6] and "transl <= 1.03" in cells["sinusoidal"][6]
    assert "train <= 1.05" in cells["diet_rel"][6]
    assert "Targets failed" in md and "Command: `" in md


def test_summary_over_configurations(quick, tmp_path, capsys):
    """The summary's one configuration: its from-layers ratios, verdicts by them for
    attention-level encodings and by the medians for input encodings; --render prints
    the same report from the JSON."""
    md, doc = quick
    lines = md.splitlines()
    start = lines.index("### Summary over the configurations")
    header = next(i for i in range(start, len(lines)) if lines[i].startswith("| encoding |"))
    assert "layers, len 12: train; transl | rest, len 12: train / transl |" in lines[header]
    rows = {}
    for line in lines[header + 2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.split("|")[1:-1]]
        rows[cells[0]] = cells
    assert list(rows) == ["stock (2nd copy: noise control)", "diet_rel", "sinusoidal", "huang3"]
    [result] = doc["results"]
    models = result["summary"]["models"]
    for name, limit, parts in (("diet_rel", 1.05, "layers + rest"), ("sinusoidal", 1.03, "rest")):
        estimate = models[name]["from_parts"]
        assert rows[name][1] == f"{limit:.2f} / {limit:.2f}"
        assert rows[name][2] == f"{estimate['train']:.3f} / {estimate['translate']:.3f}"
        assert rows[name][3] == "; ".join(
            f"{short} {'PASS' if estimate[kind] <= limit else 'FAIL'} ({parts})"
            for kind, short in (("train", "train"), ("translate", "transl")))
    train = models["sinusoidal"]["train"]["ratio"]
    assert rows["sinusoidal"][4] == f"{train:.2f}-{train:.2f}"
    assert rows["sinusoidal"][6] == "stock layers"
    rest = doc["rest_results"][0]["summary"]["models"]["sinusoidal"]
    assert rows["sinusoidal"][7] == f"{rest['train']['ratio']:.3f} / {rest['translate']['ratio']:.3f}"
    later = doc["layer_results"][0]["summary"]["models"]["huang3"]["later"]["train"]["ratio"]
    assert rows["huang3"][3] == "- (no target)" and f" / {later:.2f};" in rows["huang3"][6]
    js = tmp_path / "doc.json"
    js.write_text(json.dumps(doc))
    benchmark.main(["--render", str(js)])
    assert capsys.readouterr().out.strip() == md.strip()


def test_tracker_counts_new_storages_until_freed():
    x0 = torch.zeros(10)
    with benchmark.LiveTensorTracker() as tracker:
        a = torch.ones(1000)           # 4000 bytes
        view = a.view(10, 100)         # alias: not counted again
        x0.add_(1)                     # in place on a tensor from before: not counted
        b = a * 2                      # 4000 more: peak 8000
        del b                          # freed
        c = torch.ones(250)            # 1000
    assert tracker.peak == 8000
    assert tracker.live == 5000
    assert tracker.largest_numel == 1000 and tracker.largest_shape == (1000,)
    del a, view, c
    assert tracker.live == 0


def test_tracker_skips_parameter_shapes_in_largest_tensor():
    weight = torch.nn.Parameter(torch.randn(50, 40))
    with benchmark.LiveTensorTracker(ignore_shapes={(50, 40)}) as tracker:
        (weight * torch.randn(50, 40)).sum().backward()
        small = torch.ones(7, 3)
    assert weight.grad is not None and tracker.peak >= 2 * 50 * 40 * 4
    assert tracker.largest_shape == (7, 3)
    del small


def test_layer_level_tables(quick):
    """The layer level times the first self-attention layers of the attention-level
    encodings (input encodings keep stock layers) and the noise control, alone and with
    the second layer in a row."""
    md, doc = quick
    [layer] = doc["layer_results"]
    assert layer["level"] == "layer" and layer["length"] == 12 and layer["reps"] == 2
    assert set(layer["summary"]["stock_seconds"]) == {"train", "translate", "train_2",
                                                      "translate_2"}
    rows = layer["summary"]["models"]
    assert list(rows) == ["stock_copy", "diet_rel", "huang3"]  # not sinusoidal
    for name, row in rows.items():
        for kind in benchmark.LAYER_KINDS:
            for cell in (row[kind], row["later"][kind]):
                assert cell["min"] <= cell["q1"] <= cell["ratio"] <= cell["q3"] <= cell["max"]
                assert len(cell["per_rep_ratios"]) == layer["reps"]
        for kind in benchmark.LAYER_CALLS:
            assert len(layer["ratios"][name][kind]) == layer["reps"]
    # diet_rel has targets (1.05 / 1.05): the worse of its first and later layers bounds them
    row = rows["diet_rel"]
    bound = row["bound"]
    assert set(bound) == {"train", "translate"}
    for kind in ("train", "translate"):
        worst = max(row[kind]["ratio"], row["later"][kind]["ratio"])
        assert bound[kind]["ratio"] == worst and bound[kind]["holds"] == (worst <= 1.05)
    assert "bound" not in rows["huang3"] and "bound" not in rows["stock_copy"]
    assert "### Self-attention layer (32 wide, 4 heads), length 12" in md
    assert "| encoding | train: first layer | train: later layers |" in md


def test_two_layers_in_a_row_share_the_stack_context(monkeypatch):
    """The ``_2`` calls run the first two layers as the stack does: TUPE's positional term
    (``p U_Q``, ``p U_K`` and their product) is computed once for both."""
    from fairseq_posenc.core.encodings.tupe import TupeA

    d = benchmark.shared_dictionary(64)
    model = benchmark.build_model("tupe_a", "tiny", d, 1, torch.device("cpu"))
    attns = [layer.self_attn for layer in model.encoder.layers[:2]]
    assert attns[0].scope is attns[1].scope
    calls = []
    original = TupeA.projections
    monkeypatch.setattr(TupeA, "projections",
                        lambda self, n: calls.append(n) or original(self, n))
    x = torch.randn(7, 3, 32, requires_grad=True)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[0, :2] = True
    benchmark.attention_train(attns, x, padding)
    assert calls == [7] and x.grad is not None
    benchmark.attention_encode(attns, x.detach(), padding)
    assert calls == [7, 7]


@pytest.mark.parametrize("name, first_terms", [
    ("tupe_a", ["pos_encodings.0."]),  # one TUPE term for the stack: the first layer's
    ("diet_rel", ["pos_encodings.0."]),  # one bias table per layer
    ("stock", []),
])
def test_layer_parameters_include_the_encodings_once(name, first_terms):
    """The layer level's Adam step covers what the model's covers for those layers: each
    layer's self-attention and its position terms (not submodules of the layer), named
    here by where the stack registers them."""
    d = benchmark.shared_dictionary(64)
    model = benchmark.build_model(name, "tiny", d, 1, torch.device("cpu"))
    stack = model.encoder
    attns = [layer.self_attn for layer in stack.layers]
    named = {n: p for n, p in stack.named_parameters()}

    def by_name(prefixes):
        return {id(p) for n, p in named.items() if n.startswith(tuple(prefixes))}

    first = benchmark.layer_parameters(attns[:1])
    both = benchmark.layer_parameters(attns)
    assert len({id(p) for p in both}) == len(both)  # each once
    assert {id(p) for p in first} == by_name(["layers.0.self_attn.", *first_terms])
    assert {id(p) for p in both} == by_name(
        ["layers.0.self_attn.", "layers.1.self_attn.", "pos_encodings."])
    assert by_name(["pos_encodings."]) or name == "stock"


@pytest.fixture
def stepped_layers(monkeypatch):
    """The models the layer level builds (by name) and the ids of the parameters its Adam
    steps, as the level runs."""
    built, stepped = {}, set()
    build_model, adam_step = benchmark.build_model, torch.optim.Adam.step

    def build(name, *args, **kwargs):
        built[name] = build_model(name, *args, **kwargs)
        return built[name]

    def step(self, *args, **kwargs):
        stepped.update(id(p) for g in self.param_groups for p in g["params"]
                       if p.grad is not None)
        return adam_step(self, *args, **kwargs)

    monkeypatch.setattr(levels, "build_model", build)
    monkeypatch.setattr(torch.optim.Adam, "step", step)
    return built, stepped


@pytest.mark.slow  # training steps of every encoding's layers
def test_layer_train_steps_adam_over_the_layers_and_their_encoding(stepped_layers):
    """The layer level's train call ends with an Adam step over the first layers'
    parameters and their encoding's (TUPE's term, the stack's), and nothing else; at
    learning rate 0, so that the parameters stay as built over hundreds of steps."""
    built, stepped = stepped_layers
    cfg = benchmark.Config(size="tiny", length=12, batch=2, translate=1, reps=1,
                           stock_every=1, beam=2, vocab=64, seed=1, layer_reps=1)
    benchmark.run_layer_config(cfg, ["tupe_a"], torch.device("cpu"), lambda _: None)
    d = benchmark.shared_dictionary(64)
    for name in ("stock", "tupe_a"):
        params = dict(built[name].named_parameters())
        expected = {n for n in params if n.split(".self_attn.")[0] in (
            "encoder.layers.0", "encoder.layers.1", "decoder.layers.0", "decoder.layers.1")}
        expected |= {n for n in params if ".pos_encodings." in f".{n}"}
        assert {n for n, p in params.items() if id(p) in stepped} == expected, name
        assert expected and all(torch.equal(p, params[n]) for n, p in benchmark.build_model(
            name, "tiny", d, cfg.seed, torch.device("cpu")).named_parameters())


@pytest.mark.slow  # training steps of two models' layers
def test_decoder_layers_alone_for_an_encoding_of_the_decoder_only(stepped_layers):
    """``--layer-stacks decoder``: every model's timed layers are its decoder's (stock's
    too), so that ``path``, whose encoder is stock's sinusoidal one, is measured on the
    layers it changes; the step covers those layers and the decoder's encoding only."""
    built, stepped = stepped_layers
    cfg = benchmark.Config(size="tiny", length=12, batch=2, translate=1, reps=1,
                           stock_every=1, beam=2, vocab=64, seed=1, layer_reps=1,
                           layer_stacks="decoder")
    benchmark.run_layer_config(cfg, ["path"], torch.device("cpu"), lambda _: None)
    assert built["path"].args.encoder_pos_encoding == "sinusoidal"
    for name in ("stock", "path"):
        params = dict(built[name].named_parameters())
        stepped_names = {n for n, p in params.items() if id(p) in stepped}
        assert stepped_names and all(n.startswith("decoder.") for n in stepped_names), name
    assert any(".pos_encodings." in f".{n}" for n, p in built["path"].named_parameters()
               if id(p) in stepped)


def test_later_layer_ratio_from_the_first_and_first_two():
    # stock: 10 ms for the first layer, 19 ms for two; the encoding: 12 ms and 21.9 ms,
    # so its second layer takes 9.9 ms against stock's 9 ms: 1.1
    cell = benchmark.later_layer_cell([12 / 10, 12 / 10], [21.9 / 19, 21.9 / 19], 0.010, 0.019)
    assert cell["ratio"] == pytest.approx(1.1)
    assert cell["stock_seconds"] == pytest.approx(0.009)
    # a second layer no slower than stock's although the first is
    assert benchmark.later_layer_cell([1.3], [(13 + 9) / 19], 0.010, 0.019)["ratio"] == (
        pytest.approx(1.0))


def test_failures_report_what_the_parts_show():
    def model_result(ratio, layers=None):
        check = {"limit": 1.05, "ratio": ratio, "pass": ratio <= 1.05, "conclusive": False}
        row = {"verdict": {"train": check}}
        if layers is not None:
            row["from_parts"] = {"train": layers, "translate": 1.0}
            row["from_parts_of"] = ["layers", "rest"]
        return {"size": "small", "length": 30, "summary": {"models": {"t5": row}}}

    [line] = benchmark.failures([model_result(1.08, layers=1.02)])
    assert line.startswith("small/len30 t5 train: 1.080 > 1.05")
    assert "inconclusive" in line
    assert "parts (layers + rest): 1.020, within the limit, so the target holds" in line
    [line] = benchmark.failures([model_result(1.08, layers=1.09)])
    assert line.endswith("1.090, over the limit too")
    [line] = benchmark.failures([model_result(1.08)])
    assert line.endswith("within the limit)")
    assert benchmark.failures([model_result(1.01, layers=1.09)]) == []
    # layer level alone: the layer ratios that do not show a target by themselves
    layer = {"length": 30, "summary": {"models": {"t5": {"bound": {
        "train": {"limit": 1.05, "ratio": 1.09, "holds": False}}}}}}
    [line] = benchmark.failures([], [layer])
    assert line.startswith("len30 t5 train: layer-level ratio 1.090 > 1.05")


def test_model_ratio_from_the_parts():
    """ratio = 1 + ((r_0 - 1) S_0 + (r_1 - 1) S_1 + (L - 1)(r_2 - 1) S_2) / t_model."""
    model = {"length": 30, "model": {"layers": 4}, "summary": {
        "stock_seconds": {"train": 0.4, "forward": 0.1, "translate": 1.0},
        "models": {"t5": {}, "stock_copy": {}, "learned": {}, "rope": {}}}}
    layer = {"length": 30, "summary": {
        # first layers 20 ms and 50 ms; the second ones 18 ms and 45 ms
        "stock_seconds": {"train": 0.020, "translate": 0.050, "train_2": 0.038,
                          "translate_2": 0.095},
        "models": {"t5": {"train": {"ratio": 1.40}, "translate": {"ratio": 1.20},
                          "later": {"train": {"ratio": 1.05}, "translate": {"ratio": 1.10}}},
                   "stock_copy": {"train": {"ratio": 0.97}, "translate": {"ratio": 1.0},
                                  "later": {"train": {"ratio": 0.99},
                                            "translate": {"ratio": 1.0}}}}}}
    # the 0-layer models: 100 ms and 300 ms for stock
    rest = {"length": 30, "summary": {
        "stock_seconds": {"train": 0.100, "translate": 0.300},
        "models": {name: {"train": {"ratio": r_train}, "translate": {"ratio": r_transl}}
                   for name, r_train, r_transl in (("t5", 0.98, 1.02), ("stock_copy", 1.0, 1.0),
                                                   ("learned", 1.04, 1.01),
                                                   ("rope", 1.0, 1.0))}}}
    benchmark.attach_part_estimates([model], [layer], [rest])
    summary = model["summary"]
    assert summary["self_attention_share"] == pytest.approx(
        {"train": (0.020 + 3 * 0.018) / 0.4, "translate": (0.050 + 3 * 0.045) / 1.0})
    assert summary["rest_share"] == pytest.approx({"train": 0.25, "translate": 0.3})
    # t5 train: 8 ms more in the first layers, 0.9 ms in each of the 3 later ones, 2 ms
    # less in the rest; translate: 10 ms, 4.5 ms each, 6 ms more
    rows = summary["models"]
    assert rows["t5"]["from_parts"] == pytest.approx(
        {"train": 1 + (0.008 + 3 * 0.0009 - 0.002) / 0.4,
         "translate": 1 + (0.010 + 3 * 0.0045 + 0.006) / 1.0})
    assert rows["t5"]["from_parts_of"] == ["layers", "rest"]
    # an input encoding keeps stock's layers: the rest is its whole difference
    assert rows["learned"]["from_parts"] == pytest.approx(
        {"train": 1 + 0.004 / 0.4, "translate": 1 + 0.003 / 1.0})
    assert rows["learned"]["from_parts_of"] == ["rest"]
    # own layers not timed: no estimate; layers faster than stock count as they are
    assert "from_parts" not in rows["rope"]
    assert rows["stock_copy"]["from_parts"]["train"] == pytest.approx(
        1 + (-0.03 * 0.020 - 3 * 0.01 * 0.018) / 0.4)
    # without the rest level: the layers alone
    model["summary"]["models"] = {"t5": {}}
    benchmark.attach_part_estimates([model], [layer])
    assert model["summary"]["models"]["t5"]["from_parts"]["train"] == pytest.approx(
        1 + (0.008 + 3 * 0.0009) / 0.4)
    # the model level timed training only (--calls train): its ratio alone, from the same
    # parts, and a report that shows it beside "-"
    model["summary"]["models"] = {"t5": {"train": {"ratio": 1.03}}}
    model["summary"]["stock_seconds"] = {"train": 0.4}
    benchmark.attach_part_estimates([model], [layer], [rest])
    assert model["summary"]["models"]["t5"]["from_parts"] == pytest.approx(
        {"train": 1 + (0.008 + 3 * 0.0009 - 0.002) / 0.4})
    assert model["summary"]["self_attention_share"].keys() == {"train"}
    assert report.verdict_text("t5", {"train": {"limit": 1.05, "ratio": 1.08, "pass": False,
                                                "conclusive": True}},
                               model["summary"]["models"]["t5"]["from_parts"]).endswith(
        "(parts PASS)")


def test_rest_level_times_the_models_without_layers(quick):
    md, doc = quick
    [rest] = doc["rest_results"]
    assert rest["level"] == "rest" and rest["length"] == 12 and rest["reps"] == 2
    rows = rest["summary"]["models"]
    assert list(rows) == ["stock_copy", *ENCODINGS]  # input encodings too
    for name, row in rows.items():
        for kind in benchmark.REST_KINDS:
            assert row[kind]["min"] <= row[kind]["ratio"] <= row[kind]["max"]
            assert len(rest["ratios"][name][kind]) == 2
    assert "### Everything but the layers (32 wide, 0 layers), length 12" in md


@pytest.mark.parametrize("name", ["stock", "sinusoidal", "t5", "tupe_a", "path"])
def test_models_build_and_run_with_zero_layers(name):
    d = benchmark.shared_dictionary(64)
    model = benchmark.build_model(name, "tiny", d, 1, torch.device("cpu"), layers=0)
    assert len(model.encoder.layers) == 0 == len(model.decoder.layers)
    batch = benchmark.make_batch(d, 2, 8, 1, torch.device("cpu"))
    generator = benchmark.make_generator(model, d, 2, 8)
    [hyps, _] = benchmark.translate(model, generator, batch)
    assert hyps[0]["tokens"].numel() == 9


def test_flat_results_one_record_per_encoding_length_and_dtype(quick):
    """The shape of docs/benchmark-gpu.json: the model level's median ratios, read from
    the run's own summary."""
    _, doc = quick
    flat = FLAT
    assert flat["device"] == "cpu" and flat["torch"] == torch.__version__
    [result] = doc["results"]
    rows = result["summary"]["models"]
    assert [r["encoding"] for r in flat["results"]] == ["stock (noise control)", *ENCODINGS]
    for record, name in zip(flat["results"], ["stock_copy", *ENCODINGS]):
        assert (record["length"], record["dtype"], record["size"]) == (12, "float32", "tiny")
        assert record["train_ratio"] == rows[name]["train"]["ratio"]
        assert record["translate_ratio"] == rows[name]["translate"]["ratio"]
        assert record["memory_ratio"] == rows[name]["peak_ratio"]["train"]


def test_half_precision_needs_cuda():
    with pytest.raises(ValueError, match="needs CUDA"):
        benchmark.run(quick=True, dtypes=["float16"], device="cpu", levels=("model",))


def test_master_weight_adam_steps_float32_copies_of_half_parameters():
    """fairseq's --fp16 optimizer: Adam on float32 masters, the half weights follow."""
    half = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.bfloat16))
    ref = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    optimizers = benchmark.make_optimizer([half], lr=0.1), benchmark.make_optimizer([ref], lr=0.1)
    assert isinstance(optimizers[0], benchmark.MasterWeightAdam)
    for _ in range(3):
        for p, opt in zip((half, ref), optimizers):
            opt.zero_grad()
            p.grad = torch.tensor([0.5, -0.25], dtype=p.dtype)
            opt.step()
    assert optimizers[0].master[0].dtype == torch.float32
    assert torch.equal(optimizers[0].master[0], ref.detach())
    assert torch.equal(half.detach(), ref.detach().to(torch.bfloat16))



def test_proxy_size_has_ratios_and_no_verdicts():
    """``narrow`` times the host's work per decoding step (base's layers and heads, width
    64): its ratios are reported, and no target applies to them."""
    from fairseq_posenc.tools.benchmark.targets import summarize

    spec = benchmark.SIZES["narrow"]
    assert (spec["layers"], spec["heads"], spec["dim"], spec["proxy"]) == (6, 8, 64, True)
    memory = {"peak_bytes": 100, "largest_numel": 10**9}  # far over len x len x d_h
    for size, verdicts in (("narrow", False), ("small", True)):
        cfg = benchmark.Config(size=size, length=30, batch=2, translate=2, reps=2,
                               stock_every=3, beam=10, vocab=100, seed=1,
                               kinds=("translate",))
        times = {name: {"translate": [[0.1], [0.1]]} for name in ("stock", "shaw")}
        ratios = {"shaw": {"translate": [1.3, 1.3]}}
        mems = {name: {"translate": memory} for name in ("stock", "shaw")}
        row = summarize(cfg, ["stock", "shaw"], times, ratios, mems)["models"]["shaw"]
        assert row["translate"]["ratio"] == pytest.approx(1.3)
        assert bool(row["verdict"]) is verdicts, size
