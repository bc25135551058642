"""Host time of planning one self-attention call (``attention_plan.plan_attention`` and
its ``Call``) in a decoding step, beside one decoding step of that layer, on CPU with one
thread.

    PYTHONPATH=. python docs/benchmark-cpu-runs/plan_cost.py

A step is one query over 20 cached positions for 10 rows (beam 5 x 2 sentences) of the
tiny test model's first decoder layer; each figure is the mean over many calls."""

from __future__ import annotations

import timeit

import torch

from fairseq_posenc.core.attention_plan import Call, plan_attention
from tests.support.model_utils import build_model

torch.set_num_threads(1)
CPU = torch.device("cpu")
print(f"torch {torch.__version__}, 1 thread")
for name in ("t5", "alibi", "xl"):
    model, _ = build_model(name)
    attn = model.decoder.layers[0].self_attn
    calls = 50_000
    plan = timeit.timeit(  # the call's description is made per call, as forward makes it
        lambda: plan_attention(attn._positions, Call(CPU, torch.float32, 1, 20, incremental=True)),
        number=calls) / calls
    x = torch.randn(1, 10, attn.embed_dim)
    state: dict = {}
    with torch.no_grad(), attn.scope.open():
        for _ in range(20):  # fill the cache
            attn(x, x, x, incremental_state=state, need_weights=False)

        def one_step() -> None:  # on a copy of the cache, which stays at 20 positions
            attn(x, x, x, incremental_state={k: dict(v) for k, v in state.items()},
                 need_weights=False)

        steps = 2_000
        stepped = timeit.timeit(one_step, number=steps) / steps
    print(f"{name:6s} plan {plan * 1e6:5.2f} us   one decoding step of the layer "
          f"{stepped * 1e6:6.1f} us   plan / step {plan / stepped:.3f}")
