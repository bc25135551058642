"""A resumed training's batches are the uninterrupted run's (``plugin/resume.py``).

fairseq builds a training iterator's batches under the numpy seed ``--seed + epoch`` of the
epoch the iterator is first made in. The reference is fairseq's own method, unwrapped: made
in epoch 1 (an uninterrupted run) and in epoch 3 (a run resumed from a checkpoint of epoch
3), its batches differ on a corpus of sentences of equal lengths. With the plugin
registered, an iterator made in epoch 3 has epoch 1's batches, and starts at epoch 3.
"""

from __future__ import annotations

import torch
from fairseq.data import Dictionary, LanguagePairDataset
from fairseq.tasks.fairseq_task import FairseqTask
from fairseq.tasks.translation import TranslationConfig, TranslationTask

import fairseq_posenc

SEED = 7


def corpus():
    """60 pairs of 4 lengths: many of equal length, whose order the seed decides."""
    d = Dictionary()
    for i in range(20):
        d.add_symbol(f"w{i}")
    g = torch.Generator().manual_seed(0)
    sentences = [torch.cat([torch.randint(d.nspecial, len(d), (n,), generator=g),
                            torch.tensor([d.eos()])])
                 for n in (3, 4, 5, 6) for _ in range(15)]
    sizes = [len(s) for s in sentences]
    return d, LanguagePairDataset(sentences, sizes, d, sentences, sizes, d, shuffle=True)


def batches(iterator):
    return [list(b) for b in iterator.frozen_batches]


def iterator(method, epoch):
    d, dataset = corpus()
    task = TranslationTask(TranslationConfig(), d, d)  # a new task: no cached iterator
    return method(task, dataset=dataset, max_tokens=40, seed=SEED, epoch=epoch)


def test_a_resumed_iterator_has_the_uninterrupted_runs_batches():
    fairseq_posenc.register()
    fairseq_own = FairseqTask.get_batch_iterator.__wrapped__
    uninterrupted = iterator(fairseq_own, 1)
    assert batches(iterator(fairseq_own, 3)) != batches(uninterrupted)  # what is fixed

    resumed = iterator(FairseqTask.get_batch_iterator, 3)
    assert batches(resumed) == batches(uninterrupted)
    assert resumed.epoch == 3 and resumed.next_epoch_idx == 3
    # and epoch 3 shuffles those batches as the uninterrupted run's epoch 3 does
    for _ in range(2):
        list(uninterrupted.next_epoch_itr(shuffle=True))  # epochs 1 and 2, to their end
    third = [[int(i) for i in b["id"]] for b in uninterrupted.next_epoch_itr(shuffle=True)]
    assert uninterrupted.epoch == 3
    assert [[int(i) for i in b["id"]] for b in resumed.next_epoch_itr(shuffle=True)] == third
