#!/usr/bin/env bash
# Length extrapolation: WMT17 en-de trained on pairs of at most 50 subwords, newstest2017 by source length, SacreBLEU (default, cased)
#
# Generated from fairseq_posenc/tools/wmt/recipes.py by `posenc-reproduce scripts --out examples/wmt`;
# do not edit (tests/tools/test_wmt_reproduce.py fails when this file drifts from the recipes).
# One GPU per run; `posenc-reproduce commands --paper extrapolation --gpus N` prints them for N GPUs.
set -euo pipefail
SEEDS=1   # --seeds N: train and evaluate seeds 1..N of every cell (mean ± std in the table)
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) SEEDS="$2"; shift 2 ;;
    *) echo "usage: $0 [--seeds N]" >&2; exit 2 ;;
  esac
done
DATA="${DATA:-data/wmt}"   # prepared datasets
WORK="${WORK:-work/wmt}"   # checkpoints/ and results/
USER_DIR="$(python -c 'import fairseq_posenc, os; print(os.path.dirname(fairseq_posenc.__file__))')"

# 1. data
posenc-prepare-wmt wmt17_en_de --dest "$DATA/wmt17_en_de"

# 2. training: one model per row, dataset direction and seed
for SEED in $(seq 1 "$SEEDS"); do
  SUFFIX=""; [ "$SEED" = 1 ] || SUFFIX=".seed$SEED"   # seed 1 keeps the plain paths

  # Vaswani (--pos-encoding sinusoidal), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation_extrapolation \
    --train-max-len 50 \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_sinusoidal \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.98)' \
    --adam-eps 1e-9 \
    --lr 7e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 4000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/extrapolation/vaswani/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1

  # learned (--pos-encoding learned), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation_extrapolation \
    --train-max-len 50 \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_learned \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.98)' \
    --adam-eps 1e-9 \
    --lr 7e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 4000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/extrapolation/learned/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1

  # T5 (--pos-encoding t5), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation_extrapolation \
    --train-max-len 50 \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_t5 \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.98)' \
    --adam-eps 1e-9 \
    --lr 7e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 4000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/extrapolation/t5/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1

  # DIET-REL (--pos-encoding diet_rel), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation_extrapolation \
    --train-max-len 50 \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_diet_rel \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.98)' \
    --adam-eps 1e-9 \
    --lr 7e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 4000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/extrapolation/diet_rel/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1

  # DIET-ABS (--pos-encoding diet_abs), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation_extrapolation \
    --train-max-len 50 \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_diet_abs \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.98)' \
    --adam-eps 1e-9 \
    --lr 7e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 4000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/extrapolation/diet_abs/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1

  # DIET-ABS, 64 positions (--pos-encoding diet_abs), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation_extrapolation \
    --train-max-len 50 \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_diet_abs \
    --diet-abs-max-len 64 \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.98)' \
    --adam-eps 1e-9 \
    --lr 7e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 4000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/extrapolation/diet_abs_64_positions/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1

  # ALiBi (--pos-encoding alibi), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation_extrapolation \
    --train-max-len 50 \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_alibi \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.98)' \
    --adam-eps 1e-9 \
    --lr 7e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 4000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/extrapolation/alibi/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1

  # RoPE (--pos-encoding rope), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation_extrapolation \
    --train-max-len 50 \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_rope \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.98)' \
    --adam-eps 1e-9 \
    --lr 7e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 4000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/extrapolation/rope/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1
done

# 3. translate and score every cell: checkpoint_last.pt of each model, every test sentence, detokenized,
#    BLEU as the paper computed it, chrF, length buckets. For each cell (seed 1) it runs
#    (and, where a model cannot represent a source, the flags that skip it and say so):
#
#   Vaswani, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/extrapolation/vaswani/wmt17_en_de.en-de/checkpoint_last.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/extrapolation/vaswani/en-de/generate.newstest2017" \
#     --num-workers 0
#
#   learned, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/extrapolation/learned/wmt17_en_de.en-de/checkpoint_last.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/extrapolation/learned/en-de/generate.newstest2017" \
#     --num-workers 0
#
#   T5, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/extrapolation/t5/wmt17_en_de.en-de/checkpoint_last.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/extrapolation/t5/en-de/generate.newstest2017" \
#     --num-workers 0
#
#   DIET-REL, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/extrapolation/diet_rel/wmt17_en_de.en-de/checkpoint_last.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/extrapolation/diet_rel/en-de/generate.newstest2017" \
#     --num-workers 0
#
#   DIET-ABS, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/extrapolation/diet_abs/wmt17_en_de.en-de/checkpoint_last.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/extrapolation/diet_abs/en-de/generate.newstest2017" \
#     --num-workers 0
#
#   DIET-ABS, 64 positions, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/extrapolation/diet_abs_64_positions/wmt17_en_de.en-de/checkpoint_last.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/extrapolation/diet_abs_64_positions/en-de/generate.newstest2017" \
#     --num-workers 0
#
#   ALiBi, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/extrapolation/alibi/wmt17_en_de.en-de/checkpoint_last.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/extrapolation/alibi/en-de/generate.newstest2017" \
#     --num-workers 0
#
#   RoPE, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/extrapolation/rope/wmt17_en_de.en-de/checkpoint_last.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/extrapolation/rope/en-de/generate.newstest2017" \
#     --num-workers 0
posenc-reproduce evaluate --paper extrapolation --data "$DATA" --work "$WORK" --seeds "$SEEDS"

# 4. the table: paper / ours / diff, chrF, p against the baseline, length buckets
posenc-reproduce table --paper extrapolation --work "$WORK"
