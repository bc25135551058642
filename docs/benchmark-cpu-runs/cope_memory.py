"""Peak memory and time of one CoPE self-attention layer's training call (forward and
backward) on CPU: CoPE's logits in one piece against blocks of queries
(``fairseq_posenc.core.encodings.cope.BLOCK_PAIRS``), beside a layer without a position
term (torch's SDPA). Each case runs in a subprocess of its own, whose peak resident memory
(``resource.getrusage``'s ``ru_maxrss``) over the first call less its resident memory
before it is the first figure; the second is the peak of the bytes allocated and not yet
freed during a later call, from ``torch.profiler``'s events (``profile_memory=True``: each
op's own net allocation, and the frees outside ops, in the order they began); the time is
that of the second call.

    python docs/benchmark-cpu-runs/cope_memory.py [BATCH] [LENGTH]

Defaults: 16 sentences of 512 tokens, ``embed_dim`` 512, 8 heads, float32, the encoder's
layer (the table covers both sides); 2 threads.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

CASES = {  # name -> (encoding, BLOCK_PAIRS)
    "no position term (SDPA)": (None, None),
    "cope, one piece": ("cope", 2 ** 62),
    "cope, blocks (default 2^24 pairs)": ("cope", None),
    "cope, blocks of 2^22 pairs": ("cope", 2 ** 22),
}


def child(encoding, block_pairs, batch: int, length: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    import fairseq_posenc.core.encodings.cope as cope
    from fairseq_posenc.nn import PositionalSelfAttention

    torch.set_num_threads(2)
    torch.manual_seed(0)
    if block_pairs is not None:
        cope.BLOCK_PAIRS = block_pairs
    layer = PositionalSelfAttention(512, 8, encoding, causal=False, max_len=length).train()
    x = torch.randn(batch, length, 512, requires_grad=True)

    def call():
        out = layer(x)
        out.square().sum().backward()

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    call()  # the first call: the high-water mark of the process
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    call()
    seconds = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    live = peak_live = 0  # each op's own net allocation and the frees outside ops, in order
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak_live = max(peak_live, live)
    return {"rss_peak_mib": (peak - before) / 1024, "seconds": seconds,
            "profiler_peak_mib": peak_live / 2 ** 20}


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        encoding, block, batch, length = json.loads(sys.argv[2])
        print(json.dumps(child(encoding, block, batch, length)))
        return
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    length = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    print(f"{batch} x {length} tokens, embed_dim 512, 8 heads, float32, encoder layer")
    for name, (encoding, block) in CASES.items():
        done = subprocess.run([sys.executable, __file__, "--child",
                               json.dumps([encoding, block, batch, length])],
                              capture_output=True, text=True, check=True)
        got = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name:36s} peak RSS +{got['rss_peak_mib']:7.0f} MiB   profiler peak "
              f"{got['profiler_peak_mib']:7.0f} MiB   {got['seconds']:6.2f} s")


if __name__ == "__main__":
    main()
