"""Length bins for scoring by sentence length: from the test set's own lengths, by hand, or AT5's.

Bins are ``(low, high]`` pairs of lengths in whole tokens, contiguous and starting at 0; only
the last ``high`` may be ``math.inf``. A sentence's length is the number of Moses tokens of
its raw text (sacremoses with its language, no escaping: words and punctuation marks, as a
Moses-tokenized corpus counts them), of the source or of the reference; an empty sentence
counts in the first bin.

* :func:`quantile_bins` -- the default: bins from the test set's own lengths, as close to
  equal counts as its lengths allow, none with fewer than :data:`FEW` sentences. A test set
  of 1,000 short lines gets six bins of short lengths, not one bin ``(0, 20]`` of all of them.
  The rule, in this order: the most bins, at most :data:`MAX_BINS` and each holding at least
  :data:`FEW` sentences; of those, the bins whose sizes are closest to equal (the least sum of
  squared sizes, which equal counts minimize); of those, the earliest cuts. Sentences of one
  length always share a bin, so a length that holds many sentences makes a bin of its own
  and the bins around it smaller, and ties can leave fewer bins than the count allows: at
  least 3 bins of :data:`FEW` or more are certain for ``n`` sentences when no length holds
  more than ``(n - 3 FEW + 2) / 2`` of them (the leftmost cuts' worst case), so whenever no
  length holds a third of them from 260 sentences on. A length that holds all but fewer
  than :data:`FEW` on a side leaves that side in its bin; below ``2 FEW`` sentences there is
  one bin, the whole test set, below ``3 FEW`` at most two. Each upper edge is the roundest
  whole number from the bin's longest sentence to the next bin's shortest minus one (a
  multiple of 100, 50, 10 or 5 when one lies there, else the longest), so the edges read
  easily and split the sentences as the cut does; the last bin is open-ended.
* :func:`bins_from_edges` -- bins by hand (``--bins``): ``(5, 10, 30)`` -> ``(0, 5], (5, 10],
  (10, 30], (30, inf)``.
* :data:`AT5_BINS` -- AT5's Table 5 (Wu et al. 2021): ``(0, 20], (20, 40], ..., (100, 120]``,
  what ``posenc-reproduce`` scores the papers' WMT test sets in.

A bin of fewer than :data:`FEW` sentences (:func:`is_few`) is marked "few" wherever it is
shown: its BLEU rests on too few sentences to weigh as much as the others'.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from typing import Sequence

#: Length bins: ``(low, high]`` pairs, contiguous from 0; only the last ``high`` may be
#: ``math.inf``.
Bins = Sequence[tuple[int, float]]

#: AT5 Table 5's source-length bins, ``(low, high]``.
AT5_BINS: tuple[tuple[int, int], ...] = tuple((lo, lo + 20) for lo in range(0, 120, 20))

#: A bin with fewer sentences than this is marked few: the usual rule of thumb for a sample
#: whose mean is to be trusted at all.
FEW = 30

#: At most this many default bins (AT5's Table 5 has six finite bins).
MAX_BINS = 6

#: Round edges preferred, roundest first (see :func:`quantile_bins`).
_ROUND = (100, 50, 10, 5)


def is_few(sentences: int) -> bool:
    """Whether a bin of ``sentences`` sentences is marked few."""
    return sentences < FEW


def moses_lengths(sentences: Sequence[str], lang: str) -> list[int]:
    """Moses tokens per raw sentence (a source or a reference) in language ``lang``."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    return [len(tok.tokenize(s, escape=False)) for s in sentences]


def bins_from_edges(edges: Sequence[int]) -> tuple[tuple[int, float], ...]:
    """Bins from their upper edges: ``(5, 10, 30)`` -> ``(0, 5], (5, 10], (10, 30],
    (30, inf)``. The edges are ascending positive whole numbers of tokens."""
    given, edges = list(edges), []
    if not given:
        raise ValueError("no bin edges: give at least one upper edge, e.g. 5 10 15 20 30")
    for edge in given:
        try:
            whole = operator.index(edge)  # ints, numpy ints; not floats
        except TypeError:
            whole = 0
        if isinstance(edge, bool) or whole < 1:
            raise ValueError(f"bin edge {edge!r} is not a positive whole number of "
                             "tokens; give ascending positive integers, e.g. 5 10 15 20 30")
        edges.append(whole)
    for low, high in zip(edges, edges[1:]):
        if high <= low:
            raise ValueError(f"bin edges must ascend: {high} follows {low} in "
                             f"{' '.join(map(str, edges))}; give e.g. 5 10 15 20 30")
    lows = [0, *edges]
    return tuple(zip(lows, [*edges, math.inf]))


