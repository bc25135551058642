"""A resumed training that equals the uninterrupted one, bit for bit.

fairseq 0.12 makes a training run's batches once, when its epoch iterator is first built,
ordering the sentences under the numpy seed ``--seed + epoch`` of that epoch
(``FairseqTask.get_batch_iterator``): the length sort is stable, so the seed decides the
order of sentences of equal length, within and across batches. An uninterrupted run builds
them in epoch 1 and reuses them for every epoch (only the batches' order is shuffled per
epoch, under ``--seed + epoch``); a run resumed from a checkpoint of epoch ``E`` builds them
in epoch ``E``. Its batches then differ, and so do its float sums: a tiny run resumed at the
end of epoch 2 first differs from the uninterrupted run at the next update, and ends with
weights 0.002 apart (``docs/fairseq-notes.md``, "Resuming a training").

:func:`pin_batch_order` has the batches always made as in epoch 1, and the iterator then
starts at the epoch asked for, which the checkpoint's iterator state sets anyway. An
uninterrupted run is unchanged; a resumed one (a rerun, a raised ``--max-update``, a SLURM
requeue) continues with the uninterrupted run's batches. fairseq's own
``--update-epoch-batch-itr True`` also makes resumption exact, by rebuilding the batches
every epoch, which changes every run's training from epoch 2 on.
"""

from __future__ import annotations

import functools
import inspect

_pinned = False


def pin_batch_order() -> None:
    """Wrap ``FairseqTask.get_batch_iterator`` (once): a new iterator's batches are made
    under the seed of epoch 1, then it starts at the epoch asked for. A cached iterator,
    per-epoch rebuilt batches (``--rebuild-batches``, which calls back with each epoch) and
    sharded data (a new dataset each epoch, ``disable_iterator_cache``) are left to
    fairseq."""
    global _pinned
    if _pinned:
        return
    from fairseq.tasks.fairseq_task import FairseqTask

    original = FairseqTask.get_batch_iterator
    signature = inspect.signature(original)

    @functools.wraps(original)
    def get_batch_iterator(self, *args, **kwargs):
        call = signature.bind(self, *args, **kwargs)
        call.apply_defaults()
        epoch, dataset = call.arguments["epoch"], call.arguments["dataset"]
        cached = dataset in getattr(self, "dataset_to_epoch_iter", {})
        if (epoch == 1 or cached or call.arguments["disable_iterator_cache"]
                or getattr(self.cfg, "rebuild_batches", False)):
            return original(*call.args, **call.kwargs)
        call.arguments["epoch"] = 1
        iterator = original(*call.args, **call.kwargs)
        dataset.set_epoch(epoch)
        iterator.epoch = max(epoch, 1)
        return iterator

    FairseqTask.get_batch_iterator = get_batch_iterator
    _pinned = True
