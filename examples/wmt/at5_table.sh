#!/usr/bin/env bash
# Wu et al. 2021 (AT5), Table 6: WMT17 en-de, multi-BLEU (tokenized)
#
# Generated from fairseq_posenc/tools/wmt/recipes.py by `posenc-reproduce scripts --out examples/wmt`;
# do not edit (tests/tools/test_wmt_reproduce.py fails when this file drifts from the recipes).
# One GPU per run; `posenc-reproduce commands --paper at5 --gpus N` prints them for N GPUs.
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

  # T5-NoB (--pos-encoding t5_nob), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_t5_nob \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --max-source-positions 256 \
    --max-target-positions 256 \
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
    --save-dir "$WORK/checkpoints/at5/t5_nob/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1

  # T5 (--pos-encoding t5), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_t5 \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --max-source-positions 256 \
    --max-target-positions 256 \
    --t5-num-buckets 64 \
    --t5-max-distance 128 \
    --pos-layers first \
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
    --save-dir "$WORK/checkpoints/at5/t5/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1

  # AT5-NoB (--pos-encoding at5_nob), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_at5_nob \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --max-source-positions 256 \
    --max-target-positions 256 \
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
    --save-dir "$WORK/checkpoints/at5/at5_nob/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1

  # AT5 (--pos-encoding at5), wmt17_en_de en-de
  fairseq-train "$DATA/wmt17_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_at5 \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --max-source-positions 256 \
    --max-target-positions 256 \
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
    --save-dir "$WORK/checkpoints/at5/at5/wmt17_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --distributed-world-size 1
done

# 3. translate and score every cell: checkpoint_best.pt of each model, every test sentence, detokenized,
#    BLEU as the paper computed it, chrF, length buckets. For each cell (seed 1) it runs
#    (and, where a model cannot represent a source, the flags that skip it and say so):
#
#   T5-NoB, 2014:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/t5_nob/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/t5_nob/en-de/generate.newstest2014" \
#     --num-workers 0
#
#   T5-NoB, 2015:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/t5_nob/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test1 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/t5_nob/en-de/generate.newstest2015" \
#     --num-workers 0
#
#   T5-NoB, 2016:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/t5_nob/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test2 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/t5_nob/en-de/generate.newstest2016" \
#     --num-workers 0
#
#   T5-NoB, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/t5_nob/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/t5_nob/en-de/generate.newstest2017" \
#     --num-workers 0
#
#   T5, 2014:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/t5/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/t5/en-de/generate.newstest2014" \
#     --num-workers 0
#
#   T5, 2015:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/t5/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test1 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/t5/en-de/generate.newstest2015" \
#     --num-workers 0
#
#   T5, 2016:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/t5/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test2 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/t5/en-de/generate.newstest2016" \
#     --num-workers 0
#
#   T5, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/t5/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/t5/en-de/generate.newstest2017" \
#     --num-workers 0
#
#   AT5-NoB, 2014:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/at5_nob/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/at5_nob/en-de/generate.newstest2014" \
#     --num-workers 0
#
#   AT5-NoB, 2015:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/at5_nob/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test1 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/at5_nob/en-de/generate.newstest2015" \
#     --num-workers 0
#
#   AT5-NoB, 2016:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/at5_nob/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test2 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/at5_nob/en-de/generate.newstest2016" \
#     --num-workers 0
#
#   AT5-NoB, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/at5_nob/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/at5_nob/en-de/generate.newstest2017" \
#     --num-workers 0
#
#   AT5, 2014:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/at5/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/at5/en-de/generate.newstest2014" \
#     --num-workers 0
#
#   AT5, 2015:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/at5/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test1 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/at5/en-de/generate.newstest2015" \
#     --num-workers 0
#
#   AT5, 2016:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/at5/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test2 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/at5/en-de/generate.newstest2016" \
#     --num-workers 0
#
#   AT5, 2017:
#   fairseq-generate "$DATA/wmt17_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/at5/at5/wmt17_en_de.en-de/checkpoint_best.pt" \
#     --gen-subset test3 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/at5/at5/en-de/generate.newstest2017" \
#     --num-workers 0
posenc-reproduce evaluate --paper at5 --data "$DATA" --work "$WORK" --seeds "$SEEDS"

# 4. the table: paper / ours / diff, chrF, p against the baseline, length buckets
posenc-reproduce table --paper at5 --work "$WORK"
