#!/usr/bin/env bash
# The "main job": train and evaluate one position encoding end to end on an offline toy
# corpus (synthetic English->German, see scripts/make_toy_corpus.py and
# scripts/README_demo_notes.md). Needs no network once the environment exists.
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
#   DEMO_REBUILD=1  re-create the corpus and binarized data even if they are up to date
#
# Steps: environment, toy corpus (with a test_long split of sentences longer than any
# training sentence), tokenize + BPE + binarize (posenc-prepare-corpus, the WMT
# preparation's own steps), train, translate test and test_long (beam 10), score (sacreBLEU, posenc-score: BLEU, chrF and BLEU/chrF by source length),
# inspect the trained position terms (posenc-inspect).
#
# Outputs: $DEMO_DIR/{raw,tok,bpe,bin} (data, shared by all encodings; bin holds the
# subsets train, valid, test and test1 = test_long) and $DEMO_DIR/checkpoints/$ENCODING/:
#   checkpoint_best.pt, checkpoint_last.pt, train.log
#   generate.log, hyp.detok.de            test (300 sentences, lengths as in training)
#   generate_long.log, hyp_long.detok.de  test_long (200 sentences of 40-60 words)
#   bleu.json                             sacreBLEU's JSON for test
#   score/scores.json                     posenc-score on test: BLEU and chrF
#   score_long/scores.json                posenc-score on test_long: BLEU and chrF
#   score_by_length/{buckets.md,buckets.png,scores.json}
#                                         BLEU / chrF by source length (AT5's bins) on
#                                         test + test_long together: the drop beyond the
#                                         training length
#   inspect/index.html (+ PNGs), inspect.log   posenc-inspect's pictures of the model
#   score.log                             posenc-score's terminal output
# A rerun retrains the given encoding from scratch.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENCODING="${1:-diet_rel}"
[ "$#" -gt 0 ] && shift
EXTRA_TRAIN_ARGS=("$@")
# The encoding names a directory that a rerun deletes: allow plain names only.
[[ "$ENCODING" =~ ^[A-Za-z0-9_]+$ ]] \
  || { echo "usage: bash scripts/demo.sh [ENCODING] [fairseq-train args...]" >&2; exit 2; }

VENV="${POSENC_VENV:-$ROOT/.venv}"
DEMO_DIR="${DEMO_DIR:-$ROOT/data/demo}"
mkdir -p "$DEMO_DIR"
DEMO_DIR="$(cd "$DEMO_DIR" && pwd)"
UPDATES="${DEMO_UPDATES:-1000}"
ARCH_ARGS=(--user-dir "$ROOT/fairseq_posenc" --arch "transformer_tiny_$ENCODING")

N_STEPS=7
step() { echo "[demo] step $1/$N_STEPS: $2"; }
die() { echo "[demo] ERROR: $*" >&2; exit 1; }

# 1. environment
if [ "${SKIP_SETUP:-0}" = 1 ]; then
  step 1 "environment: SKIP_SETUP=1, using $VENV as it is"
else
  step 1 "environment: scripts/setup_env.sh ($VENV)"
  POSENC_VENV="$VENV" bash "$ROOT/scripts/setup_env.sh"
fi
BIN_DIR="$VENV/bin"
for tool in python posenc-prepare-corpus fairseq-train fairseq-generate sacrebleu posenc-score \
    posenc-inspect; do
  [ -x "$BIN_DIR/$tool" ] || die "$BIN_DIR/$tool not found (run scripts/setup_env.sh or set POSENC_VENV)"
done
export PATH="$BIN_DIR:$PATH"
known="$(python -c 'from fairseq_posenc.encodings import ENCODINGS; print(*sorted(ENCODINGS))' 2>/dev/null)"
[[ " $known " == *" $ENCODING "* ]] || die "unknown encoding '$ENCODING'; choose one of: $known"
export PYTHONUNBUFFERED=1

RAW="$DEMO_DIR/raw" TOK="$DEMO_DIR/tok" BPE="$DEMO_DIR/bpe" DATA_BIN="$DEMO_DIR/bin"
BPE_MERGES=2000
# Training sentences have at most 30 English words (make_toy_corpus.py's --max-len);
# test_long has 40-60, i.e. more than 40 Moses tokens: beyond AT5's (20, 40] bin, which
# holds the longest training sentences (at most 33 tokens).
LONG_MIN=40 LONG_MAX=60
CORPUS_ARGS=(--seed 1 --train 20000 --valid 300 --test 300
             --test-long 200 --long-min-len "$LONG_MIN" --long-max-len "$LONG_MAX")
SPLITS=(train valid test test_long)
# Data is shared by all encodings; it is rebuilt when the recipe changes (or DEMO_REBUILD=1).
STAMP="$( (cat "$ROOT/scripts/make_toy_corpus.py"
           echo "${CORPUS_ARGS[*]} bpe=$BPE_MERGES splits=${SPLITS[*]} prepare=posenc-prepare-corpus/joiners") \
  | sha256sum | cut -c1-16)"
