"""Library kernels for content-free biases by distance, against the project's fused kernel.

One self-attention call, forward + backward, fp16, 8 heads of 64, fairseq's left padding
(``fused_kernels.attention_inputs``), at 64 x 512 and 256 x 128:

* ``stock_padmask`` (and ``_dropout``): ``F.scaled_dot_product_attention`` with stock's
  ``(B, 1, 1, T)`` float mask, torch choosing the backend; ``backends`` names the CUDA
  kernels one call launched (torch.profiler), so it shows which backend torch takes with
  attention dropout 0.1 (the recipes' setting) and without;
* ``fused_grad`` / ``fused_fixed`` (and ``_dropout``): the project's distance kernel with
  the table's gradient (``t5``, ``diet_rel``) or a fixed table (``alibi``'s encoder);
* ``cudnn_nobias``: cuDNN's SDPA (cudnn-frontend graph) with the padding only: the floor of
  the library route;
* ``cudnn_bias_dbias``: cuDNN's SDPA with the ``(1, H, T, T)`` bias expanded from the table
  and its gradient ``dBias``, summed back along the diagonals into the table's gradient;
* ``cudnn_bias_fixed``: the same bias, no gradient (``alibi``'s encoder).

cuDNN's padding mask is right padding (``seq_len_q``, ``seq_len_kv``), fairseq's is left
padding: the cuDNN route runs on the time-reversed sequences, where a sequence's tokens
come first, and reverses the bias's distances with them (``b[j - i]`` becomes ``b[i' - j']``).
``agree`` compares each route's output and gradients (table's included) with a float32
reference of the formula on the real rows.

    python docs/benchmark-gpu-runs/library_routes.py OUT_DIR [routes] [without_copies]

``without_copies``: the cuDNN route on fairseq's ``(T, B, H, D)`` memory with no copy (each
sequence's first real token as a ragged offset), and torch's SDPA with the fixed bias and
the padding summed into one ``(B, H, T, T)`` mask, beside stock and the project's kernel on
the same tensors.

writes OUT_DIR/library-routes.json; needs ``nvidia-cudnn-frontend`` (1.16.0) for the cuDNN
cases (the others run without it).
"""

import json
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import fairseq_posenc.core.kernels.distance as K
from fused_kernels import H, D, attention_inputs, bench, dev, emit, records


