"""What the fused kernels take of a GPU, found by compiling them here for one that is not.

    posenc-kernels                                   # every encoding's training, sm_90, fp16
    posenc-kernels --encodings xl huang4 --arch 90 --dtype bfloat16
    posenc-kernels --encodings shaw --launch backward_dq=64,64,8,3   # another launch
    posenc-kernels --json out.json

Triton compiles for a target named by its architecture (``sm_90``: H100, H200) with the
``ptxas`` it ships, on any machine; ``cuobjdump``, also shipped, reads a binary's registers
per thread and stack frame, and its local stores and loads (``STL``, ``LDL``) count the
spills: what does not fit a thread's 255 registers, stored and loaded through the cache
inside the loop over key tiles. A kernel whose buffers exceed a multiprocessor's shared
memory does not launch. Neither needs a GPU to find out.

The kernels are those that one training step of each encoding's model launches (one layer
per stack, the base model's width and heads, every layer on its fused path), each launch
compiling for the target instead of running (:func:`compiling_for`; the outputs are then
uninitialized memory, which nothing reads): the variants training uses, not a list kept by
hand. Decoding steps launch no fused kernel. The figures are what one Triton release makes
of the kernels, not their speed (``docs/kernels/compiled-sm90.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

import torch

if TYPE_CHECKING:
    from ...core.kernels.distance.launch import Tiles

#: The constant arguments that tell the fused kernels' variants apart, as shown after the
#: term's type (``TERM``, :class:`~.distance.term_types.Term`, by name).
FLAGS = ("HAS_PAD", "CAUSAL", "DROPOUT", "IEEE", "TABLE_GRAD")
#: ... and the sizes.
SIZES = ("BD_QK", "BD_V", "BLOCK_M", "BLOCK_N", "BLOCK", "BLOCK_T")


@dataclass(frozen=True)
class Compiled:
    """One compiled kernel variant and what it takes of the target."""

    kernel: str  # the Triton function's name
    variant: str  # its term's type, flags and sizes (:data:`FLAGS`, :data:`SIZES`)
    registers: int  # per thread
    stack_bytes: int  # per thread: spilled registers live here
    spill_stores: int  # STL instructions in the machine code
    spill_loads: int  # LDL instructions
    shared_bytes: int  # per program
    num_warps: int
    num_stages: int


class _TargetOnly:
    """Triton's driver as far as compiling asks it: a target, and no device to launch on."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: Optional[int] = None) -> int:
        return 0


