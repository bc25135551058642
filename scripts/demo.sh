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
# Outputs: $DEMO_DIR/{raw,tok,bpe,bin} (data, shared by all encodings) and
# $DEMO_DIR/checkpoints/$ENCODING/ (checkpoints, train.log, generate.log, hyp.detok.de,
# bleu.json). A rerun retrains the given encoding from scratch.
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
for tool in python sacremoses subword-nmt fairseq-preprocess fairseq-train fairseq-generate sacrebleu; do
  [ -x "$BIN_DIR/$tool" ] || die "$BIN_DIR/$tool not found (run scripts/setup_env.sh or set POSENC_VENV)"
done
export PATH="$BIN_DIR:$PATH"
known="$(python -c 'from fairseq_posenc.encodings import ENCODINGS; print(*sorted(ENCODINGS))' 2>/dev/null)"
[[ " $known " == *" $ENCODING "* ]] || die "unknown encoding '$ENCODING'; choose one of: $known"
export PYTHONUNBUFFERED=1

RAW="$DEMO_DIR/raw" TOK="$DEMO_DIR/tok" BPE="$DEMO_DIR/bpe" DATA_BIN="$DEMO_DIR/bin"
BPE_MERGES=2000
CORPUS_ARGS=(--seed 1 --train 20000 --valid 300 --test 300)
# Data is shared by all encodings; it is rebuilt when the recipe changes (or DEMO_REBUILD=1).
STAMP="$( (cat "$ROOT/scripts/make_toy_corpus.py"; echo "${CORPUS_ARGS[*]} bpe=$BPE_MERGES") \
  | sha256sum | cut -c1-16)"
if [ "${DEMO_REBUILD:-0}" != 1 ] && [ -f "$DATA_BIN/.demo-stamp" ] \
    && [ "$(cat "$DATA_BIN/.demo-stamp")" = "$STAMP" ]; then
  step 2 "toy corpus: up to date in $RAW"
  step 3 "tokenize: up to date in $TOK"
  step 4 "BPE: up to date in $BPE"
  step 5 "binarize: up to date in $DATA_BIN"
else
  rm -rf "$RAW" "$TOK" "$BPE" "$DATA_BIN"
  mkdir -p "$RAW" "$TOK" "$BPE"

  step 2 "toy corpus -> $RAW"
  python "$ROOT/scripts/make_toy_corpus.py" --out "$RAW" "${CORPUS_ARGS[@]}"

  step 3 "tokenize with sacremoses -> $TOK"
  for split in train valid test; do
    for lang in en de; do
      sacremoses -q -l "$lang" -j 2 tokenize -x < "$RAW/$split.$lang" > "$TOK/$split.$lang"
    done
  done

  step 4 "joint BPE ($BPE_MERGES merges, subword-nmt) -> $BPE"
  subword-nmt learn-joint-bpe-and-vocab --input "$TOK/train.en" "$TOK/train.de" \
    -s "$BPE_MERGES" -o "$BPE/codes" --write-vocabulary "$BPE/vocab.en" "$BPE/vocab.de" \
    2> "$BPE/learn.log" || { tail -n 20 "$BPE/learn.log" >&2; die "BPE learning failed"; }
  # The toy vocabulary is small: subword-nmt stops early once no pair occurs twice.
  echo "[demo]   learned $(grep -vc '^#' "$BPE/codes") merges"
  for split in train valid test; do
    for lang in en de; do
      subword-nmt apply-bpe -c "$BPE/codes" --vocabulary "$BPE/vocab.$lang" \
        --vocabulary-threshold 1 < "$TOK/$split.$lang" > "$BPE/$split.$lang"
    done
  done

  step 5 "binarize with fairseq-preprocess -> $DATA_BIN"
  fairseq-preprocess --source-lang en --target-lang de \
    --trainpref "$BPE/train" --validpref "$BPE/valid" --testpref "$BPE/test" \
    --destdir "$DATA_BIN" --joined-dictionary --workers 2 > "$DEMO_DIR/preprocess.log" 2>&1 \
    || { tail -n 20 "$DEMO_DIR/preprocess.log" >&2; die "fairseq-preprocess failed"; }
  echo "$STAMP" > "$DATA_BIN/.demo-stamp"
fi

SAVE_DIR="$DEMO_DIR/checkpoints/$ENCODING"
step 6 "train $ENCODING for $UPDATES updates -> $SAVE_DIR (log: $SAVE_DIR/train.log)"
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

step 7 "translate the test set (beam 10) and score with sacreBLEU"
GEN_LOG="$SAVE_DIR/generate.log"
fairseq-generate "$DATA_BIN" --user-dir "$ROOT/fairseq_posenc" \
  --path "$SAVE_DIR/checkpoint_best.pt" --beam 10 --lenpen 0.6 --remove-bpe \
  --required-batch-size-multiple 1 --batch-size 64 --gen-subset test > "$GEN_LOG" 2>&1 \
  || { tail -n 20 "$GEN_LOG" >&2; die "fairseq-generate failed (see $GEN_LOG)"; }
# H-<id>\t<score>\t<hypothesis>, in batch order: sort by id, keep the text.
{ grep -E $'^H-[0-9]+\t' "$GEN_LOG" || true; } > "$SAVE_DIR/hyp.lines"
sed 's/^H-//' "$SAVE_DIR/hyp.lines" | sort -t $'\t' -k1,1n | cut -f3 > "$SAVE_DIR/hyp.tok.de"
n_ref=$(wc -l < "$RAW/test.de")
n_hyp=$(wc -l < "$SAVE_DIR/hyp.tok.de")
n_ids=$(cut -f1 "$SAVE_DIR/hyp.lines" | sort -u | wc -l)
rm -f "$SAVE_DIR/hyp.lines"
[ "$n_hyp" -eq "$n_ref" ] && [ "$n_ids" -eq "$n_ref" ] \
  || die "fairseq-generate produced $n_hyp hypotheses ($n_ids distinct ids) for $n_ref test sentences"
sacremoses -q -l de -j 2 detokenize -x < "$SAVE_DIR/hyp.tok.de" > "$SAVE_DIR/hyp.detok.de"
sacrebleu "$RAW/test.de" -i "$SAVE_DIR/hyp.detok.de" -m bleu -w 2 > "$SAVE_DIR/bleu.json"
cat "$SAVE_DIR/bleu.json"
read -r BLEU SIGNATURE < <(python -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["score"], d["signature"])' "$SAVE_DIR/bleu.json")

echo "[demo] ==================== summary ===================="
echo "[demo] encoding:   $ENCODING (--arch transformer_tiny_$ENCODING)"
echo "[demo] updates:    $UPDATES, training took ${train_secs}s, total ${SECONDS}s"
echo "[demo] test BLEU:  $BLEU  ($n_ref sentences, detokenized, vs raw $RAW/test.de)"
echo "[demo] signature:  $SIGNATURE"
echo "[demo] outputs:    $SAVE_DIR (checkpoint_best.pt, train.log, generate.log, hyp.detok.de, bleu.json)"
echo "[demo] note: synthetic toy corpus; this BLEU is a sanity check, not comparable to WMT"
