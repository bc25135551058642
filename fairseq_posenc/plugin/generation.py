"""GNMT's length penalty for ``fairseq-generate``: the ``translation_gnmt`` task.

tensor2tensor and THUMT rank finished beam hypotheses by ``log P(y | x) / lp(|y|)`` with
GNMT's penalty (Wu et al. 2016, eq. 14)::

    lp(L) = ((5 + L) / 6) ** alpha

fairseq divides by ``L ** alpha`` (``--lenpen alpha``). The two orders differ, so a table of
tensor2tensor numbers is reproduced with GNMT's: ``fairseq-generate --user-dir
fairseq_posenc --task translation_gnmt --lenpen 0.6``. The task is fairseq's ``translation``
(same data, same flags) whose generator normalizes by GNMT's penalty; ``L`` counts the
end-of-sentence token, as fairseq's does.

Where the penalty enters: fairseq's ``SequenceGenerator`` computes ``(step + 1) **
self.len_penalty`` in one place (``finalize_hypos``), so :class:`GNMTLengthPenalty` is an
object whose reflected power is GNMT's penalty; nothing of the generator is copied.
Deviation: tensor2tensor also applies the penalty when it ranks the alive hypotheses of
each step; fairseq's beam keeps ranking them by their unnormalized score.
"""

from __future__ import annotations

from fairseq.tasks import register_task

from .translation_scaling import RopeScalingConfig, RopeScalingTask


class GNMTLengthPenalty:
    """``L ** penalty`` is ``((5 + L) / 6) ** alpha``."""

    def __init__(self, alpha: float) -> None:
        self.alpha = float(alpha)

    def __rpow__(self, length: int) -> float:
        return ((5.0 + length) / 6.0) ** self.alpha

    def __repr__(self) -> str:
        return f"GNMTLengthPenalty(alpha={self.alpha})"


@register_task("translation_gnmt", dataclass=RopeScalingConfig)
class TranslationGNMTTask(RopeScalingTask):
    """fairseq's ``translation``, its beam search normalized by GNMT's length penalty with
    ``--lenpen`` as ``alpha`` (and ``--rope-scaling``: :mod:`.translation_scaling`)."""

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        generator = super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs,
            prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)
        if not hasattr(generator, "len_penalty"):
            raise ValueError("--task translation_gnmt needs beam search (fairseq's "
                             "SequenceGenerator); drop --sampling / iterative decoding flags")
        generator.len_penalty = GNMTLengthPenalty(generator.len_penalty)
        return generator
