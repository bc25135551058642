"""What the WMT preparation's steps share beyond the text pipeline's files
(:mod:`fairseq_posenc.tools.textprep.files`): its settings (:class:`Options`) and its log."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Optional

LOG_PREFIX = "[wmt]"


@dataclasses.dataclass
class Options:
    """The settings of one preparation (the command line's, resolved: see
    :func:`fairseq_posenc.tools.wmt.cli.options_from_args`)."""

    dest: Path
    download_dir: Path
    mirror: Optional[str]
    sacrebleu_dir: Path
    bpe: str
    bpe_size: int
    vocab_threshold: int
    spm_model_type: str
    spm_sample: int
    # the dataset's cleaning where None (Cleaning: its paper's rule)
    min_len: Optional[int]
    max_len: Optional[int]
    max_ratio: Optional[float]
    paracrawl: bool
    czeng: Optional[Path]
    workers: int
    retries: int
    retry_wait: float
    timeout: float
    download_only: bool
    # check archives from the official URLs against PUBLISHED_ARCHIVES (a --mirror vouches
    # for its files with its own SHA256SUMS)
    check_published: bool = True
    czeng_release: str = "1.7"  # "1.6": without the 1.7 block list


def log(msg: str) -> None:
    print(f"{LOG_PREFIX} {msg}", file=sys.stderr, flush=True)