@contextlib.contextmanager
def compiling_for(arch: int) -> Iterator[list[Any]]:
    """While open, every ``kernel[grid](...)`` launch compiles ``kernel`` for CUDA
    architecture ``arch`` (90: sm_90) with the launch's arguments, Triton's own
    ``JITFunction.warmup``, and launches nothing; yields the list the compiled kernels
    (Triton's ``CompiledKernel``) are appended to. Needs compiled kernels, not
    interpreted ones: a process without ``TRITON_INTERPRET``."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("compiling for a GPU needs the kernels compiled, not interpreted: "
                           "run without TRITON_INTERPRET=1")
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    compiled: list[Any] = []
    used: set[Any] = set()

    def compile_instead(kernel: JITFunction, grid: Any):
        def launch(*args: Any, **kwargs: Any) -> None:
            used.add(kernel)
            compiled.append(kernel.warmup(*args, grid=grid, **kwargs))
        return launch

    previous = driver._active  # Triton keeps no public getter; restored below
    launch_as = JITFunction.__getitem__
    driver.set_active(_TargetOnly(GPUTarget("cuda", arch, 32)))
    JITFunction.__getitem__ = compile_instead
    try:
        yield compiled
    finally:
        JITFunction.__getitem__ = launch_as
        driver._active = previous
        for kernel in used:  # their caches hold the target's binaries, keyed by device 0
            kernel.device_caches.clear()


def _tool(name: str) -> str:
    import triton

    return getattr(triton.knobs.nvidia, name).path  # the binaries Triton ships


def _variant(kernel: Any) -> str:
    from ...core.kernels.distance.term_types import Term

    src = kernel.src
    names = src.fn.arg_names
    constants = {names[key[0]]: value for key, value in src.constants.items()
                 if isinstance(key, tuple) and len(key) == 1}
    term = [Term(constants["TERM"]).name] if "TERM" in constants else []
    flags = term + [name for name in FLAGS if constants.get(name) is True]
    sizes = [f"{name}={constants[name]}" for name in SIZES
             if isinstance(constants.get(name), int) and not isinstance(constants[name], bool)]
    return " ".join(flags + sizes)


def resources(kernel: Any) -> Compiled:
    """What the compiled ``kernel`` (a ``CompiledKernel`` for CUDA) takes: registers and
    stack frame as ``cuobjdump --dump-resource-usage`` reads them from its binary, local
    loads and stores counted in ``cuobjdump --dump-sass``, shared memory as Triton
    allotted it."""
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "kernel.cubin")
        with open(cubin, "wb") as f:
            f.write(kernel.asm["cubin"])
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", cubin],
                               check=True, capture_output=True, text=True).stdout
        sass = subprocess.run([_tool("cuobjdump"), "--dump-sass", cubin],
                              check=True, capture_output=True, text=True).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    if found is None:
        raise RuntimeError(f"cuobjdump gave no resource usage for {kernel.name}: {usage!r}")
    metadata = kernel.metadata
    return Compiled(
        kernel=kernel.src.fn.__name__, variant=_variant(kernel),
        registers=int(found.group(1)), stack_bytes=int(found.group(2)),
        spill_stores=len(re.findall(r"\bSTL(?:\.\w+)*\s", sass)),
        spill_loads=len(re.findall(r"\bLDL(?:\.\w+)*\s", sass)),
        shared_bytes=int(metadata.shared), num_warps=int(metadata.num_warps),
        num_stages=int(metadata.num_stages))


def training_kernels(encoding: str, arch: int = 90, dtype: torch.dtype = torch.float16,
                     length: int = 100, attention_dropout: float = 0.0) -> list[Compiled]:
    """The fused kernels one training step of ``encoding``'s model compiles for ``arch``
    (forward and backward; two left-padded sources of up to ``length`` tokens,
    right-padded targets), each variant once, in launch order."""
    from fairseq_posenc.plugin.attention import PositionalMultiheadAttention
    from fairseq_posenc.tools.benchmark.workload import (build_model, make_batch, make_optimizer,
                                                   train_step)
    from fairseq_posenc.plugin.build import toy_dictionary
    from fairseq_posenc.core.encodings.rope import Rope

    d = toy_dictionary(1000)
    model = build_model(encoding, "base", d, seed=0, device=torch.device("cpu"), layers=1,
                        dtype=dtype, attention_dropout=attention_dropout)
    for module in model.modules():
        if isinstance(module, PositionalMultiheadAttention):
            module.distance_kernel, module.low_rank_kernel = "fused", "concat"
        elif isinstance(module, Rope):
            module.kernel = "fused"
    batch = make_batch(d, 2, length, seed=0, device=torch.device("cpu"))
    with compiling_for(arch) as compiled:  # the benchmark's step, as it times it
        train_step(model, make_optimizer(model.parameters()), batch, d.pad())
    unique = {kernel.hash: kernel for kernel in compiled}
    return [resources(kernel) for kernel in unique.values()]


def markdown(rows: Sequence[tuple[str, Compiled]], heading: str) -> str:
    lines = [heading, "",
             "| encoding | kernel | variant | registers | stack B | STL / LDL | shared KB "
             "| warps / stages |", "|---|---|---|---|---|---|---|---|"]
    for encoding, c in rows:
        lines.append(f"| {encoding} | {c.kernel} | {c.variant} | {c.registers} | "
                     f"{c.stack_bytes} | {c.spill_stores} / {c.spill_loads} | "
                     f"{c.shared_bytes / 1024:.0f} | {c.num_warps} / {c.num_stages} |")
    return "\n".join(lines) + "\n"


def _launch(text: str) -> tuple[str, "Tiles"]:
    """``--launch forward=64,64,8,3``: a kernel of :data:`LAUNCHES` and its tiles."""
    name, _, numbers = text.partition("=")
    try:
        block_m, block_n, warps, stages = (int(x) for x in numbers.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected KERNEL=BLOCK_M,BLOCK_N,WARPS,STAGES, e.g. backward_dq=64,64,8,3; "
            f"got {text!r}") from None
    if name not in LAUNCHES:
        raise argparse.ArgumentTypeError(
            f"unknown kernel {name!r}: one of {', '.join(LAUNCHES)}")
    # not at the top: Triton's interpreter is chosen on import
    from ...core.kernels.distance.launch import Tiles

    return name, Tiles(block_m, block_n, warps, stages)


#: ``--launch`` names and the launch constants of :mod:`.distance.launch` they set.
LAUNCHES = {"forward": "FORWARD", "backward_dkdv": "BACKWARD_DKDV",
            "backward_dq": "BACKWARD_DQ"}


@contextlib.contextmanager
def _launches(chosen: Sequence[tuple[str, "Tiles"]]) -> Iterator[None]:
    from ...core.kernels.distance import launch

    before = {name: getattr(launch, name) for name in LAUNCHES.values()}
    try:
        for name, tiles in chosen:
            setattr(launch, LAUNCHES[name], tiles)
        yield
    finally:
        for name, tiles in before.items():
            setattr(launch, name, tiles)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from fairseq_posenc.core.encodings import ENCODINGS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n")[1])
    p.add_argument("--encodings", nargs="+", metavar="NAME", choices=sorted(ENCODINGS),
                   help="encodings (default: all; those whose training launches no fused "
                        "kernel are listed below the table)")
    p.add_argument("--arch", type=int, default=90,
                   help="CUDA compute capability as major * 10 + minor (default 90: H100)")
    p.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16",
                   help="the models' half precision (default float16)")
    p.add_argument("--length", type=int, default=100,
                   help="source and target tokens (default 100)")
    p.add_argument("--attention-dropout", type=float, default=0.0, metavar="P",
                   help="the models' attention dropout (default 0: none); above 0 the "
                        "kernels' dropout variants are compiled")
    p.add_argument("--launch", type=_launch, action="append", default=[],
                   metavar="KERNEL=BM,BN,WARPS,STAGES",
                   help=f"another launch for a kernel ({', '.join(LAUNCHES)}; repeatable)")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = p.parse_args(argv)
    if args.length < 2:
        p.error(f"--length must be at least 2 (a word and end-of-sentence), got {args.length}")
    if not 0.0 <= args.attention_dropout < 1.0:
        p.error(f"--attention-dropout must be in [0, 1), got {args.attention_dropout}")
    try:
        import triton
    except ImportError:
        p.error("needs Triton (pip install triton; CUDA builds of torch bring it)")
    rows, without = [], []
    with _launches(args.launch):
        for name in args.encodings or sorted(ENCODINGS):
            found = training_kernels(name, args.arch, getattr(torch, args.dtype), args.length,
                                     args.attention_dropout)
            rows += [(name, c) for c in found]
            if not found:
                without.append(name)
    launches = "".join(f", {name} {tiles}" for name, tiles in args.launch)
    heading = (f"sm_{args.arch}, {args.dtype}, Triton {triton.__version__}, one training "
               f"step (base width, {args.length} tokens, attention dropout "
               f"{args.attention_dropout}{launches})")
    sys.stdout.write(markdown(rows, heading))
    if without:
        sys.stdout.write(f"\nNo fused kernel in training: {', '.join(without)}.\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arch": args.arch, "dtype": args.dtype, "triton": triton.__version__,
                       "torch": torch.__version__, "length": args.length,
                       "attention_dropout": args.attention_dropout,
                       "launches": {name: str(tiles) for name, tiles in args.launch},
                       "kernels": [{"encoding": name, **asdict(c)} for name, c in rows],
                       "without": without}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