def kernels_launched(fn) -> list[str]:
    """Names of the attention kernels one call of ``fn`` launches (forward + backward)."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = {e.key for e in prof.key_averages()
             if any(w in e.key.lower() for w in ("attn", "attention", "fmha", "flash", "sdpa",
                                                 "cudnn", "mha", "softmax", "gemm", "sm90"))}
    return sorted(names)[:12]


class CudnnGraphs:
    """cuDNN SDPA forward and backward graphs for one shape, with the padding as cuDNN's
    right-padding mask, and optionally a ``(1, H, T, T)`` bias and its gradient."""

    def __init__(self, cudnn, handle, B, T, bias: bool, dbias: bool, ragged: bool = False):
        self.cudnn, self.handle = cudnn, handle
        like = torch.empty(B, H, T, D, device=dev, dtype=torch.float16)
        if ragged:  # fairseq's (T, B, H, D) memory; each sequence from its first token on
            like = torch.empty(T, B, H, D, device=dev, dtype=torch.float16).permute(1, 2, 0, 3)
        stats = torch.empty(B, H, T, 1, device=dev, dtype=torch.float32)
        bias_like = torch.empty(1, H, T, T, device=dev, dtype=torch.float16)
        half, flt, i32 = cudnn.data_type.HALF, cudnn.data_type.FLOAT, cudnn.data_type.INT32

        def graph():
            return cudnn.pygraph(io_data_type=half, intermediate_data_type=flt,
                                 compute_data_type=flt, handle=handle)

        def lengths(g):
            return g.tensor(dim=[B, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)

        def offsets(g):
            return g.tensor(dim=[B + 1, 1, 1, 1], stride=[1, 1, 1, 1],
                            data_type=cudnn.data_type.INT64) if ragged else None

        def ragged_like(g, off):
            t = g.tensor_like(like)
            if off is not None:
                t.set_ragged_offset(off)
            return t

        f = self.f = graph()
        self.foff = offsets(f)
        self.fq, self.fk, self.fv = (ragged_like(f, self.foff) for _ in range(3))
        self.fsq, self.fskv = lengths(f), lengths(f)
        self.fb = f.tensor_like(bias_like) if bias else None
        self.fo, self.fstats = f.sdpa(name="sdpa", q=self.fq, k=self.fk, v=self.fv,
                                      generate_stats=True, attn_scale=1.0, bias=self.fb,
                                      use_padding_mask=True, seq_len_q=self.fsq,
                                      seq_len_kv=self.fskv)
        self.fo.set_output(True).set_dim(like.size()).set_stride(like.stride())
        if ragged:
            self.fo.set_ragged_offset(self.foff)
        self.fstats.set_output(True).set_dim(stats.size()).set_stride(stats.stride())
        self.fstats.set_data_type(flt)
        b = self.b = graph()
        self.boff = offsets(b)
        self.bq, self.bk, self.bv, self.bo, self.bdo = (ragged_like(b, self.boff)
                                                        for _ in range(5))
        self.bstats = b.tensor_like(stats)
        self.bsq, self.bskv = lengths(b), lengths(b)
        self.bb = b.tensor_like(bias_like) if bias else None
        self.bdb = b.tensor_like(bias_like) if dbias else None
        self.bdq, self.bdk, self.bdv = b.sdpa_backward(
            name="sdpa_backward", q=self.bq, k=self.bk, v=self.bv, o=self.bo, dO=self.bdo,
            stats=self.bstats, attn_scale=1.0, bias=self.bb, dBias=self.bdb,
            use_padding_mask=True, seq_len_q=self.bsq, seq_len_kv=self.bskv)
        for t in (self.bdq, self.bdk, self.bdv):
            t.set_output(True).set_dim(like.size()).set_stride(like.stride())
            if ragged:
                t.set_ragged_offset(self.boff)
        for g in (f, b):
            g.validate()
            g.build_operation_graph()
            g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            g.check_support()
            g.build_plans()
        self.workspace = torch.empty(max(f.get_workspace_size(), b.get_workspace_size()),
                                     device=dev, dtype=torch.uint8)

    def forward(self, q, k, v, bias, lengths, offsets=None):
        o = torch.empty_like(q)
        stats = torch.empty(*q.shape[:3], 1, device=dev, dtype=torch.float32)
        pack = {self.fq: q, self.fk: k, self.fv: v, self.fo: o, self.fstats: stats,
                self.fsq: lengths, self.fskv: lengths}
        if self.foff is not None:
            pack[self.foff] = offsets
        if self.fb is not None:
            pack[self.fb] = bias
        self.f.execute(pack, self.workspace, handle=self.handle)
        return o, stats

    def backward(self, q, k, v, o, do, stats, bias, lengths, offsets=None):
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        pack = {self.bq: q, self.bk: k, self.bv: v, self.bo: o, self.bdo: do,
                self.bstats: stats, self.bdq: dq, self.bdk: dk, self.bdv: dv,
                self.bsq: lengths, self.bskv: lengths}
        if self.boff is not None:
            pack[self.boff] = offsets
        dbias = None
        if self.bb is not None:
            pack[self.bb] = bias
        if self.bdb is not None:
            dbias = torch.empty_like(bias)
            pack[self.bdb] = dbias
        self.b.execute(pack, self.workspace, handle=self.handle)
        return dq, dk, dv, dbias


class CudnnDistanceAttention(torch.autograd.Function):
    """``softmax(q k^T + table[h, j - i + T - 1] + padding) v`` through cuDNN, on the
    time-reversed sequences (left padding becomes cuDNN's right padding)."""

    @staticmethod
    def forward(ctx, q, k, v, table, pad, graphs):
        T = q.size(2)
        lengths = (~pad).sum(1, dtype=torch.int32).view(-1, 1, 1, 1)
        # reversed time: i' = T - 1 - i, so j - i = i' - j'
        r = torch.arange(T, device=dev)
        bias = None if table is None else table[:, (r[:, None] - r[None] + T - 1)][None]
        bias = None if bias is None else bias.contiguous()
        qr, kr, vr = q.flip(2), k.flip(2), v.flip(2)
        o, stats = graphs.forward(qr, kr, vr, bias, lengths)
        ctx.save_for_backward(qr, kr, vr, o, stats, bias, lengths)
        ctx.graphs, ctx.table_shape = graphs, None if table is None else table.shape
        return o.flip(2)

    @staticmethod
    def backward(ctx, do):
        qr, kr, vr, o, stats, bias, lengths = ctx.saved_tensors
        dq, dk, dv, dbias = ctx.graphs.backward(qr, kr, vr, o, do.flip(2).contiguous(), stats,
                                                bias, lengths)
        dtable = None if dbias is None else diagonal_sums(dbias, ctx.table_shape,
                                                         reversed_time=True)
        return dq.flip(2), dk.flip(2), dv.flip(2), dtable, None, None


def diagonal_sums(dbias, table_shape, reversed_time=False):
    """The table's gradient from ``dBias`` ``(1, H, T, T)``: entry ``j - i + T - 1`` sums
    the bias's gradient over its pairs (``i - j + T - 1`` on time-reversed sequences)."""
    T = dbias.size(-1)
    r = torch.arange(T, device=dbias.device)
    index = (r[:, None] - r[None] if reversed_time else r[None] - r[:, None]) + T - 1
    dtable = torch.zeros(table_shape, device=dbias.device, dtype=torch.float32)
    dtable.index_add_(1, index.reshape(-1), dbias[0].reshape(dbias.size(1), -1).float())
    return dtable.to(dbias.dtype)


class CudnnRaggedDistanceAttention(torch.autograd.Function):
    """The same through cuDNN with no copy: ``q``, ``k``, ``v`` are ``(B, H, T, D)`` views
    of fairseq's ``(T, B, H, D)`` memory, and each sequence is told to cuDNN by a ragged
    offset at its first real token and its length (cuDNN's padding mask)."""

    @staticmethod
    def forward(ctx, q, k, v, table, pad, graphs):
        B, _, T, _ = q.shape
        start = pad.sum(1)
        lengths = (T - start).to(torch.int32).view(-1, 1, 1, 1)
        offsets = torch.empty(B + 1, dtype=torch.int64, device=dev)
        offsets[:B] = start * (B * H * D) + torch.arange(B, device=dev) * (H * D)
        offsets[B] = T * B * H * D
        offsets = offsets.view(-1, 1, 1, 1)
        r = torch.arange(T, device=dev)
        bias = None if table is None else table[:, r[None] - r[:, None] + T - 1][None]
        bias = None if bias is None else bias.contiguous()
        o, stats = graphs.forward(q, k, v, bias, lengths, offsets)
        ctx.save_for_backward(q, k, v, o, stats, bias, lengths, offsets)
        ctx.graphs, ctx.table_shape = graphs, None if table is None else table.shape
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, stats, bias, lengths, offsets = ctx.saved_tensors
        do = do.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)
        dq, dk, dv, dbias = ctx.graphs.backward(q, k, v, o, do, stats, bias, lengths, offsets)
        dtable = None if dbias is None else diagonal_sums(dbias, ctx.table_shape)
        return dq, dk, dv, dtable, None, None


