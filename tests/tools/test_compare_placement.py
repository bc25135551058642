"""Where each run trained, and whether the report's time-per-word column compares them
(``compare/placement.py``): the placement the local launcher gives each run, and the
column's verdict on placements written out by hand."""

from __future__ import annotations

import json

import pytest

from fairseq_posenc.tools.compare import placement
from fairseq_posenc.tools.launch.local import PLACEMENT, Slots


def slot(parallel, gpus_per_run, gpus, ncores=16):
    return [json.loads(env[PLACEMENT]) for env in
            Slots.plan(parallel, gpus_per_run, gpus, ncores).envs]


def test_each_slot_says_how_many_runs_train_at_once_and_share_its_gpu():
    assert slot(2, 0, ()) == [{"at_once": 2, "per_gpu": 0}] * 2  # CPU: cores divided
    assert slot(None, 1, ["0", "1"]) == [{"at_once": 2, "per_gpu": 1}] * 2  # a GPU each
    assert slot(6, 1, ["0"]) == [{"at_once": 6, "per_gpu": 6}] * 6  # six on one GPU
    # five runs on two GPUs: GPU 0 takes runs 1, 3, 5 and GPU 1 runs 2, 4
    assert [s["per_gpu"] for s in slot(5, 1, ["0", "1"])] == [3, 2, 3, 2, 3]


def where(at_once=1, per_gpu=0, gpus=0, threads=2, host="vm", job=None):
    return {"at_once": at_once, "per_gpu": per_gpu, "gpus": gpus, "threads": threads,
            "host": host, "slurm_job": job}


@pytest.mark.parametrize("placements, comparable, says", [
    ([where(), where()], True, "runs trained one at a time, 2 threads"),
    ([where(2, threads=1)] * 2, True, "runs trained 2 at once, 1 thread each"),
    ([where(1, 1, 1)] * 3, True, "runs trained one at a time, on a GPU"),
    ([where(2, 1, 1)] * 2, True, "runs trained 2 at once, 1 per GPU"),  # a GPU each
    ([where(6, 6, 1)] * 6, False, "left out: runs shared a GPU (6 at once, 6 per GPU)"),
    ([where(), where(2, threads=1)], False, "left out: the runs were placed differently"),
    ([where(), None], False, "left out: some runs were trained before"),
    ([where(1, 1, 1, host="n1", job="7"), where(1, 1, 1, host="n2", job="8")], True,
     "runs as SLURM jobs on n1, n2: nodes may differ in speed"),
])
def test_the_speed_column_says_how_runs_were_placed_or_why_it_is_left_out(
        placements, comparable, says):
    verdict, line = placement.speeds(placements)
    assert verdict is comparable and line.startswith(says), line
