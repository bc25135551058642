"""Memory of a call: the peak of live bytes it allocates, and its largest activation.

On CUDA the peak is ``torch.cuda.max_memory_allocated``; everywhere a
``TorchDispatchMode`` follows every tensor storage an operator creates until it is freed,
which also finds the largest activation. Relative to ``B * H * len * len * d_h``
(:func:`quadratic_threshold`), ``>= 1`` means a ``len x len x d_h`` tensor per head and
sentence, which only ``huang3`` should build. Fused kernels' internal buffers (e.g. inside
``scaled_dot_product_attention``) are not visible to the dispatch tracker.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from typing import Any, Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .records import Memory
from .settings import Config
from .timing import sync


class LiveTensorTracker(TorchDispatchMode):
    """Peak of live bytes of the tensor storages created while active, and the largest one.

    Every operator output whose storage is new (not an input's storage: views and in-place
    results alias their inputs) is counted until its storage is freed (a weak reference to
    the storage, whose callback runs when it is freed). Tensors that existed before
    (parameters, inputs, caches) are never counted. ``ignore_shapes``: shapes left out of
    the largest-tensor search (parameter shapes: gradients and optimizer states), though
    still counted in the peak.
    """

    def __init__(self, ignore_shapes: Iterable[tuple[int, ...]] = ()) -> None:
        super().__init__()
        self.ignore_shapes = set(ignore_shapes)
        self.live = 0
        self.peak = 0
        self.largest_numel = 0
        self.largest_shape: tuple[int, ...] = ()
        self.largest_op = ""
        self._refs: dict[int, weakref.ref] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors(args)}
        if kwargs:
            inputs.update(t.untyped_storage().data_ptr() for t in _tensors(kwargs.values()))
        for t in _tensors((out,)):
            self._track(t, inputs, func)
        return out

    def _track(self, t: torch.Tensor, inputs: set[int], func) -> None:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in inputs or ptr in self._refs:
            return
        nbytes = storage.nbytes()
        if nbytes == 0:
            return
        # the callback runs when the storage is freed
        self._refs[ptr] = weakref.ref(storage, lambda _, ptr=ptr, n=nbytes: self._free(ptr, n))
        self.live += nbytes
        if self.live > self.peak:
            self.peak = self.live
        numel = t.numel()
        if numel > self.largest_numel and tuple(t.shape) not in self.ignore_shapes:
            self.largest_numel = numel
            self.largest_shape = tuple(t.shape)
            self.largest_op = str(getattr(func, "__name__", func))

    def _free(self, ptr: int, nbytes: int) -> None:
        self._refs.pop(ptr, None)
        self.live -= nbytes


def _tensors(values: Iterable[Any]) -> Iterable[torch.Tensor]:
    """The tensors among ``values`` and in their lists and tuples (operator arguments
    and results nest one level at most)."""
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            for w in v:
                if isinstance(w, torch.Tensor):
                    yield w


def measure_memory(call: Callable[[], Any], device: torch.device,
                   ignore_shapes: Iterable[tuple[int, ...]], track: bool = True) -> Memory:
    """Peak bytes allocated during ``call()`` and its largest activation tensor.

    ``track=False`` (CUDA only): the peak alone, without the dispatch tracker. Beam search
    runs tens of thousands of small operators, and the tracker's Python per operator
    would dominate the warm-up of a long translation on a GPU; the largest-tensor check
    is then left to the CPU benchmark (``largest_numel`` 0)."""
    if not track and device.type != "cuda":
        raise ValueError("without the tracker only CUDA measures a peak")
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    tracker = LiveTensorTracker(ignore_shapes)
    start = time.perf_counter()
    with tracker if track else contextlib.nullcontext():
        result = call()
        sync(device)
    seconds = time.perf_counter() - start
    del result
    peak = tracker.peak
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - before
    return {"peak_bytes": int(peak), "tracked_peak_bytes": int(tracker.peak),
            "largest_numel": int(tracker.largest_numel),
            "largest_shape": list(tracker.largest_shape), "largest_op": tracker.largest_op,
            "tracked_call_seconds": seconds}


def quadratic_threshold(cfg: Config, sentences: int) -> int:
    """Elements of a ``len x len x d_h`` tensor per head for ``sentences`` sentences."""
    spec = cfg.spec
    return sentences * spec["heads"] * cfg.length * cfg.length * (spec["dim"] // spec["heads"])
