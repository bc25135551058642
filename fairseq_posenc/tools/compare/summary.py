"""``report.json``: every run's results, and per test split and encoding their summary.

Read from what the runs left on disk (:mod:`.execute`), so a report can be rebuilt at any
time from whatever has finished. Per split and encoding:

* BLEU and chrF as mean and sample standard deviation over the seeds that have finished
  (``n``);
* the paired-bootstrap p-values of BLEU and chrF against the baseline, seed ``k`` against
  seed ``k``, the largest over the seeds (sacreBLEU's own test,
  :mod:`fairseq_posenc.tools.evaluation.significance`); significant only where every seed pair is;
* BLEU and chrF by source length and by reference length (:mod:`.length_bins`: the split's
  own quantile bins by default, ``--bins`` by hand), the mean over seeds per bin, and over
  the sources longer than every training source in the model's (subword) tokens: the
  positions and distances no training sentence showed the model;
* the parameters the encoding adds over the baseline (``posenc-params``' count of the
  trained architecture, every run's flags included) and its training time per word over
  the baseline's (words per second from fairseq's log, median per run, mean over seeds;
  runs on the same machine, one after the other, so the ratio carries that machine's noise);
* whether a run of the encoding or of the baseline was still improving when its training
  stopped (:mod:`.convergence`; each run's verdict and its budgets are in its record).
* with ``--train-max-len``, BLEU and chrF in bins of source length relative to it
  (:mod:`.extrapolation_study`).

A row is an encoding, a pair or a labelled row (:mod:`.encoding_rows`): ``rows`` records each one's
encoder, decoder and own flags. Under ``--init-from``, ``init_from`` records the checkpoint
every row was fine-tuned from (:func:`.init_from.record`), and ``architectures`` each row's
model flags beside ``transformer_posenc``. An inference-time variant (:mod:`.variants`) is a row of
its own, after the encodings'.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ..evaluation import ALPHA, N_RESAMPLES, Bins, bleu_bootstrap, chrf_bootstrap
from ..experiment.trainlog import history
from ..textprep.files import read_lines, write_text_atomic
from . import budget, convergence, extrapolation_study, init_from, length_bins, placement
from .data import Corpus, source_lengths
from .execute import METRIC
from .plan import Run, architecture, runs as plan_runs
from .encoding_rows import of as rows_of
from ..experiment.translate import BEAM, LENPEN
from .settings import Settings

if TYPE_CHECKING:
    from .variants import Variant


def _json(path: Path) -> Optional[dict]:
    return json.loads(path.read_text()) if path.exists() else None


def _mean_sd(values: Sequence[float]) -> tuple[Optional[float], Optional[float]]:
    if not values:
        return None, None
    sd = statistics.stdev(values) if len(values) > 1 else None
    return round(statistics.mean(values), 2), None if sd is None else round(sd, 2)


#: Where a run stopped, from its ``trained.json`` (:func:`.stopping.outcome`).
STOP = ("stopped", "stopped_at", "best_update", "best_loss")


def run_records(out: Path, settings: Settings, runs: Sequence[Run]) -> list[dict[str, Any]]:
    records = []
    for run in runs:
        trained = _json(run.trained(out))
        tests = {}
        for split in settings.tests:
            result = _json(run.result(out, split))
            if result:
                tests[split] = {k: result[k] for k in ("bleu", "chrf", "sentences",
                                                       "untranslated", "hypotheses")}
        records.append({
            "encoding": run.encoding, "seed": run.seed,
            "checkpoint": trained["checkpoint"] if trained else None,
            "tests": tests,
            "words_per_second": trained["words_per_second"] if trained else None,
            "finished": bool(trained) and len(tests) == len(settings.tests),
            "validation": [list(v) for v in history(run.train_logs(out))],
            **{k: (trained or {}).get(k) for k in STOP},
            "placement": (trained or {}).get("placement"),
            # a run that converged keeps the cap it was trained under
            **budget.history(run.dir(out), (trained or {}).get(
                "budgets", [settings.max_update])[-1], bool(trained)),
        })
    convergence.annotate(records, settings.until_converged)
    return records


def _hypotheses(result: dict) -> list[str]:
    return read_lines(Path(result["hypotheses"]))


def significance(results: dict[int, dict], baseline: dict[int, dict], refs: list[str],
                 lang: str) -> dict[str, Any]:
    """Seed against seed; the largest p, significant where every pair is."""
    seeds = sorted(set(results) & set(baseline))
    if not seeds:
        return {"p_value": None, "chrf_p_value": None, "significant": None,
                "chrf_significant": None, "pairs": 0}
    bleu_tests, chrf_tests = [], []
    for seed in seeds:
        base, mine = _hypotheses(baseline[seed]), _hypotheses(results[seed])
        bleu_tests.append(bleu_bootstrap(base, mine, refs, METRIC, lang))
        chrf_tests.append(chrf_bootstrap(base, mine, refs, METRIC))
    return {"p_value": max(t.p_value for t in bleu_tests),
            "chrf_p_value": max(t.p_value for t in chrf_tests),
            "significant": all(t.significant for t in bleu_tests),
            "chrf_significant": all(t.significant for t in chrf_tests), "pairs": len(seeds)}


def build(out: Path, settings: Settings, corpus: Corpus, encodings: Sequence[str],
          seeds: int, baseline: str, bins: Optional[Bins], params: dict[str, int], *,
          limit: Optional[extrapolation_study.TrainLimit] = None,
          variants: Sequence["Variant"] = ()) -> dict[str, Any]:
    """The whole ``report.json`` (see the module docstring); ``limit``: ``--train-max-len``'s
    (:mod:`.extrapolation_study`), ``variants``: rows of their own after the encodings'; ``bins``:
    ``--bins``'s, None for each split's own (:mod:`.length_bins`)."""
    runs = plan_runs(encodings, seeds)
    records = run_records(out, settings, runs)
    train_max = limit.longest_source if limit else max(source_lengths(corpus, "train"))
    comparable, placed = placement.speeds([r["placement"] for r in records if r["checkpoint"]])
    speed = {}
    for encoding in encodings:
        values = [r["words_per_second"] for r in records
                  if r["encoding"] == encoding and r["words_per_second"]]
        speed[encoding] = statistics.mean(values) if values and comparable else None
    summary, scored = [], {}
    rows = [(e, e, None) for e in encodings] + [(v.name, v.encoding, v) for v in variants]
    split_bins = {t.name: length_bins.of_split(t, corpus, bins) for t in corpus.tests}
    for test in corpus.tests:
        lengths = source_lengths(corpus, test.subset)
        beyond = [i for i, n in enumerate(lengths) if n > train_max]
        refs = read_lines(test.reference)
        done = {e: {r.seed: r.read_result(out, test.name) for r in runs
                    if r.encoding == e and r.result(out, test.name).exists()}
                for e in encodings}
        for v in variants:
            found = {r.seed: v.result(r, out, test.name) for r in runs
                     if r.encoding == v.encoding}
            done[v.name] = {seed: result for seed, result in found.items() if result}
        for name, encoding, variant in rows:
            results = scored[(test.name, name)] = done[name]
            bleu = _mean_sd([r["bleu"] for r in results.values()])
            chrf = _mean_sd([r["chrf"] for r in results.values()])
            versus = ({"p_value": None, "chrf_p_value": None, "significant": None,
                       "chrf_significant": None, "pairs": 0} if name == baseline else
                      significance(results, done[baseline], refs, corpus.target_lang))
            summary.append({
                "split": test.name, "encoding": name, "n": len(results),
                "bleu_mean": bleu[0], "bleu_sd": bleu[1], "chrf_mean": chrf[0],
                "chrf_sd": chrf[1], **versus,
                "params_added": params[encoding] - params[baseline],
                "speed_ratio": (round(speed[baseline] / speed[encoding], 3)
                                if speed.get(encoding) and speed.get(baseline) else None),
                "words_per_second": speed[encoding],
                "buckets": length_bins.rows(results, test, corpus,
                                            split_bins[test.name].source, beyond),
                "target_buckets": length_bins.rows(results, test, corpus,
                                                   split_bins[test.name].target),
                "beyond_training": len(beyond), "sentences": test.sentences,
                **convergence.row_flag(records, [encoding, baseline]),
                **({"variant": variant.to_json()} if variant else {})})
    any_result = next((_json(r.result(out, t.name)) for t in corpus.tests for r in runs
                       if r.result(out, t.name).exists()), None)
    report = {
        "settings": settings.to_json(), "encodings": list(encodings), "seeds": seeds,
        "signatures": ({k: any_result[f"{k}_signature"] for k in ("bleu", "chrf")}
                       if any_result else None),
        "baseline": baseline, "metric": f"sacreBLEU {METRIC} BLEU (13a) and chrF2",
        "decoding": f"beam {BEAM}, length penalty {LENPEN} (fairseq's L^{LENPEN})",
        "checkpoint_rule": settings.checkpoint,
        "architectures": {e: architecture(settings, e) for e in encodings},
        # --init-from: the checkpoint every row was fine-tuned from (None from scratch)
        "init_from": init_from.record(settings.init_from),
        # each row's encoder, decoder and own flags (:mod:`.encoding_rows`)
        "rows": {str(e): rows_of(e).to_json() for e in encodings},
        "significance": {"test": "sacreBLEU paired bootstrap", "resamples": N_RESAMPLES,
                         "alpha": ALPHA},
        "train_max_source_tokens": train_max,
        "cleaning": corpus.prepared.get("cleaning"), "pairs": corpus.prepared.get("pairs"),
        "bins": length_bins.to_json(split_bins, bins),
        "variants": [v.to_json() for v in variants], "runs": records, "summary": summary,
        "speed": {"comparable": comparable, "placement": placed},
    }
    extrapolation_study.add_entries(report, corpus, limit, scored)
    return report


def write(path: Path, report: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(report, indent=1) + "\n")
