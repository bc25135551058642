"""PaTH on a sentence (``posenc-inspect --sentence``): each decoder layer's logits with the
transforms, as the model computes them, beside the same queries and keys without them.

PaTH reads its transforms from the tokens, so only a sentence shows what they do; the
sentence is read as the decoder's input (``</s>`` then its tokens, in the target
dictionary: a source-language word the target dictionary lacks is ``<unk>``), with the
source side the same sentence through the encoder.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ...core.encodings.kinds import PositionKind
from ...core.encodings.path_products import path_logits
from . import captions
from .load import LoadedModel
from .records import HeatmapPanel, Picture, floats, layer_label


def _path_layers(decoder) -> list[tuple[int, object, object]]:
    """``(index, self_attn, PaTH term)`` of each decoder layer with a PaTH term."""
    found = []
    for index, layer in enumerate(decoder.layers):
        attn = layer.self_attn
        terms = attn.position_terms() if hasattr(attn, "position_terms") else ()
        term = next((t for t in terms if t.kind is PositionKind.PATH), None)
        if term is not None:
            found.append((index, attn, term))
    return found


def _logits(attn, term, x: Tensor) -> tuple[Tensor, Tensor]:
    """``(H, T, T)`` with and without the transforms, keys after the query 0."""
    heads, head_dim, length = attn.num_heads, attn.head_dim, x.size(0)

    def split(t: Tensor) -> Tensor:
        return t.view(length, 1, heads, head_dim).permute(1, 2, 0, 3)

    q, k = split(attn.q_proj(x) * attn.scaling), split(attn.k_proj(x))
    read = term.applies_as.read_input(term, x, None, None, heads)
    later = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
    with_path = path_logits(q, k, read.w.to(q.dtype), read.beta.to(q.dtype))
    plain = torch.matmul(q, k.transpose(-1, -2))
    return with_path[0].masked_fill(later, 0.0), plain[0].masked_fill(later, 0.0)


@torch.no_grad()
def path_picture(loaded: LoadedModel, tokens: list[str], ids: Tensor) -> Optional[Picture]:
    """The picture, or None when the decoder has no PaTH term."""
    model = loaded.model
    found = _path_layers(model.decoder)
    if not found:
        return None
    target = model.decoder.dictionary
    prev = torch.tensor([[target.eos()] + [target.index(t) for t in tokens]])
    inputs: dict[int, Tensor] = {}
    hooks = [attn.register_forward_pre_hook(
        lambda module, args, kwargs, i=i: inputs.__setitem__(
            i, kwargs["query"] if "query" in kwargs else args[0]), with_kwargs=True)
        for i, attn, _ in found]
    try:
        model.decoder(prev, encoder_out=model.encoder(ids, torch.tensor([ids.size(1)])))
    finally:
        for hook in hooks:
            hook.remove()
    panels = []
    for index, attn, term in found:
        with_path, plain = _logits(attn, term, inputs[index])
        where = layer_label((index,), len(model.decoder.layers))
        for head in range(attn.num_heads):
            panels += [HeatmapPanel(f"{where}, head {head + 1}: PaTH", (index,), head,
                                    floats(with_path[head])),
                       HeatmapPanel(f"{where}, head {head + 1}: q.k", (index,), head,
                                    floats(plain[head]))]
    labels = ["</s>", *tokens]
    return Picture("decoder-path-logits", "decoder", "path",
                   captions.title("path", "logits", "decoder"),
                   captions.caption("path", "logits", True), "heatmaps", panels,
                   xlabel="key", ylabel="query", row_labels=labels, col_labels=labels)
