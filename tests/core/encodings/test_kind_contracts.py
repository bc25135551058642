"""The kinds' contracts as checks: what registration refuses for a class, what attaching
refuses for a built term, and which kind each built-in term applies as (the planner reads
it), TUPE's and Shaw's chosen by their options."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from fairseq_posenc.core.attention_plan import AttachedPositions
from fairseq_posenc.core.context import FusedKernel, KernelFamily, PositionScope
from fairseq_posenc.core.encodings import ENCODINGS, PositionKind
from fairseq_posenc.core.encodings.kinds import (
    ContentBias,
    ContentOnProbabilities,
    DistanceBias,
    LowRank,
    PairBias,
)
from fairseq_posenc.core.encodings.registry import register_encoding

CORE = Path(__file__).resolve().parents[3] / "fairseq_posenc" / "core"


def _refusal(cls) -> str:
    with pytest.raises(TypeError) as raised:
        register_encoding(cls)
    assert cls.name not in ENCODINGS
    return str(raised.value)


def test_two_kinds_without_a_declared_one_are_refused():
    class Both(PairBias, DistanceBias):
        name = "test_contract_both"

        def pair_bias(self, q_len, k_len, q_offset, key_padding_mask, ctx):
            return torch.zeros(1, q_len, k_len)

        def distance_bias(self, r_lo, r_hi):
            return torch.zeros(1, r_hi - r_lo + 1)

    message = _refusal(Both)
    assert "Both derives from PairBias and DistanceBias" in message
    assert "applies_as = PairBias" in message


def test_a_declared_family_needs_the_methods_its_kernel_calls():
    class Rows(ContentBias):
        name = "test_contract_rows"
        fused_families = frozenset({KernelFamily.ROWS})

        def logit_bias(self, q, k, q_offset, ctx):
            return q.new_zeros(1)

    message = _refusal(Rows)
    assert "declares the fused family ROWS but does not implement rows_cover, " \
           "distance_rows" in message


def test_a_family_the_kind_cannot_take_is_refused():
    class Clipped(PairBias):
        name = "test_contract_clipped"
        fused_families = frozenset({KernelFamily.CLIPPED})

        def pair_bias(self, q_len, k_len, q_offset, key_padding_mask, ctx):
            return torch.zeros(1, q_len, k_len)

    message = _refusal(Clipped)
    assert "fused family CLIPPED in fused_families, which none of its kinds (PairBias)" \
           in message and "choose among DISTANCE" in message


def test_a_term_on_the_probabilities_needs_its_value_term():
    class KeysOnly(ContentOnProbabilities):
        name = "test_contract_keys_only"

        def logit_bias(self, q, k, q_offset, ctx):
            return q.new_zeros(1)

    assert "does not implement value_term: a ContentOnProbabilities implements logit_bias " \
           "and value_term" in _refusal(KeysOnly)


class _Table(DistanceBias):
    name = "test_contract_table"

    def distance_bias(self, r_lo, r_hi):
        return torch.zeros(1, r_hi - r_lo + 1)


def _attach_refusal(term) -> str:
    with pytest.raises(TypeError) as raised:
        AttachedPositions.of(term, PositionScope())
    return str(raised.value)


def test_attaching_refuses_an_undeclared_fused_kernel_or_kind():
    term = _Table()
    term.fused_kernel = FusedKernel(KernelFamily.CAUSAL_EXTRA_DIMENSIONS)
    assert ("runs the fused family CAUSAL_EXTRA_DIMENSIONS (its fused_kernel) but its class "
            "declares DISTANCE in fused_families") in _attach_refusal(term)
    term = _Table()
    term.applies_as = LowRank
    assert "sets applies_as = LowRank, which is none of its kinds (DistanceBias)" \
        in _attach_refusal(term)


def _built(name: str, **options):
    cls = ENCODINGS[name]
    values = {o.name: o.default for o in cls.options} | options
    return cls.build(values, num_heads=4, head_dim=8, causal=True, max_positions=64,
                     embed_dim=32, layer=0)


@pytest.mark.parametrize("name, options, kind", [
    ("alibi", {}, PositionKind.DISTANCE_BIAS),
    ("huang1", {}, PositionKind.DISTANCE_SCALE),
    ("huang2", {}, PositionKind.DISTANCE_SCALE),
    ("fire", {}, PositionKind.PAIR_BIAS),
    ("diet_abs", {}, PositionKind.LOW_RANK),
    ("tupe_a", {}, PositionKind.LOW_RANK),
    ("tupe_a", {"tupe_reset_first": True}, PositionKind.PAIR_BIAS),
    ("shaw", {}, PositionKind.PROBABILITIES),
    ("shaw", {"shaw_no_value": True}, PositionKind.CONTENT_BIAS),
    ("xl", {}, PositionKind.CONTENT_BIAS),
    ("huang3", {}, PositionKind.CONTENT_LOGITS),
    ("rope", {}, PositionKind.ROTATION),
    ("fox", {}, PositionKind.INPUT_GATES),
])
def test_each_term_applies_as_its_declared_kind(name, options, kind):
    term = _built(name, **options)
    assert term.kind is kind
    AttachedPositions.of(term, PositionScope())  # its contract holds when built


def test_nothing_in_core_outside_the_encodings_asks_a_terms_kind():
    """The attention and the planner call the kinds' hooks and read their facts; no
    comparison of a kind's name."""
    for path in CORE.rglob("*.py"):
        if "encodings" in path.relative_to(CORE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            named = (node.id if isinstance(node, ast.Name) else
                     node.name if isinstance(node, ast.alias) else None)
            assert named != "PositionKind", f"{path}:{node.lineno} names PositionKind"
