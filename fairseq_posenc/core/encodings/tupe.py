"""``tupe_a``, ``tupe_r``: Transformer with Untied Positional Encoding (Ke et al. 2020, ICLR 2021).

``tupe_a`` (eqs. 7 and 10): no position at the input; in every self-attention layer

    e_ij = (q_i.k_j + (p~_i U_Q^h).(p~_j U_K^h)) / sqrt(2 d_h),   p~ = LayerNorm(p),

with ``p`` a learned absolute table ``n x d`` (``d`` the model dimension) shared by the
heads, and ``U_Q, U_K: d x d`` linear maps with bias whose outputs are split into the heads.
The word term uses the :attr:`content_scale` hook (``1/sqrt(2)`` on fairseq's
``1/sqrt(d_h)``); the positional term is the :meth:`logit_bias`. ``n`` is ``--tupe-max-len``
(default the stack's ``--max-source/target-positions``); positions count real tokens (a
left-padded source is encoded like the same source alone) and a longer sequence is an error.

``tupe_r`` (eqs. 8 and 11) adds T5's bucketed relative bias ``b_h[bucket(j - i)]``
(``--tupe-r-num-buckets`` 32, ``--tupe-r-max-distance`` 128; bidirectional buckets in the
encoder, causal ones in the decoder), held as a :class:`~.t5.T5` module. The bias is NOT
scaled by ``1/sqrt(2 d_h)``: eq. (11) adds ``b_{j-i}`` outside the scaling, and the official
code (guolinke/TUPE, ``TransformerSentenceEncoder``) adds ``rel_pos_bias`` to the already
scaled absolute term and the sum to the scaled word logits.

Sharing and caching, as in the official code (computed once in the encoder and passed to
every layer): ``p``, the LayerNorm, ``U_Q``, ``U_K``, the bucket table and ``theta`` form one
module per stack, shared by all its layers. ``LayerNorm(p) U_Q`` and ``LayerNorm(p) U_K``
are computed once per forward per stack (while decoding, for a window of ``n'`` positions
that grows geometrically) and kept in the stack's context. The absolute term is low-rank
(``LOW_RANK``): the attention adds their product ``H x n' x n'`` read at the rows' real
positions, or, in a fused kernel, attends with ``[q_i, p~_i U_Q] . [k_j, p~_j U_K]``, the
same number without a ``len x len`` tensor. TUPE-R's bucketed bias is a second term
(``DISTANCE_BIAS``), as for ``t5``. With the reset (below) the product is no longer low-rank:
the whole content-free term (absolute + relative + reset) is then one ``H x n' x n'`` pair
table (``PAIR_BIAS``), read the same way.

``--tupe-reset-first`` (eq. 9, "untie [CLS]", off by default): the first row of the
positional term (position 0 as query, diagonal included) becomes ``theta_1^h`` and the
first column (position 0 as key, other queries) ``theta_2^h``, two learned values per head
that replace the whole position-only term there, relative bias included, as eq. (9) says.
A constant row does not change a softmax, so ``theta_1`` never affects the output (its
gradient is 0): what matters is that position 0 attends free of position bias, and
``theta_2``, how much every other position attends to it. ``theta_1`` is kept for eq. (9).
It is off by default because it exists for BERT's [CLS]; translation sources and targets
have no such token (position 0 is an ordinary word, or the decoder's start symbol). When on,
it applies to both stacks, at the first real token.

Deviations from the official code (a BERT encoder): it derives ``theta_1`` from an extra
table row (``(p~_0 U_Q).(p~_0 U_K)`` scaled, token ``t`` then using row ``t + 1``) and
``theta_2`` from the first token's own diagonal term, and in TUPE-R adds to them a bucket
each (an extra one, and the bidirectional table's unused bucket ``nb/2``, which a causal
table does not have); here ``theta`` is the free ``H x 2`` parameter of eq. (9), and the
table has ``n`` rows and ``num_buckets`` buckets. ``U_Q, U_K`` are two ``d x d`` linears
(the official ``pos_proj`` is one ``d x 2d`` linear: the same parameters).
Initialisation as the official code (``init_bert_params`` applied to the whole model):
``p``, the weights of ``U_Q, U_K`` and the bucket table N(0, 0.02), biases 0, LayerNorm
(1, 0); ``theta`` (not in the official code) N(0, 0.02).
"""

