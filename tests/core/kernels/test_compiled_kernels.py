"""``posenc-kernels`` (``fairseq_posenc.tools.benchmark.compiled``): the fused kernels compiled
here for an H100 (sm_90) that is not here, and what they take of it.

Compiling needs the kernels defined compiled, not interpreted, and the other kernel tests
set ``TRITON_INTERPRET=1`` for this process (``tests/support/interpreted.py``): the compiling runs
in a child process without it. The references: ``ptxas -v``'s own report of the compile
that made each binary (Triton's ``TRITON_DUMP_PTXAS_LOG``, with an empty cache so that it
compiles), for the registers and stack frame read from the binary; and two kernels whose
register needs are known without a compiler: a copy of 128 numbers, and a 1-warp product
whose ``128 x 256`` float32 accumulator is 1024 values per thread, four times what a
thread's 255 registers hold.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from typing import Optional

import pytest

pytestmark = pytest.mark.slow  # compiles the kernels in child processes

# Not imported here: Triton's interpreter, which the other kernel tests use, is chosen
# before Triton is first imported.
if importlib.util.find_spec("triton") is None:
    pytest.skip("posenc-kernels needs Triton (scripts/test.sh installs it on CPU; CUDA "
                "builds of torch bring it)", allow_module_level=True)


def run_compiled(code: str, tmp_path, env: Optional[dict[str, str]] = None) -> str:
    """``code`` in a Python process whose kernels are compiled (no ``TRITON_INTERPRET``),
    from a file (Triton reads a kernel's source); its stdout."""
    script = tmp_path / "compiled.py"
    script.write_text(textwrap.dedent(code))
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, **(env or {})}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


KNOWN_KERNELS = """
import json
import torch, triton, triton.language as tl
from fairseq_posenc.tools.benchmark.compiled import compiling_for, resources

@triton.jit
def copy(X, Y, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(Y + i, tl.load(X + i))

@triton.jit
def product(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    acc = tl.zeros([M, N], tl.float32)
    for step in range(0, 1024, K):
        a = tl.load(A + m[:, None] * 1024 + step + k[None, :])
        b = tl.load(B + (step + k)[:, None] * N + n[None, :])
        acc += tl.dot(a, b)
    tl.store(C + m[:, None] * N + n[None, :], acc)

x = torch.zeros(128, dtype=torch.float16)
a, b = torch.zeros(128, 1024, dtype=torch.float16), torch.zeros(1024, 256, dtype=torch.float16)
with compiling_for(90) as compiled:
    copy[(1,)](x, x.clone(), N=128)
    product[(1,)](a, b, torch.zeros(128, 256), M=128, N=256, K=32, num_warps=1)
print(json.dumps({c.kernel: {**c.__dict__, "arch": k.metadata.target.arch}
                  for c, k in ((resources(k), k) for k in compiled)}))
"""


def ptxas_reports(log: str) -> dict[str, tuple[int, int, int, int]]:
    """``ptxas -v``'s report per function: registers, stack frame, spill stores and
    loads in bytes."""
    found = re.findall(r"Function properties for (\w+)\n\s*(\d+) bytes stack frame, (\d+) "
                       r"bytes spill stores, (\d+) bytes spill loads\n.*Used (\d+) registers",
                       log)
    return {name: (int(reg), int(stack), int(st), int(ld))
            for name, stack, st, ld, reg in found}


def test_resources_are_what_ptxas_reports_and_a_spill_is_seen(tmp_path):
    """Registers and stack frame as ``ptxas -v`` gives them for the same PTX; the copy
    needs few registers and no stack, the product spills (stores and loads in the
    machine code), both compiled for sm_90."""
    out = run_compiled(KNOWN_KERNELS, tmp_path, {"TRITON_DUMP_PTXAS_LOG": "1",
                                                 "TRITON_CACHE_DIR": str(tmp_path / "cache")})
    found = json.loads(out.splitlines()[-1])
    ptxas = ptxas_reports(out)
    assert set(ptxas) == set(found) == {"copy", "product"}
    for name, c in found.items():
        assert c["arch"] == 90
        assert (c["registers"], c["stack_bytes"]) == ptxas[name][:2], name
    copy, product = found["copy"], found["product"]
    assert copy["registers"] < 32 and copy["stack_bytes"] == 0
    assert copy["spill_stores"] == copy["spill_loads"] == 0
    assert product["registers"] == 255 and product["stack_bytes"] >= 3 * 255 * 4
    assert product["spill_stores"] > 0 and product["spill_loads"] > 0
    assert ptxas["product"][2] > 0 and ptxas["product"][3] > 0  # bytes stored, loaded
    assert product["num_warps"] == 1 and copy["num_warps"] == 4


def test_a_training_step_compiles_its_variants_and_launching_is_restored(tmp_path):
    """T5's step: the forward, dK/dV and dQ kernels for the encoder (bidirectional) and
    the decoder (causal), its table a summand (``Term.BIAS``), both with the padding mask,
    dQ with the table's gradient, and the row sums; a position encoding without a fused
    kernel compiles nothing. Afterwards launches go to Triton again (the driver and
    ``JITFunction`` as they were)."""
    out = run_compiled("""
        import json
        from triton.runtime import driver
        from triton.runtime.jit import JITFunction
        from fairseq_posenc.tools.benchmark.compiled import training_kernels
        launch, active = JITFunction.__getitem__, driver._active
        t5 = training_kernels("t5")
        print(json.dumps({"t5": [[c.kernel, c.variant, c.num_warps] for c in t5],
                          "sinusoidal": len(training_kernels("sinusoidal")),
                          "restored": JITFunction.__getitem__ is launch
                          and driver._active is active}))
    """, tmp_path)
    found = json.loads(out.splitlines()[-1])
    assert found["sinusoidal"] == 0 and found["restored"]
    variants = {(kernel, " ".join(w for w in variant.split() if "=" not in w))
                for kernel, variant, _ in found["t5"]}
    assert variants == {
        ("_forward_kernel", "BIAS HAS_PAD"), ("_forward_kernel", "BIAS HAS_PAD CAUSAL"),
        ("_backward_dkdv_kernel", "BIAS HAS_PAD"),
        ("_backward_dkdv_kernel", "BIAS HAS_PAD CAUSAL"),
        ("_backward_dq_kernel", "BIAS HAS_PAD TABLE_GRAD"),
        ("_backward_dq_kernel", "BIAS HAS_PAD CAUSAL TABLE_GRAD"),
        ("_delta_kernel", ""),
    }
    assert len(found["t5"]) == 7 and all(w == 4 for _, _, w in found["t5"])


def test_compiling_needs_the_kernels_compiled(monkeypatch):
    from fairseq_posenc.tools.benchmark.compiled import compiling_for

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="run without TRITON_INTERPRET=1"):
        with compiling_for(90):
            pass


def test_launch_flag_is_checked(capsys):
    from fairseq_posenc.tools.benchmark.compiled import main

    for bad, message in (("backward_dq=64,64,8", "expected KERNEL=BLOCK_M,BLOCK_N,WARPS,"),
                         ("dq=64,64,8,3", "unknown kernel 'dq': one of forward, ")):
        with pytest.raises(SystemExit):
            main(["--launch", bad])
        assert message in capsys.readouterr().err