def check_bins(bins: Bins) -> None:
    """``bins`` as :data:`Bins` says, or a ``ValueError`` naming what is wrong."""
    if not bins:
        raise ValueError("no length bins; give (low, high] pairs such as AT5_BINS")
    expected_low = 0
    for i, (low, high) in enumerate(bins):
        if low != expected_low or not high > low:
            raise ValueError(f"length bins must be contiguous (low, high] pairs from 0 with "
                             f"high > low: bin {i} is ({low}, {high}] after a bin ending at "
                             f"{expected_low}; make them with bins_from_edges")
        if math.isinf(high) and i != len(bins) - 1:
            raise ValueError(f"only the last length bin can be open-ended: bin {i} is "
                             f"({low}, inf)")
        expected_low = high


def bin_label(low: int, high: float) -> str:
    return f"({low}, {'inf' if math.isinf(high) else int(high)}]".replace("inf]", "inf)")


def bin_index(length: int, bins: Bins) -> int:
    """Index of ``length``'s bin; ``len(bins)`` for a length beyond the last."""
    for i, (_low, high) in enumerate(bins):
        if length <= high:
            return i
    return len(bins)


def quantile_bins(lengths: Sequence[int]) -> tuple[tuple[int, float], ...]:
    """The default bins of a test set whose sentences have these ``lengths`` (the rule in
    the module docstring); deterministic, the same for every system scored on it."""
    if not lengths:
        raise ValueError("no sentences to bin by length: the test set is empty")
    counts = Counter(max(int(n), 1) for n in lengths)  # an empty sentence: the first bin
    values = sorted(counts)
    cuts = _balanced_cuts([counts[v] for v in values], len(lengths))
    edges = [_round_edge(values[c - 1], values[c]) for c in cuts]
    return tuple(zip([0, *edges], [*edges, math.inf]))


def _balanced_cuts(sizes: Sequence[int], total: int) -> list[int]:
    """Where the bins start (indices into ``sizes``, the sentences of each distinct length
    in ascending order): the most bins of at least FEW sentences (at most MAX_BINS), the
    least sum of squared bin sizes, the earliest cuts. Dynamic programming over suffixes:
    ``cost[k][i]`` is the least sum of squares of ``sizes[i:]`` in ``k`` such bins."""
    d, most = len(sizes), min(MAX_BINS, total // FEW)
    if most < 2:
        return []
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    nothing = math.inf
    tail = [(prefix[d] - prefix[i]) ** 2 if prefix[d] - prefix[i] >= FEW else nothing
            for i in range(d)]
    cost = [[], tail]
    for _k in range(2, most + 1):
        cost.append([min((_square(prefix, i, c) + cost[-1][c] for c in range(i + 1, d)
                          if prefix[c] - prefix[i] >= FEW), default=nothing)
                     for i in range(d)])
    k = max(k for k in range(1, most + 1) if cost[k][0] < nothing)
    cuts, start = [], 0
    for bins_left in range(k, 1, -1):
        start = next(c for c in range(start + 1, d) if prefix[c] - prefix[start] >= FEW
                     and _square(prefix, start, c) + cost[bins_left - 1][c]
                     == cost[bins_left][start])
        cuts.append(start)
    return cuts


def _square(prefix: Sequence[int], i: int, j: int) -> int:
    return (prefix[j] - prefix[i]) ** 2


def _round_edge(longest_below: int, shortest_above: int) -> int:
    """The roundest whole number from ``longest_below`` to ``shortest_above - 1``."""
    for step in _ROUND:
        edge = -(-longest_below // step) * step
        if edge < shortest_above:
            return edge
    return longest_below
