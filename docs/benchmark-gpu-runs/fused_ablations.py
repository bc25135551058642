"""Where the fused distance kernel's time goes, by ablation: one self-attention call,
forward + backward, of ``fairseq_posenc/core/kernels/distance/`` against copies of it with
one piece of work removed (their numbers are wrong; only their times mean something):

* ``no_term``: the table is not read (the term is 0 in every tile);
* ``no_diagonal_sums``: the table's gradient sums each dS tile's columns (masked as the
  diagonals would be) instead of its diagonals: no ``tl.gather``;
* ``no_padding``: no padding mask (a source change is not needed: ``None``).

With the table's gradient and with a fixed table, beside stock's call (flash attention
with a ``(B, 1, 1, T)`` padding mask). Then RoPE's rotation per call, of a contiguous
tensor and of the projection's ``(T, B, H x d)`` view, forward alone and with backward.

    python docs/benchmark-gpu-runs/fused_ablations.py OUT_DIR [BASELINE]

``BASELINE``: another version of the kernels, a single ``distance.py`` as they were before
they became a package, timed beside this one (``git show
aafd044:fairseq_posenc/core/kernels/distance.py``: the table's gradient by atomic adds, with
which ``fused-ablations.json`` also ran a ``no_atomics`` ablation, storing the diagonal
sums instead of adding them).

writes OUT_DIR/fused-ablations.json. Medians of CUDA-event times over 30 calls.
"""

import importlib.util
import json
import pathlib
import sys
import tempfile

import torch
import torch.nn.functional as F

import fairseq_posenc.core.kernels.distance as distance
from fairseq_posenc.core.encodings.rope import rotate_pairs
from fairseq_posenc.core.kernels.rotary import rotate
from fused_kernels import D, H, attention_inputs, bench, dev, emit, records  # beside this

#: The package's files (its parent's import made absolute: the copies stand alone).
SOURCES = {path.name: path.read_text().replace(
    "from .. import on_device_of", "from fairseq_posenc.core.kernels import on_device_of")
    for path in pathlib.Path(distance.__file__).parent.glob("*.py")}
ABLATIONS = {  # name: (file, what is replaced, by what)
    "no_term": ("tile.py", "term = tl.load(table_row + index, mask=row_ok[:, None], other=0.0)"
                ".to(tl.float32)", "term = tl.zeros_like(qk)"),
    "no_diagonal_sums": ("tile.py", "skewed = tl.gather(ds, tl.minimum(tl.maximum(col, 0), "
                         "BLOCK - 1), 1)", "skewed = ds"),
}
#: The ablations that apply to this version of the kernels.
SOURCE_ABLATIONS = [name for name, (file, old, _) in ABLATIONS.items()
                    if old in SOURCES.get(file, "")]


def variant(name, source=None):
    """The kernels' package with one ablation (or ``source``, a single-file version of
    them), imported from files (Triton reads the source)."""
    folder = pathlib.Path(tempfile.mkdtemp())
    if source is None:
        file, old, new = ABLATIONS[name]
        assert SOURCES[file].count(old) == 1, name
        package = folder / f"distance_{name}"
        package.mkdir()
        for each, text in SOURCES.items():
            (package / each).write_text(text.replace(old, new) if each == file else text)
        spec = importlib.util.spec_from_file_location(
            package.name, package / "__init__.py", submodule_search_locations=[str(package)])
    else:
        path = folder / f"distance_{name}.py"
        path.write_text(source.replace("from . import on_device_of",
                                       "from fairseq_posenc.core.kernels import on_device_of"))
        spec = importlib.util.spec_from_file_location(f"distance_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def attention_calls(B, T, dtype):
    q, k, v, do, pad, padmask, table, fixed = attention_inputs(B, T, dtype)
    tag = dict(B=B, T=T, dtype=str(dtype)[6:])

    def timed(fn):
        def run():
            for t in (q, k, v, table):
                t.grad = None
            fn().backward(do)
        return bench(run)

    emit(case="stock_padmask", **tag, ms=timed(
        lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=padmask)))
    kernels = {"base": distance, **{name: variant(name) for name in ABLATIONS
                                    if name in SOURCE_ABLATIONS}}
    if len(sys.argv) > 2:  # a single-file version, e.g. git show REV:path > FILE
        kernels["baseline"] = variant("baseline", pathlib.Path(sys.argv[2]).read_text())
    for name, K in kernels.items():
        for what, t in (("table_grad", table), ("fixed_table", fixed)):
            if name == "no_diagonal_sums" and what == "fixed_table":
                continue  # no table gradient: the same code as base
            try:
                emit(case=what, variant=name, **tag, ms=timed(
                    lambda: K.distance_attention(q, k, v, t, -(T - 1), 0, pad)))
            except Exception as exc:
                emit(case=what, variant=name, **tag, error=repr(exc)[:300])
    emit(case="table_grad", variant="no_padding", **tag, ms=timed(
        lambda: distance.distance_attention(q, k, v, table, -(T - 1), 0, None)))


def rope_calls(B, T, dtype):
    x = torch.randn(T, B, H * D, device=dev, dtype=dtype).requires_grad_()
    theta = 10000.0 ** (-torch.arange(0, D, 2, device=dev, dtype=torch.float64) / D)
    angle = torch.arange(T, device=dev, dtype=torch.float64)[:, None] * theta
    rot = torch.polar(torch.ones_like(angle), angle).to(torch.complex64)
    dy = torch.randn(B, H, T, D, device=dev, dtype=dtype)
    contiguous = x.detach().view(T, B, H, D).permute(1, 2, 0, 3).contiguous().requires_grad_()
    for name, fn in (("complex", rotate_pairs), ("fused", rotate)):
        for layout in ("view", "contiguous"):
            def inputs():
                if layout == "view":
                    x.grad = None
                    return x.view(T, B, H, D).permute(1, 2, 0, 3)
                contiguous.grad = None
                return contiguous
            tag = dict(kernel=name, layout=layout, B=B, T=T, dtype=str(dtype)[6:])
            with torch.no_grad():
                emit(case="rope_forward", **tag, ms=bench(lambda: fn(inputs(), rot)))
            emit(case="rope_forward_backward", **tag,
                 ms=bench(lambda: fn(inputs(), rot).backward(dy)))


if __name__ == "__main__":
    for B, T in ((64, 512), (256, 128)):
        try:
            attention_calls(B, T, torch.float16)
        except Exception as exc:
            emit(case="attention_calls", B=B, T=T, error=repr(exc)[:400])
        json.dump(records, open(f"{sys.argv[1]}/fused-ablations.json", "w"), indent=1)
    for B, T in ((256, 128), (64, 512)):
        rope_calls(B, T, torch.float16)
    json.dump(records, open(f"{sys.argv[1]}/fused-ablations.json", "w"), indent=1)
