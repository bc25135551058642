#!/usr/bin/env bash
# The "main job": train one position encoding end to end on an offline toy corpus
# (synthetic English->German, see scripts/make_toy_corpus.py and scripts/README_demo_notes.md),
# translate with beam search, score, inspect. Needs no network once the environment exists.
#
#   bash scripts/demo.sh [ENCODING] [extra fairseq-train args...]
#   bash scripts/demo.sh                       # ENCODING=diet_rel
#   bash scripts/demo.sh sinusoidal --seed 2   # another encoding, extra training flags
#
# Environment variables:
#   POSENC_VENV     venv to use (default <repo>/.venv; same variable as scripts/setup_env.sh)
#   SKIP_SETUP=1    do not run scripts/setup_env.sh; use the venv as it is
#   DEMO_DIR        work directory (default <repo>/data/demo); relative paths are taken
#                   from the current directory
#   DEMO_UPDATES    training updates (default 1000)
#   DEMO_REBUILD=1  re-create the corpus and its prepared data even if they are up to date
#   DEMO_RETRAIN=1  train again even if this encoding's run has finished with these settings
#   DEMO_TRAIN_MAX_LEN=N  the extrapolation study: train only on the pairs of at most N
#                   subword tokens per side (posenc-compare --train-max-len; 16 keeps 12,252
#                   of the 20,000 pairs) and score both test splits in bins relative to N
#
# Steps: environment; toy corpus (with a test_long split of sentences longer than any
# training sentence); tokenize + clean + BPE + binarize (posenc-prepare-corpus, once for
# every encoding); then posenc-compare with this one encoding: train, translate test and
# test_long (beam 10), score (sacreBLEU BLEU and chrF, by source length), inspect. The
# same command compares several encodings and seeds on any corpus (README, "Your own data").
#
# Outputs: $DEMO_DIR/raw (the corpus), $DEMO_DIR/prepared/{raw,tok,bpe,bin} (bin holds the
# subsets train, valid, test and test1 = test_long) and $DEMO_DIR/$ENCODING/, a comparison
# directory: report.md, report.json, report/index.html, and runs/$ENCODING/seed1/ with the
# checkpoints, train.log, tests/{test,test_long}/ (fairseq-generate's log, the detokenized
# hypotheses, result.json) and inspect/index.html.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENCODING="${1:-diet_rel}"
[ "$#" -gt 0 ] && shift
# The encoding names a directory that a retrain deletes: allow plain names only.
[[ "$ENCODING" =~ ^[A-Za-z0-9_]+$ ]] \
  || { echo "usage: bash scripts/demo.sh [ENCODING] [fairseq-train args...]" >&2; exit 2; }

VENV="${POSENC_VENV:-$ROOT/.venv}"
DEMO_DIR="${DEMO_DIR:-$ROOT/data/demo}"
mkdir -p "$DEMO_DIR"
DEMO_DIR="$(cd "$DEMO_DIR" && pwd)"
UPDATES="${DEMO_UPDATES:-1000}"
STUDY=()
[ -n "${DEMO_TRAIN_MAX_LEN:-}" ] && STUDY=(--train-max-len "$DEMO_TRAIN_MAX_LEN")

N_STEPS=4
step() { echo "[demo] step $1/$N_STEPS: $2"; }
die() { echo "[demo] ERROR: $*" >&2; exit 1; }

# 1. environment
if [ "${SKIP_SETUP:-0}" = 1 ]; then
  step 1 "environment: SKIP_SETUP=1, using $VENV as it is"
else
  step 1 "environment: scripts/setup_env.sh ($VENV)"
  POSENC_VENV="$VENV" bash "$ROOT/scripts/setup_env.sh"
fi
for tool in python posenc-prepare-corpus posenc-compare; do
  [ -x "$VENV/bin/$tool" ] || die "$VENV/bin/$tool not found (run scripts/setup_env.sh or set POSENC_VENV)"
done
export PATH="$VENV/bin:$PATH" PYTHONUNBUFFERED=1

RAW="$DEMO_DIR/raw" PREPARED="$DEMO_DIR/prepared"
BPE_MERGES=2000
# Training sentences have at most 30 English words (make_toy_corpus.py's --max-len);
# test_long has 40-60, i.e. more than 40 Moses tokens: beyond AT5's (20, 40] bin, which
# holds the longest training sentences (at most 33 tokens).
CORPUS_ARGS=(--seed 1 --train 20000 --valid 300 --test 300
             --test-long 200 --long-min-len 40 --long-max-len 60)
