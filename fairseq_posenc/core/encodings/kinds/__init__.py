"""The kinds of position term: each a base class that declares what the term is
(:class:`KindFacts`, read by the planner) and applies it in the attention (its hooks:
``add_to_logits``, ``transform_qk``, ``keys_input``, ``extra_dimensions``,
``fused_covers``, ``fused_attention``, ``add_to_output``, ``cache_keys``, ``normalise``);
an encoding derives from one and implements its ``methods``. ``docs/architecture.md``,
"Adding a kind"."""

from .absolute import LowRank, PairBias
from .along_path import PathTransforms
from .by_distance import DistanceBias, DistanceScale
from .content import ContentBias, ContentLogits, ContentOnProbabilities
from .contracts import built_refusal, class_refusal, kinds_of
from .facts import KindFacts, PositionKind
from .operands import LogitTerms, Operands
from .input_gates import InputGates
from .sequence import InputEmbedding, Projection, Rotation
from .weights import AttentionWeights

__all__ = ["AttentionWeights", "ContentBias", "ContentLogits", "ContentOnProbabilities",
           "DistanceBias", "DistanceScale", "InputEmbedding", "InputGates", "KindFacts",
           "LogitTerms", "LowRank", "Operands", "PairBias", "PathTransforms", "PositionKind",
           "Projection", "Rotation", "built_refusal", "class_refusal", "kinds_of"]