from __future__ import annotations

from typing import Annotated, Optional

import torch
from torch import Tensor, nn

from ..context import FusedKernel, KernelFamily, PositionContext, Window
from ..positions import expand_distance_bias
from .base import PositionEncoding, init_scalar_table
from .kinds import LowRank, PairBias
from .options import BUCKETS_HELP, DISTANCE_HELP, MAX_LEN_HELP, Option
from .registry import register_encoding
from .t5 import T5
from .absolute_tables import absolute_pair_bias, check_max_len

# The options of both TUPE variants, declared once.
TupeMaxLen = Annotated[Optional[int], Option(MAX_LEN_HELP.format(
    "rows of the absolute position table p; longer inputs are an error"), minimum=1,
    metavar="N")]
TupeReset = Annotated[bool, Option(
    "untie position 0 (the paper's [CLS] reset, eq. 9): its positional row and column "
    "become two learned values per head (off: translation has no [CLS])")]


@register_encoding
class TupeA(LowRank, PairBias):
    name = "tupe_a"
    #: ``PairBias`` per instance with ``--tupe-reset-first``: the reset replaces a row and
    #: a column of the product, which is then no longer low-rank.
    applies_as = LowRank
    max_len_option = "tupe_max_len"
    #: The word logits are ``q.k / sqrt(2 d_h)``.
    content_scale = 2 ** -0.5

    def __init__(self, *, num_heads: int, head_dim: int, max_positions: int,
                 tupe_max_len: TupeMaxLen = None, tupe_reset_first: TupeReset = False) -> None:
        super().__init__()
        max_len, reset_first = tupe_max_len or max_positions, tupe_reset_first
        d = num_heads * head_dim
        self.num_heads, self.head_dim, self.max_len = num_heads, head_dim, max_len
        self.scaling = (2 * head_dim) ** -0.5
        self.pos = nn.Parameter(torch.empty(max_len, d))
        init_scalar_table(self.pos)
        self.pos_ln = nn.LayerNorm(d)
        self.u_q = nn.Linear(d, d)
        self.u_k = nn.Linear(d, d)
        for linear in (self.u_q, self.u_k):
            init_scalar_table(linear.weight)
            nn.init.zeros_(linear.bias)
        self.theta: Optional[nn.Parameter] = None
        if reset_first:  # [:, 0]: position 0 to all; [:, 1]: others to position 0
            self.theta = nn.Parameter(torch.empty(num_heads, 2))
            init_scalar_table(self.theta)
        # The reset replaces a row and a column of the product: no longer low-rank.
        self.applies_as = PairBias if reset_first else LowRank
        self.fused_kernel = (None if reset_first
                             else FusedKernel(KernelFamily.EXTRA_DIMENSIONS))

    @classmethod
    def shares_layers(cls, values) -> bool:
        return True

    @classmethod
    def random_positions_refusal(cls, values) -> Optional[str]:
        if values["tupe_reset_first"]:
            return ("--tupe-reset-first unties position 0, the first token's, and drawn "
                    "positions need not contain 0; leave the reset off")
        return None

    def relative_term(self, n: int) -> Optional[Tensor]:
        """``(H, n, n)`` added to the absolute term before the reset (tupe_r), or None."""
        return None

    def projections(self, n: int) -> tuple[Tensor, Tensor]:
        """``LayerNorm(p) U_Q / sqrt(2 d_h)`` and ``LayerNorm(p) U_K`` per head,
        ``(H, n, d_h)`` each, for positions ``0..n-1``."""
        p = self.pos_ln(self.pos[:n])
        pos_q = self.u_q(p).view(n, self.num_heads, self.head_dim).transpose(0, 1)
        pos_k = self.u_k(p).view(n, self.num_heads, self.head_dim).transpose(0, 1)
        return pos_q * self.scaling, pos_k

    def factors(self, length: int, ctx: PositionContext) -> tuple[Tensor, Tensor]:
        """:meth:`projections` for some ``n >= length``, computed once per forward for the
        stack (its layers share this module)."""
        def compute(lo: int, hi: int) -> Window:
            n = min(hi + 1, self.max_len)
            return Window(torch.stack(self.projections(n)), 0, n - 1, dim=-2)

        p_q, p_k = ctx.window(self, "projections", 0, length - 1, compute).table.unbind(0)
        return p_q, p_k

    def positional_term(self, n: int) -> Tensor:
        """The whole position-only term ``(H, n, n)`` for positions ``0..n-1``."""
        pos_q, pos_k = self.projections(n)
        term = torch.matmul(pos_q, pos_k.transpose(-1, -2))
        relative = self.relative_term(n)
        if relative is not None:
            term = term + relative
        if self.theta is not None:
            idx = torch.arange(n, device=term.device)
            first_row, first_col = (idx == 0)[:, None], (idx == 0)[None, :]
            theta_1, theta_2 = (t[:, None, None] for t in self.theta.unbind(-1))
            term = torch.where(first_row, theta_1,
                               torch.where(first_col, theta_2, term))
        return term

    def pair_bias(self, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
        """With ``--tupe-reset-first``: :meth:`positional_term` once per forward, read at
        the rows' real positions."""
        positions = (None if key_padding_mask is None
                     else ctx.real_positions(key_padding_mask, k_len, key_padding_mask.device))
        check_max_len(self, k_len, positions)
        def compute(lo: int, hi: int) -> Window:
            n = min(hi + 1, self.max_len)
            return Window(self.positional_term(n), 0, n - 1)

        table = ctx.window(self, "positional_term", 0, min(k_len, self.max_len) - 1,
                           compute).table
        return absolute_pair_bias(self, table, q_len, k_len, q_offset, key_padding_mask, ctx)


@register_encoding
class TupeR(TupeA):
    name = "tupe_r"

    def __init__(
        self, *, num_heads: int, head_dim: int, causal: bool, max_positions: int,
        tupe_max_len: TupeMaxLen = None, tupe_reset_first: TupeReset = False,
        tupe_r_num_buckets: Annotated[int, Option(BUCKETS_HELP.format("TUPE-R"), minimum=4,
                                                  hint="TUPE-R uses 32.", metavar="N")] = 32,
        tupe_r_max_distance: Annotated[int, Option(
            DISTANCE_HELP.format("TUPE-R"), minimum=1, hint="TUPE-R uses 128.",
            metavar="N")] = 128,
    ) -> None:
        super().__init__(num_heads=num_heads, head_dim=head_dim, max_positions=max_positions,
                         tupe_max_len=tupe_max_len, tupe_reset_first=tupe_reset_first)
        self.rel = T5(num_heads=num_heads, causal=causal, t5_num_buckets=tupe_r_num_buckets,
                      t5_max_distance=tupe_r_max_distance)

    def terms(self) -> tuple[PositionEncoding, ...]:
        """Without the reset: the low-rank term and the bucketed distance bias, a term of
        its own. With it: one pair table (absolute, relative and reset together)."""
        return (self,) if self.theta is not None else (self, self.rel)

    def relative_term(self, n: int) -> Tensor:
        # In a table over positions r = j - i is the index difference, as for real tokens.
        return expand_distance_bias(self.rel.distance_bias(-(n - 1), n - 1), -(n - 1), n, n, 0)