def fairseq_layout(t):
    """A ``(B, H, T, D)`` leaf whose memory is ``(T, B, H, D)``, as fairseq's."""
    return t.detach().permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3).requires_grad_(
        t.requires_grad)


def reference(q, k, v, do, pad, table):
    """Float32 formula on the real rows: output and gradients of q, k, v and the table."""
    T = q.size(2)
    r = torch.arange(T, device=dev)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    t32 = table.detach().float().requires_grad_()
    logits = q32 @ k32.transpose(-1, -2) + t32[:, r[None] - r[:, None] + T - 1][None]
    logits = logits.masked_fill(pad[:, None, None], float("-inf"))
    out = torch.softmax(logits, -1) @ v32
    real = (~pad)[:, None, :, None]
    out.backward(do.float() * real)
    return out, q32.grad, k32.grad, v32.grad, t32.grad


def agreement(got, ref, pad):
    """Largest absolute difference of each of (out, dq, dk, dv, dtable) on the real rows."""
    real = (~pad)[:, None, :, None]
    names = ("out", "dq", "dk", "dv", "dtable")
    result = {}
    for name, a, b in zip(names, got, ref):
        if a is None:
            continue
        a, b = a.detach().float(), b.detach().float()
        if name != "dtable":
            a, b = a * real, b * real
        result[name] = float((a - b).abs().max())
    return result