if [ "${DEMO_REBUILD:-0}" != 1 ] && [ -f "$DATA_BIN/.demo-stamp" ] \
    && [ "$(cat "$DATA_BIN/.demo-stamp")" = "$STAMP" ]; then
  step 2 "toy corpus: up to date in $RAW"
  step 3 "tokenize, BPE, binarize: up to date in $DATA_BIN"
else
  rm -rf "$RAW" "$TOK" "$BPE" "$DATA_BIN"
  mkdir -p "$RAW"

  step 2 "toy corpus -> $RAW"
  python "$ROOT/scripts/make_toy_corpus.py" --out "$RAW" "${CORPUS_ARGS[@]}"

  step 3 "tokenize, joint BPE ($BPE_MERGES merges), binarize with posenc-prepare-corpus -> $DEMO_DIR/{tok,bpe,bin} (log: $DEMO_DIR/prepare.log)"
  # The WMT preparation's own steps: sacremoses tokens with joiner marks (so that outputs
  # detokenize to exactly the raw text), subword-nmt, fairseq-preprocess (test1 = test_long).
  posenc-prepare-corpus "$RAW" --source-lang en --target-lang de --dest "$DEMO_DIR" \
      --valid valid --test test test_long --bpe-merges "$BPE_MERGES" --workers 2 \
      2> "$DEMO_DIR/prepare.log" \
    || { tail -n 20 "$DEMO_DIR/prepare.log" >&2; die "posenc-prepare-corpus failed (see $DEMO_DIR/prepare.log)"; }
  # The toy vocabulary is small: subword-nmt stops early once no pair occurs twice.
  grep -E "learned|done" "$DEMO_DIR/prepare.log" | sed 's/^\[prepare-corpus\]/[demo]  /'
  echo "$STAMP" > "$DATA_BIN/.demo-stamp"
fi

SAVE_DIR="$DEMO_DIR/checkpoints/$ENCODING"
step 4 "train $ENCODING for $UPDATES updates -> $SAVE_DIR (log: $SAVE_DIR/train.log)"
rm -rf "$SAVE_DIR"
mkdir -p "$SAVE_DIR"
train_start=$SECONDS
# Progress lines (every 50 updates, validation, end) go to the terminal; all goes to train.log.
PROGRESS_RE='epoch [0-9]+: +[0-9]+ / |valid on|done training'
if ! fairseq-train "$DATA_BIN" "${ARCH_ARGS[@]}" --task translation \
    --optimizer adam --adam-betas '(0.9,0.98)' --lr 1e-3 --lr-scheduler inverse_sqrt \
    --warmup-updates 200 --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
    --max-tokens 4096 --max-update "$UPDATES" --no-epoch-checkpoints --save-dir "$SAVE_DIR" \
    --log-format simple --log-interval 50 "${EXTRA_TRAIN_ARGS[@]}" 2>&1 \
    | tee "$SAVE_DIR/train.log" | { grep --line-buffered -E "$PROGRESS_RE" || true; }; then
  tail -n 20 "$SAVE_DIR/train.log" >&2
  die "fairseq-train failed (see $SAVE_DIR/train.log)"
fi
[ -f "$SAVE_DIR/checkpoint_best.pt" ] || die "no $SAVE_DIR/checkpoint_best.pt after training"
train_secs=$((SECONDS - train_start))

step 5 "translate test and test_long (beam 10) -> $SAVE_DIR/hyp{,_long}.detok.de"
# translate SUBSET RAW_NAME OUT_NAME: fairseq-generate on the binarized SUBSET; writes
# $SAVE_DIR/OUT_NAME.detok.de (one line per sentence of raw/RAW_NAME.de, in order)
# and logs to $SAVE_DIR/generate${OUT_NAME#hyp}.log.
translate() {
  local subset="$1" name="$2" out="$SAVE_DIR/$3" log="$SAVE_DIR/generate${3#hyp}.log"
  local start=$SECONDS
  fairseq-generate "$DATA_BIN" --user-dir "$ROOT/fairseq_posenc" \
    --path "$SAVE_DIR/checkpoint_best.pt" --beam 10 --lenpen 0.6 --remove-bpe \
    --required-batch-size-multiple 1 --batch-size 64 --gen-subset "$subset" > "$log" 2>&1 \
    || { tail -n 20 "$log" >&2; die "fairseq-generate failed on $name (see $log)"; }
  # every sentence's H- line, in the test set's order; a missing one is an error
  local n_ref
  n_ref=$(wc -l < "$RAW/$name.de")
  # detokenized by the joiners posenc-prepare-corpus wrote (bpe/bpe.json)
  python -m fairseq_posenc.hypotheses "$log" --expected "$n_ref" --detokenize "$BPE" \
      > "$out.detok.de" 2> "$out.err" \
    || { grep '^error' "$out.err" >&2; die "fairseq-generate did not translate every $name sentence (see $log)"; }
  rm -f "$out.err"
  echo "[demo]   $name: $n_ref sentences translated in $((SECONDS - start))s (log: $log)"
}
translate test test hyp
translate test1 test_long hyp_long
n_ref=$(wc -l < "$RAW/test.de")
n_long=$(wc -l < "$RAW/test_long.de")