# posenc-compare's own cleaning of raw training pairs (fairseq's WMT preparation)
PREPARE_ARGS=(--source-lang en --target-lang de --valid valid --test test test_long
              --bpe-merges "$BPE_MERGES" --clean-max-len 250 --clean-max-ratio 1.5 --workers 2)
# The data is shared by all encodings; it is made again when its recipe changes.
STAMP="$( (cat "$ROOT/scripts/make_toy_corpus.py" "$ROOT/fairseq_posenc/tools/corpus.py"
           echo "${CORPUS_ARGS[*]} ${PREPARE_ARGS[*]}") | sha256sum | cut -c1-16)"
if [ "${DEMO_REBUILD:-0}" != 1 ] && [ -f "$PREPARED/.demo-stamp" ] \
    && [ "$(cat "$PREPARED/.demo-stamp")" = "$STAMP" ]; then
  step 2 "toy corpus and its prepared data: up to date in $RAW, $PREPARED"
else
  rm -rf "$RAW" "$PREPARED"
  step 2 "toy corpus -> $RAW; tokenize, clean, joint BPE ($BPE_MERGES merges), binarize with posenc-prepare-corpus -> $PREPARED (log: $DEMO_DIR/prepare.log)"
  python "$ROOT/scripts/make_toy_corpus.py" --out "$RAW" "${CORPUS_ARGS[@]}"
  posenc-prepare-corpus "$RAW" --dest "$PREPARED" "${PREPARE_ARGS[@]}" 2> "$DEMO_DIR/prepare.log" \
    || { tail -n 20 "$DEMO_DIR/prepare.log" >&2; die "posenc-prepare-corpus failed (see $DEMO_DIR/prepare.log)"; }
  # The toy vocabulary is small: subword-nmt stops early once no pair occurs twice.
  grep -E "clean:|learned|done" "$DEMO_DIR/prepare.log" | sed 's/^\[prepare-corpus\]/[demo]  /'
  echo "$STAMP" > "$PREPARED/.demo-stamp"
fi

OUT="$DEMO_DIR/$ENCODING"
[ "${DEMO_RETRAIN:-0}" = 1 ] && rm -rf "$OUT"
step 3 "posenc-compare: train transformer_tiny_$ENCODING for $UPDATES updates, translate test and test_long (beam 10), score, inspect -> $OUT"
# --force: a rerun with other training flags starts this encoding's comparison over;
# with the same flags, a finished run is kept.
posenc-compare "$OUT" --data "$PREPARED" -s en -t de --encodings "$ENCODING" --size tiny \
    --max-update "$UPDATES" --test test test_long --cpu --force "${STUDY[@]}" --train-args="$*"

step 4 "summary"
python - "$OUT/report.json" "$ENCODING" "$SECONDS" <<'PY'
import json, sys

report, encoding, seconds = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
run = report["runs"][0]
print(f"[demo] encoding:  {encoding} (--arch {report['architectures'][encoding]}), "
      f"{report['settings']['max_update']} updates, {seconds}s in all")
for row in report["summary"]:
    print(f"[demo] {row['split']:9s}  BLEU {row['bleu_mean']:.2f}  chrF {row['chrf_mean']:.2f}  "
          f"({row['sentences']} sentences, {row['beyond_training']} longer than any "
          "training source)")
    bins = "  ".join(f"{b['label']} n={b['sentences']}{' (few)' if b.get('few') else ''}: "
                     f"{b['bleu']}" for b in row["buckets"] if b["sentences"])
    print(f"[demo]            BLEU by source length: {bins}")
    if row.get("extrapolation"):
        rel = "  ".join((f"({e['bin'][0]}, {e['bin'][1]}]" if e["bin"][1] else
                         f"({e['bin'][0]}, inf)") + f" n={e['n']}: {e['bleu']}"
                        for e in row["extrapolation"] if e["n"])
        print(f"[demo]            BLEU by source length / N: {rel}")
if report.get("train_max_len"):
    limit = report["train_max_len"]
    print(f"[demo] --train-max-len {limit['n']}: trained on {limit['kept']:,} pairs, "
          f"{limit['dropped']:,} dropped")
print(f"[demo] sacreBLEU: {report['signatures']['bleu']} (BLEU), "
      f"{report['signatures']['chrf']} (chrF); {report['decoding']}")
PY
echo "[demo] report:    $OUT/report.md, $OUT/report/index.html (offline), $OUT/report.json"
echo "[demo] inspect:   $OUT/runs/$ENCODING/seed1/inspect/index.html"
echo "[demo] note: synthetic toy corpus; this BLEU is a sanity check, not comparable to WMT"
