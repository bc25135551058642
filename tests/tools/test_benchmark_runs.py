"""posenc-benchmark's GPU-run machinery, on CPU: ``--calls`` (a subset of the model
level's calls), a model that runs out of device memory left out and listed, the GPU
targets with their peak-memory limit, and ``--merge`` (split runs as one report)."""

from __future__ import annotations

import json

import pytest
import torch

from fairseq_posenc.tools import benchmark
from fairseq_posenc.tools.benchmark import levels


def test_calls_time_only_the_kinds_asked_and_a_model_out_of_memory_is_left_out(
        tmp_path, monkeypatch):
    """``--calls train``: no forward or translate timings, ratios None in the flat records;
    a model whose warm-up runs out of device memory is dropped from the timings, listed
    in the result, the table and the flat records (as huang3 can be at 512 tokens in
    batches of 32k tokens on a GPU)."""
    real = levels.measure_memory

    def measure(call, device, shapes, track=True):
        if any(s == (4, 2) for s in shapes):  # huang3's per-head table parameter, below
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(call, device, shapes, track)

    monkeypatch.setattr(levels, "measure_memory", measure)
    built = levels.build_models

    def build_models(names, cfg, inputs, device, layers=None):
        models = built(names, cfg, inputs, device, layers)
        if "huang3" in models:
            models["huang3"].param_shapes.add((4, 2))
        return models

    monkeypatch.setattr(levels, "build_models", build_models)
    flat = tmp_path / "flat.json"
    doc = benchmark.run(quick=True, encodings=["diet_rel", "huang3"], levels=("model",),
                        kinds=["train"], threads=1, out_md=str(tmp_path / "b.md"),
                        out_json=str(tmp_path / "b.json"), out_flat_json=str(flat))
    [result] = doc["results"]
    assert result["kinds"] == ["train"] and result["out_of_memory"] == ["huang3"]
    assert set(result["summary"]["models"]) == {"stock", "stock_copy", "diet_rel"}
    assert all(set(t) == {"train"} for t in result["times_s"].values())
    assert "huang3: out of memory (left out)" in doc["markdown"]
    records = {r["encoding"]: r for r in json.loads(flat.read_text())["results"]}
    assert records["diet_rel"]["translate_ratio"] is None
    assert records["diet_rel"]["train_ratio"] == result["summary"]["models"]["diet_rel"][
        "train"]["ratio"]
    assert records["huang3"]["out_of_memory"] and records["huang3"]["train_ratio"] is None
    assert json.loads((tmp_path / "b.json.partial").read_text())["results"][0][
        "out_of_memory"] == ["huang3"]


def test_gpu_runs_are_judged_by_the_gpu_targets():
    """The GPU targets, with a limit on the training step's peak memory."""
    from fairseq_posenc.tools.benchmark import settings, targets
    assert settings.targets_for("cuda")["shaw"] == (1.13, 1.20)
    assert settings.targets_for("cpu")["shaw"] == benchmark.TARGETS["shaw"]
    assert settings.memory_limit("diet_rel", "cuda") == 1.05
    assert settings.memory_limit("huang1", "cuda") == 1.3
    assert settings.memory_limit("huang3", "cuda") is None
    assert settings.memory_limit("cope", "cuda") == 2.0
    assert settings.memory_limit("diet_rel", "cpu") is None
    cell = {"ratio": 1.12, "min": 1.11, "max": 1.125}
    row = {"train": cell, "translate": cell, "peak_ratio": {"train": 1.07},
           "quadratic_dh": []}
    checks = targets.verdict("shaw", row, settings.targets_for("cuda"), 1.05)
    assert checks["train"]["pass"] and checks["translate"]["pass"]
    assert not checks["peak_memory"]["pass"]
    assert not targets.verdict("shaw", row)["train"]["pass"]  # CPU: 1.10 / 1.15