def routes(B, T, cudnn, handle):
    dtype = torch.float16
    q, k, v, do, pad, padmask, table, fixed = attention_inputs(B, T, dtype)
    do = do * (~pad)[:, None, :, None]  # fairseq's loss never reads a padded row
    cases = {
        "stock_padmask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=padmask),
        "stock_padmask_dropout": lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=padmask, dropout_p=0.1),
        "fused_grad": lambda: K.distance_attention(q, k, v, table, -(T - 1), 0, pad),
        "fused_grad_dropout": lambda: K.distance_attention(q, k, v, table, -(T - 1), 0, pad,
                                                           dropout_p=0.1),
        "fused_fixed": lambda: K.distance_attention(q, k, v, fixed, -(T - 1), 0, pad),
    }
    if cudnn is not None:
        try:
            graph_sets = {
                "cudnn_nobias": CudnnGraphs(cudnn, handle, B, T, bias=False, dbias=False),
                "cudnn_bias_dbias": CudnnGraphs(cudnn, handle, B, T, bias=True, dbias=True),
                "cudnn_bias_fixed": CudnnGraphs(cudnn, handle, B, T, bias=True, dbias=False),
            }
            cases["cudnn_nobias"] = lambda: CudnnDistanceAttention.apply(
                q, k, v, None, pad, graph_sets["cudnn_nobias"])
            cases["cudnn_bias_dbias"] = lambda: CudnnDistanceAttention.apply(
                q, k, v, table, pad, graph_sets["cudnn_bias_dbias"])
            cases["cudnn_bias_fixed"] = lambda: CudnnDistanceAttention.apply(
                q, k, v, fixed, pad, graph_sets["cudnn_bias_fixed"])
        except Exception as exc:
            emit(case="cudnn_graphs", B=B, T=T, error=repr(exc)[:600])
    measure(cases, (B, T), (q, k, v, table, do, pad),
            backends=lambda name: name.startswith("stock"),
            agree=lambda name: not name.startswith("stock") and "dropout" not in name
            and name != "cudnn_nobias",
            table_grad=lambda name: name in ("fused_grad", "cudnn_bias_dbias"),
            memory=lambda name: name.startswith("cudnn"))


