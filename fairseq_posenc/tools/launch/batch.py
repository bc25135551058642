"""A run's batch, the same on any number of GPUs: the tokens per update are fixed, and the
GPUs a run is given decide how they are split (tokens per GPU and forward pass, forward
passes per update), as ``posenc-reproduce`` reaches the papers' batch.

fairseq's default world size is every GPU the process sees, so a run that is not told its
world size grows its batch with the GPUs; every run here is told.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def update_freq(batch_tokens: int, max_tokens: int, gpus: int) -> int:
    """Forward passes per update that reach ``batch_tokens`` at ``max_tokens`` per pass on
    ``gpus`` GPUs (0: one process on the CPU), rounded up."""
    return max(1, math.ceil(batch_tokens / (max_tokens * max(gpus, 1))))


@dataclass(frozen=True)
class Split:
    """``tokens_per_update`` split over ``gpus`` GPUs (0: the CPU)."""

    gpus: int
    max_tokens: int  # per process and forward pass
    update_freq: int

    @property
    def world_size(self) -> int:
        return max(self.gpus, 1)

    @property
    def tokens_per_update(self) -> int:
        return self.max_tokens * self.world_size * self.update_freq

    def flags(self) -> list[str]:
        """fairseq-train's flags for the split (after the recipe's: fairseq reads the last
        of a repeated flag)."""
        return ["--max-tokens", str(self.max_tokens), "--update-freq", str(self.update_freq),
                "--distributed-world-size", str(self.world_size)]

    def to_json(self) -> dict[str, int]:
        return {"gpus": self.gpus, "max_tokens": self.max_tokens,
                "update_freq": self.update_freq, "tokens_per_update": self.tokens_per_update}


def split(batch_tokens: int, max_tokens: int, gpus: int) -> Split:
    """``batch_tokens`` per update exactly on ``gpus`` GPUs: the update frequency of
    :func:`update_freq`, then the tokens per pass lowered to what the update needs (4096
    tokens on 2 GPUs: 2048 each). :class:`ValueError` when they do not divide evenly."""
    if batch_tokens < 1 or max_tokens < 1:
        raise ValueError("tokens per update and per pass must be at least 1")
    freq = update_freq(batch_tokens, max_tokens, gpus)
    world = max(gpus, 1)
    per_pass, rest = divmod(batch_tokens, world * freq)
    if rest:
        raise ValueError(
            f"{batch_tokens} tokens per update do not divide evenly over {world} "
            f"process(es) x {freq} pass(es): choose a --batch-tokens that is a multiple of "
            f"{world * freq}")
    return Split(gpus=gpus, max_tokens=per_pass, update_freq=freq)
