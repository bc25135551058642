"""Timing and its statistics: a timed call, stock-bracketed interleaving, ratio spreads.

Each time is divided by the mean of the two stock calls around it, so that the machine's
drifts in speed cancel (docs/benchmark-methodology.md, "Timing"). Python's garbage
collector is kept out of the timed calls.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from typing import Any, Callable, Sequence

import torch

from .records import RatioCell, Ratios, Spread, Times
from .settings import STOCK


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(call: Callable[[], Any], device: torch.device) -> float:
    """Seconds of ``call()``, the device's queued work included."""
    sync(device)
    start = time.perf_counter()
    call()
    sync(device)
    return time.perf_counter() - start


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def median_seconds(calls: Sequence[Sequence[float]]) -> float:
    """Median of every timed call, over repetitions (a repetition may hold several)."""
    return median([t for rep in calls for t in rep])


def ratio_spread(per_rep: Sequence[float]) -> Spread:
    """A ratio over repetitions: median, min-max, interquartile range (linear
    interpolation) and the raw per-repetition ratios."""
    q1, _, q3 = (statistics.quantiles(per_rep, n=4, method="inclusive") if len(per_rep) > 1
                 else [per_rep[0]] * 3)
    return {"ratio": median(per_rep), "min": min(per_rep), "max": max(per_rep), "q1": q1,
            "q3": q3, "per_rep_ratios": list(per_rep)}


def ratio_cell(per_rep: Sequence[float], calls: Sequence[Sequence[float]]) -> RatioCell:
    """:func:`ratio_spread`, and the median time of the calls."""
    return {**ratio_spread(per_rep), "seconds": median_seconds(calls)}


def interleave(
    timed_names: Sequence[str], kinds: Sequence[str], call: Callable[[str, str], float],
    reps: int, stock_every: int, seed: int, progress: Callable[[int, float], None],
) -> tuple[Times, Ratios]:
    """Time ``call(name, kind)`` for stock and every timed name, ``reps`` times.

    Each kind of call is timed for all names in a row, stock before the first and again
    after every ``stock_every`` of them: each time is divided by the mean of the two stock
    calls that bracket it, so that the machine's drifts in speed cancel. The order is
    shuffled for every repetition (no name always follows the same one). Returns the raw
    times (stock: every call of a repetition) and the ratios, per name and kind."""
    times: Times = {name: {kind: [] for kind in kinds} for name in [STOCK, *timed_names]}
    ratios: Ratios = {name: {kind: [] for kind in kinds} for name in timed_names}
    gc.collect()
    gc.freeze()  # the models' objects: later collections skip them
    try:
        for rep in range(reps):
            t0 = time.perf_counter()
            order = list(timed_names)
            random.Random(f"{seed}/{rep}").shuffle(order)
            for kind in kinds:
                gc.collect()
                gc.disable()  # no collection pauses inside timed calls
                try:
                    before = call(STOCK, kind)
                    stock_calls = [before]
                    for i in range(0, len(order), stock_every):
                        block = [(name, call(name, kind)) for name in order[i: i + stock_every]]
                        after = call(STOCK, kind)
                        stock_calls.append(after)
                        for name, seconds in block:
                            times[name][kind].append([seconds])
                            ratios[name][kind].append(seconds / ((before + after) / 2))
                        before = after
                    times[STOCK][kind].append(stock_calls)
                finally:
                    gc.enable()
            progress(rep, time.perf_counter() - t0)
    finally:
        gc.unfreeze()
    return times, ratios


def warm_up_and_interleave(
    timed_names: Sequence[str], kinds: Sequence[str], call: Callable[[str, str], float],
    reps: int, stock_every: int, seed: int, log: Callable[[str], None], label: str,
) -> tuple[Times, Ratios]:
    """One untimed call of every name and kind, then :func:`interleave`, logging the
    repetitions at half-way and at the end (the parts' calls are many and short)."""
    for name in [STOCK, *timed_names]:
        for kind in kinds:
            call(name, kind)
    return interleave(
        timed_names, kinds, call, reps, stock_every, seed,
        lambda rep, seconds: rep + 1 in (reps // 2, reps) and log(
            f"[{label}] repetition {rep + 1}/{reps} {seconds:.1f}s"))