def routes_without_copies(B, T, cudnn, handle):
    """The library routes with fairseq's memory layout and no copy (ragged offsets), and
    torch's SDPA with the fixed bias and the padding summed into a ``(B, H, T, T)`` mask,
    beside stock's call and the project's kernel on the same tensors."""
    dtype = torch.float16
    q, k, v, do, pad, padmask, table, fixed = attention_inputs(B, T, dtype)
    q, k, v, do = (fairseq_layout(t) for t in (q, k, v, do * (~pad)[:, None, :, None]))
    r = torch.arange(T, device=dev)
    cases = {
        "stock_padmask_tbhd": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=padmask),
        "fused_grad_tbhd": lambda: K.distance_attention(q, k, v, table, -(T - 1), 0, pad),
        "fused_fixed_tbhd": lambda: K.distance_attention(q, k, v, fixed, -(T - 1), 0, pad),
        "sdpa_fixed_bias_mask": lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=fixed[:, r[None] - r[:, None] + T - 1][None] + padmask),
    }
    try:
        sets = {name: CudnnGraphs(cudnn, handle, B, T, bias=bias, dbias=dbias, ragged=True)
                for name, bias, dbias in (("nobias", False, False), ("dbias", True, True),
                                          ("fixed", True, False))}
        cases["cudnn_ragged_nobias"] = lambda: CudnnRaggedDistanceAttention.apply(
            q, k, v, None, pad, sets["nobias"])
        cases["cudnn_ragged_bias_dbias"] = lambda: CudnnRaggedDistanceAttention.apply(
            q, k, v, table, pad, sets["dbias"])
        cases["cudnn_ragged_bias_fixed"] = lambda: CudnnRaggedDistanceAttention.apply(
            q, k, v, fixed, pad, sets["fixed"])
    except Exception as exc:
        emit(case="cudnn_ragged_graphs", B=B, T=T, error=repr(exc)[:600])
    measure(cases, (B, T), (q, k, v, table, do, pad),
            backends=lambda name: name.startswith("sdpa"),
            agree=lambda name: "nobias" not in name and not name.startswith("stock"),
            table_grad=lambda name: "grad" in name, memory=lambda name: False)


def measure(cases, shape, tensors, backends, agree, table_grad, memory):
    """Time each case's forward + backward (:func:`bench`); where asked, the kernels it
    launches, its agreement with the float32 formula (:func:`agreement`, the table's
    gradient included where ``table_grad``) and its peak memory; one record per case."""
    q, k, v, table, do, pad = tensors
    ref = reference(q, k, v, do, pad, table)
    for name, fn in cases.items():
        def run():
            for t in (q, k, v, table):
                t.grad = None
            fn().backward(do)
        record = dict(case=name, B=shape[0], T=shape[1], dtype="float16")
        try:
            record["ms"] = bench(run)
            if backends(name):
                record["backends"] = kernels_launched(run)
            if agree(name):
                for t in (q, k, v, table):
                    t.grad = None
                out = fn()
                out.backward(do)
                grads = (q.grad, k.grad, v.grad, table.grad if table_grad(name) else None)
                record["agree"] = agreement((out, *grads), ref, pad)
            if memory(name):
                record["peak_mb"] = peak_mb(run)
        except Exception as exc:  # record and go on: one failure must not end the run
            record["error"] = repr(exc)[:600]
        emit(**record)


def peak_mb(fn) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2 ** 20


def main(out_dir):
    cudnn = handle = None
    try:
        import cudnn
        handle = cudnn.create_handle()
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
        emit(case="cudnn", backend=cudnn.backend_version_string(),
             torch_cudnn=torch.backends.cudnn.version())
    except Exception as exc:
        emit(case="cudnn", error=repr(exc)[:600])
        cudnn = None
    stages = sys.argv[2:] or ["routes", "without_copies"]
    for B, T in ((64, 512), (256, 128)):
        for stage in stages:
            try:
                {"routes": routes, "without_copies": routes_without_copies}[stage](
                    B, T, cudnn, handle)
            except Exception as exc:
                emit(case=stage, B=B, T=T, error=repr(exc)[:600])
        torch.cuda.empty_cache()
        json.dump(records, open(f"{out_dir}/library-routes.json", "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