step 6 "score with sacreBLEU and posenc-score (log: $SAVE_DIR/score.log)"
sacrebleu "$RAW/test.de" -i "$SAVE_DIR/hyp.detok.de" -m bleu -w 2 > "$SAVE_DIR/bleu.json"
cat "$SAVE_DIR/bleu.json"
read -r BLEU SIGNATURE < <(python -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["score"], d["signature"])' "$SAVE_DIR/bleu.json")
SCORE_LOG="$SAVE_DIR/score.log"
: > "$SCORE_LOG"
posenc_score() {
  posenc-score "$@" >> "$SCORE_LOG" 2>&1 \
    || { tail -n 20 "$SCORE_LOG" >&2; die "posenc-score failed (see $SCORE_LOG)"; }
}
# BLEU and chrF of each split (the same sacreBLEU metrics as bleu.json).
posenc_score --ref "$RAW/test.de" --hyp "$ENCODING=$SAVE_DIR/hyp.detok.de" --out "$SAVE_DIR/score"
posenc_score --ref "$RAW/test_long.de" --hyp "$ENCODING=$SAVE_DIR/hyp_long.detok.de" \
  --out "$SAVE_DIR/score_long"
# One table by source length over both splits: test fills the bins up to (20, 40] (the
# training lengths), test_long the bins beyond, so the drop past the training length is
# one row read left to right.
BY_LEN="$SAVE_DIR/score_by_length"
mkdir -p "$BY_LEN"
cat "$RAW/test.en" "$RAW/test_long.en" > "$BY_LEN/test+test_long.en"
cat "$RAW/test.de" "$RAW/test_long.de" > "$BY_LEN/test+test_long.de"
cat "$SAVE_DIR/hyp.detok.de" "$SAVE_DIR/hyp_long.detok.de" > "$BY_LEN/hyp.detok.de"
posenc_score --ref "$BY_LEN/test+test_long.de" --src "$BY_LEN/test+test_long.en" \
  --hyp "$ENCODING=$BY_LEN/hyp.detok.de" --out "$BY_LEN" \
  --title "$ENCODING on the toy corpus: test (training lengths) + test_long ($LONG_MIN-$LONG_MAX words)"
read -r CHRF LONG_BLEU LONG_CHRF < <(python -c '
import json, sys
enc, test, long = sys.argv[1:]
t, l = (json.load(open(f))["systems"][enc] for f in (test, long))
print(t["chrf"], l["bleu"], l["chrf"])' "$ENCODING" "$SAVE_DIR/score/scores.json" "$SAVE_DIR/score_long/scores.json")
echo "[demo]   BLEU / chrF by source length in Moses tokens (training sentences: at most 33):"
sed 's/^/[demo]   /' "$BY_LEN/buckets.md"

step 7 "inspect the trained position terms with posenc-inspect -> $SAVE_DIR/inspect (log: $SAVE_DIR/inspect.log)"
# One test sentence of moderate length (the first with 10 or more words) for the pictures
# that need a sentence.
INSPECT_SENTENCE="$(awk 'NF >= 10 { print; exit }' "$RAW/test.en")"
[ -n "$INSPECT_SENTENCE" ] || INSPECT_SENTENCE="$(head -n 1 "$RAW/test.en")"
echo "[demo]   sentence: $INSPECT_SENTENCE"
posenc-inspect "$SAVE_DIR/checkpoint_best.pt" --out "$SAVE_DIR/inspect" --data "$DATA_BIN" \
  --source-lang en --bpe-dir "$BPE" \
  --sentence "$INSPECT_SENTENCE" \
  > "$SAVE_DIR/inspect.log" 2>&1 \
  || { tail -n 20 "$SAVE_DIR/inspect.log" >&2; die "posenc-inspect failed (see $SAVE_DIR/inspect.log)"; }
[ -f "$SAVE_DIR/inspect/index.html" ] || die "posenc-inspect wrote no $SAVE_DIR/inspect/index.html"

echo "[demo] ==================== summary ===================="
echo "[demo] encoding:   $ENCODING (--arch transformer_tiny_$ENCODING)"
echo "[demo] updates:    $UPDATES, training took ${train_secs}s, total ${SECONDS}s"
echo "[demo] test BLEU:  $BLEU  ($n_ref sentences, detokenized, vs raw $RAW/test.de)"
echo "[demo] signature:  $SIGNATURE"
echo "[demo] test chrF:  $CHRF  (posenc-score: $SAVE_DIR/score/scores.json)"
echo "[demo] long BLEU:  $LONG_BLEU, chrF $LONG_CHRF  ($n_long sentences of $LONG_MIN-$LONG_MAX words, longer than any training sentence; $SAVE_DIR/score_long/scores.json)"
echo "[demo] by length:  $BY_LEN/buckets.md, $BY_LEN/buckets.png (BLEU / chrF per source-length bin, test + test_long)"
echo "[demo] inspect:    $SAVE_DIR/inspect/index.html"
echo "[demo] outputs:    $SAVE_DIR (checkpoint_best.pt, train.log, generate.log, hyp.detok.de, bleu.json)"
echo "[demo] note: synthetic toy corpus; this BLEU is a sanity check, not comparable to WMT"
