"""Model-level train step (fp16, base): the low-rank operands read per layer by indexing
(old) vs once per forward as one-hot rows (new) vs the bias path; plus profiles."""
import json, statistics, sys, time
import torch
import fairseq_posenc.plugin.attention as A
from fairseq_posenc.core.encodings import base
from fairseq_posenc.plugin.build import toy_dictionary
from fairseq_posenc.tools.benchmark.workload import (build_model, make_batch, make_optimizer,
    init_optimizer_state, train_step)
from fairseq_posenc.plugin.attention import PositionalMultiheadAttention
out = {}
dev = torch.device("cuda")
new_operands = A.low_rank_operands

def old_operands(term, q_len, k_len, q_offset, kpm, ctx):
    positions = base._real_positions(kpm, k_len, ctx)
    p_q, p_k = term.factors(min(k_len, term.max_len), ctx)
    if positions is None:
        return p_q[None, :, q_offset:k_len], p_k[None, :, :k_len]
    return p_q[:, positions[:, q_offset:]].transpose(0, 1), p_k[:, positions].transpose(0, 1)

def step_fn(model, batch, pad):
    opt = make_optimizer(model.parameters()); init_optimizer_state(opt)
    def f():
        torch.cuda.synchronize(); t = time.perf_counter()
        train_step(model, opt, batch, pad); torch.cuda.synchronize()
        return time.perf_counter() - t
    return f

for length in (128, 512):
    d = toy_dictionary(10000)
    batch = make_batch(d, 32768 // length, length, 1, dev)
    names = ["stock", "diet_abs", "tupe_a", "tupe_r", "alibi", "rope", "t5"]
    models = {n: build_model(n, "base", d, 1, dev, dtype=torch.float16) for n in names}
    variants = [("stock", "stock", None)]
    for n in names[1:]:
        variants.append((n, n + "/new", ("new", "auto")))
        if n in ("diet_abs", "tupe_a", "tupe_r", "alibi"):
            variants += [(n, n + "/old", ("old", "auto")), (n, n + "/bias", ("new", "bias"))]
    fns = {}
    for n in names:
        fns[n] = step_fn(models[n], batch, d.pad())
    def run(v):
        n, label, how = v
        if how:
            A.low_rank_operands = new_operands if how[0] == "new" else old_operands
            for m in models[n].modules():
                if isinstance(m, PositionalMultiheadAttention):
                    m.low_rank_kernel = how[1]
        return fns[n]()
    for v in variants:
        run(v); run(v)
    times = {v[1]: [] for v in variants}
    for rep in range(12):
        for v in variants:
            times[v[1]].append(run(v))
            times["stock"].append(fns["stock"]())
    med = {k: statistics.median(x) for k, x in times.items()}
    out[length] = {k: {"ms": 1000 * med[k], "ratio": med[k] / med["stock"]} for k in med}
    print(length, json.dumps({k: round(v["ratio"], 3) for k, v in out[length].items()}), flush=True)
    if length == 128:
        A.low_rank_operands = new_operands
        for n in ("diet_abs", "rope", "alibi", "t5"):
            for m in models[n].modules():
                if isinstance(m, PositionalMultiheadAttention):
                    m.low_rank_kernel = "auto"
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(2):
                    fns[n]()
            with open(f"{sys.argv[1]}/profile_{n}.txt", "w") as f:
                f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))
    del models, fns
    torch.cuda.empty_cache()
json.dump(out, open(f"{sys.argv[1]}/lowrank.json", "w"), indent=1)
