"""``torch.profiler`` of two training steps (base, fp16, 32k-token batches) per model, the
kernels by GPU time: ``python docs/benchmark-gpu-runs/profile_rows.py [LENGTH [MODEL ...]]``
(default: 512 tokens; stock, xl and huang4)."""
import sys
import torch
from torch.profiler import ProfilerActivity, profile
from fairseq_posenc.tools.benchmark.workload import (build_model, init_optimizer_state, make_batch,
                                               make_optimizer, train_step)
from fairseq_posenc.plugin.build import toy_dictionary

dev = torch.device("cuda")
d = toy_dictionary(10000)
length = int(sys.argv[1]) if len(sys.argv) > 1 else 512
batch = make_batch(d, 32768 // length, length, 1, dev)
for name in sys.argv[2:] or ("stock", "xl", "huang4"):
    model = build_model(name, "base", d, 1, dev, dtype=torch.float16)
    opt = make_optimizer(model.parameters())
    init_optimizer_state(opt)
    for _ in range(3):
        train_step(model, opt, batch, d.pad())
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            train_step(model, opt, batch, d.pad())
        torch.cuda.synchronize()
    print(f"=== {name} {length}")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=70))
    del model, opt
    torch.cuda.empty_cache()
