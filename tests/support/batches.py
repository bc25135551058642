"""Random source batches for whole tiny models (``support.model_utils.build_model``)."""

from __future__ import annotations

import torch

from tests.support.model_utils import VOCAB


def random_source(d, bsz=3, length=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, VOCAB, (bsz, length), generator=g)
    src[:, -1] = d.eos()
    src[0, :3] = d.pad()  # left padding, as fairseq batches sources
    src[1, :1] = d.pad()
    return src, src.ne(d.pad()).sum(1)
