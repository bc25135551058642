"""Per-call fwd+bwd: padding as extra q/k dimensions (flash, no mask) vs masks."""
import json, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
dev = torch.device("cuda"); H, D = 8, 64; out = []
def bench(fn, n=30):
    for _ in range(3): fn()
    torch.cuda.synchronize(); ts = []
    for _ in range(n):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    return sorted(ts)[n // 2]
for B, T in [(64, 512), (256, 128)]:
  for dtype in [torch.float16, torch.bfloat16]:
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g).requires_grad_() for _ in range(3))
    pq, pk = (torch.randn(1, H, T, D, device=dev, dtype=dtype, generator=g).requires_grad_() for _ in range(2))
    do = torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g)
    start = T - torch.randint(int(0.8 * T), T + 1, (B,), device=dev, generator=g); start[0] = 0
    pad = torch.arange(T, device=dev)[None] < start[:, None]
    padmask = torch.zeros(B, 1, 1, T, device=dev, dtype=dtype).masked_fill(pad[:, None, None], float("-inf"))
    kx = torch.zeros(B, 1, T, 8, device=dev, dtype=dtype); kx[..., 0] = pad[:, None, :].to(dtype) * -1e4
    qx = torch.zeros(1, 1, T, 8, device=dev, dtype=dtype); qx[..., 0] = 1
    table = (0.1 * torch.randn(H, 2 * T - 1, device=dev, generator=g)).requires_grad_()
    rel = torch.arange(T, device=dev)[None] - torch.arange(T, device=dev)[:, None] + T - 1
    causal = torch.triu(torch.full((T, T), float("-inf"), device=dev, dtype=dtype), 1)
    cat = lambda a, *bs: torch.cat([a, *(b.expand(B, H, T, -1) for b in bs)], -1)
    cases = {
      "sdpa_padmask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=padmask),
      "pad_as_dims_d72": lambda: F.scaled_dot_product_attention(cat(q, qx), cat(k, kx), v),
      "concat128_padmask": lambda: F.scaled_dot_product_attention(cat(q, pq), cat(k, pk), v, attn_mask=padmask),
      "concat136_pad_as_dims": lambda: F.scaled_dot_product_attention(cat(q, pq, qx), cat(k, pk, kx), v),
      "causal_padmask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=causal + padmask),
      "causal_is_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
      "causal_concat128_padmask": lambda: F.scaled_dot_product_attention(cat(q, pq), cat(k, pk), v, attn_mask=causal + padmask),
      "causal_concat128_is_causal": lambda: F.scaled_dot_product_attention(cat(q, pq), cat(k, pk), v, is_causal=True),
      "bias_grad_padmask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=table[:, rel].to(dtype)[None] + padmask),
      "bias_grad_pad_as_dims": lambda: F.scaled_dot_product_attention(cat(q, qx), cat(k, kx), v, attn_mask=table[:, rel].to(dtype)[None]),
      "causal_bias_grad_padmask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=table[:, rel].to(dtype)[None] + causal + padmask),
      "causal_bias_grad_nopad": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=(table[:, rel].to(dtype) + causal)[None]),
    }
    for name, fn in cases.items():
        def run():
            for t in (q, k, v, pq, pk, table): t.grad = None
            fn().backward(do)
        try: r = dict(case=name, B=B, T=T, dtype=str(dtype)[6:], ms=bench(run))
        except Exception as exc: r = dict(case=name, B=B, T=T, dtype=str(dtype)[6:], error=repr(exc)[:300])
        out.append(r); print(json.dumps(r), flush=True)
    # exactness of padding as dims, forward
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=padmask); alt = F.scaled_dot_product_attention(cat(q, qx), cat(k, kx), v)
    out.append(dict(case="agree_pad_as_dims", B=B, T=T, dtype=str(dtype)[6:], diff=float((ref - alt).abs().max()))); print(out[-1])
json.dump(out, open(sys.argv[1], "w"), indent=1)