def test_merge_keeps_the_latest_measured_figure_per_encoding_length_and_dtype():
    """``--merge``: a later run's figures replace an earlier one's; figures a run did not
    time (None) leave the earlier ones, and each figure names the commit it was measured
    at; runs of different devices do not mix."""
    from fairseq_posenc.tools.benchmark.merged import gpu_summary_table, merge_flat

    def rec(name, train=None, translate=None, memory=None, **extra):
        return {"encoding": name, "size": "base", "length": 128, "dtype": "float16",
                "batch_sentences": 256, "train_ratio": train, "translate_ratio": translate,
                "memory_ratio": memory, **extra}

    train = {"device": "GPU", "torch": "t", "command": ["a"], "results": [
        rec("stock (noise control)", 1.0, None, 1.0, commit="aaaaaaa1"),
        rec("shaw", 10.4, None, 1.5, commit="aaaaaaa1"),
        rec("t5", 1.06, None, 1.06, commit="aaaaaaa1")]}
    shaw = {"device": "GPU", "torch": "t", "command": ["b"],
            "results": [rec("shaw", 2.3, None, 1.4, commit="bbbbbbb2")]}
    translate = {"device": "GPU", "torch": "t", "command": ["c"], "results": [
        rec("shaw", None, 1.5, commit="ccccccc3"), rec("t5", None, 1.1, commit="ccccccc3")]}
    merged = merge_flat([train, shaw, translate])
    by_name = {r["encoding"]: r for r in merged["results"]}
    assert (by_name["shaw"]["train_ratio"], by_name["shaw"]["translate_ratio"]) == (2.3, 1.5)
    assert by_name["shaw"]["memory_ratio"] == 1.4
    assert by_name["shaw"]["measured"] == {"train_ratio": "bbbbbbb2",
                                          "translate_ratio": "ccccccc3",
                                          "memory_ratio": "bbbbbbb2"}
    assert by_name["shaw"]["commit"] == "ccccccc3" and by_name["shaw"]["device"] == "GPU"
    assert by_name["t5"]["train_ratio"] == 1.06 and by_name["t5"]["translate_ratio"] == 1.1
    assert merged["commands"] == [["a"], ["b"], ["c"]]
    table = gpu_summary_table(merged)
    assert "| t5 | 1.06 | 1.10 |" in table and "not met: train 1.060 > 1.05" in table
    assert "| aaaaaaa, ccccccc |" in table  # t5's figures: two runs
    with pytest.raises(ValueError, match="different devices"):
        merge_flat([train, {**shaw, "device": "cpu"}])


def test_attention_dropout_reaches_every_model_and_its_records(tmp_path, monkeypatch):
    """``--attention-dropout P`` (the recipes' 0.1): stock's and every encoding's models
    are built with it, it heads the tables and is in the flat records, and runs with
    different settings merge as separate rows and columns."""
    from fairseq_posenc.tools.benchmark.merged import gpu_summary_table, merge_flat

    built = levels.build_models
    dropouts = {}

    def build_models(names, cfg, inputs, device, layers=None):
        models = built(names, cfg, inputs, device, layers)
        for name, m in models.items():
            dropouts[name] = {layer.self_attn.dropout_module.p
                              for layer in (*m.model.encoder.layers, *m.model.decoder.layers)}
        return models

    monkeypatch.setattr(levels, "build_models", build_models)
    flat = tmp_path / "flat.json"
    doc = benchmark.run(quick=True, encodings=["diet_rel"], levels=("model",),
                        kinds=["train"], reps=1, threads=1, attention_dropout=0.1,
                        out_md=str(tmp_path / "b.md"), out_json=str(tmp_path / "b.json"),
                        out_flat_json=str(flat))
    assert dropouts == {"stock": {0.1}, "stock_copy": {0.1}, "diet_rel": {0.1}}
    assert "source length 12, attention dropout 0.1" in doc["markdown"]
    records = json.loads(flat.read_text())
    assert {r["attention_dropout"] for r in records["results"]} == {0.1}
    without = {**records, "results": [{**r, "attention_dropout": 0.0}
                                      for r in records["results"]]}
    merged = merge_flat([records, without])
    assert sorted(r["attention_dropout"] for r in merged["results"]
                  if r["encoding"] == "diet_rel") == [0.0, 0.1]
    header = gpu_summary_table(merged).splitlines()[0]
    assert "train 12 float32 |" in header and "train 12 float32 dropout 0.1 |" in header
    with pytest.raises(ValueError, match=r"--attention-dropout must be in \[0, 1\)"):
        benchmark.run(quick=True, attention_dropout=1.0, out_md=None, out_json=None)


def test_no_memory_verdict_where_stock_outgrows_a_len_x_len_x_d_h_tensor(tmp_path):
    """A tiny model with a large vocabulary: stock's own output logits (B x len x vocab)
    are larger than a ``len x len x d_h`` tensor, so the largest activation cannot show
    one, and no encoding gets a memory verdict from it (before, stock's logits counted as
    each encoding's: ``diet_rel`` failed, ``huang3``'s tensor passed as seen)."""
    doc = benchmark.run(quick=True, encodings=["diet_rel", "huang3"], levels=("model",),
                        kinds=["train"], vocab=20000, threads=1,
                        out_md=str(tmp_path / "b.md"))
    [result] = doc["results"]
    rows = result["summary"]["models"]
    assert rows["stock"]["largest_rel"]["train"] >= 1  # the logits, not a position term
    for name in ("diet_rel", "huang3"):
        assert rows[name]["quadratic_visible"] == [] and rows[name]["quadratic_dh"] == []
        assert "memory" not in rows[name]["verdict"], name
    assert "(stock's as large: no verdict)" in doc["markdown"]
    assert not any("memory" in f for f in benchmark.failures(doc["results"]))
