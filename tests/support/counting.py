"""Counters of what the code under test computes, by monkeypatching its methods."""

from __future__ import annotations

from fairseq_posenc.core.encodings import DistanceBias


def count_distance_tables(model, monkeypatch):
    """Record every per-distance table an encoding computes."""
    calls = []
    classes = {type(m) for m in model.modules() if isinstance(m, DistanceBias)}
    for cls in classes:
        def counting(self, lo, hi, _original=cls.distance_bias):
            calls.append((id(self), lo, hi))
            return _original(self, lo, hi)

        monkeypatch.setattr(cls, "distance_bias", counting)
    return calls
