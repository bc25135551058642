#!/usr/bin/env bash
# Chen et al. 2021a ('Demystifying ...'), Table 6: newstest2015, uncased BLEU
#
# Generated from fairseq_posenc/tools/wmt/recipes.py by `posenc-reproduce scripts --out examples/wmt`;
# do not edit (tests/tools/test_wmt_reproduce.py fails when this file drifts from the recipes).
# One GPU per run; `posenc-reproduce commands --paper chen2021a --gpus N` prints them for N GPUs.
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
posenc-prepare-wmt wmt15_en_de --dest "$DATA/wmt15_en_de"
posenc-prepare-wmt wmt18_en_cs --dest "$DATA/wmt18_en_cs"

# 2. training: one model per row, dataset direction and seed
for SEED in $(seq 1 "$SEEDS"); do
  SUFFIX=""; [ "$SEED" = 1 ] || SUFFIX=".seed$SEED"   # seed 1 keeps the plain paths

  # Vaswani (input) (--pos-encoding sinusoidal), wmt15_en_de en-de
  fairseq-train "$DATA/wmt15_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_sinusoidal \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/vaswani_input/wmt15_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # Vaswani (input) (--pos-encoding sinusoidal), wmt15_en_de de-en
  fairseq-train "$DATA/wmt15_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang de \
    --target-lang en \
    --arch transformer_wmt_en_de_sinusoidal \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/vaswani_input/wmt15_en_de.de-en$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # Vaswani (input) (--pos-encoding sinusoidal), wmt18_en_cs en-cs
  fairseq-train "$DATA/wmt18_en_cs/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang cs \
    --arch transformer_wmt_en_de_sinusoidal \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/vaswani_input/wmt18_en_cs.en-cs$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # Shaw (--pos-encoding shaw), wmt15_en_de en-de
  fairseq-train "$DATA/wmt15_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_shaw \
    --shaw-clip 20 \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/shaw/wmt15_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # Shaw (--pos-encoding shaw), wmt15_en_de de-en
  fairseq-train "$DATA/wmt15_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang de \
    --target-lang en \
    --arch transformer_wmt_en_de_shaw \
    --shaw-clip 20 \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/shaw/wmt15_en_de.de-en$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # Shaw (--pos-encoding shaw), wmt18_en_cs en-cs
  fairseq-train "$DATA/wmt18_en_cs/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang cs \
    --arch transformer_wmt_en_de_shaw \
    --shaw-clip 20 \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/shaw/wmt18_en_cs.en-cs$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # Raffel (T5) (--pos-encoding t5), wmt15_en_de en-de
  fairseq-train "$DATA/wmt15_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_t5 \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/raffel_t5/wmt15_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # Raffel (T5) (--pos-encoding t5), wmt15_en_de de-en
  fairseq-train "$DATA/wmt15_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang de \
    --target-lang en \
    --arch transformer_wmt_en_de_t5 \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/raffel_t5/wmt15_en_de.de-en$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # Raffel (T5) (--pos-encoding t5), wmt18_en_cs en-cs
  fairseq-train "$DATA/wmt18_en_cs/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang cs \
    --arch transformer_wmt_en_de_t5 \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/raffel_t5/wmt18_en_cs.en-cs$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # REL-SCALAR (--pos-encoding diet_rel), wmt15_en_de en-de
  fairseq-train "$DATA/wmt15_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang de \
    --arch transformer_wmt_en_de_diet_rel \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/rel_scalar/wmt15_en_de.en-de$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # REL-SCALAR (--pos-encoding diet_rel), wmt15_en_de de-en
  fairseq-train "$DATA/wmt15_en_de/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang de \
    --target-lang en \
    --arch transformer_wmt_en_de_diet_rel \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/rel_scalar/wmt15_en_de.de-en$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1

  # REL-SCALAR (--pos-encoding diet_rel), wmt18_en_cs en-cs
  fairseq-train "$DATA/wmt18_en_cs/bin" \
    --user-dir "$USER_DIR" \
    --task translation \
    --source-lang en \
    --target-lang cs \
    --arch transformer_wmt_en_de_diet_rel \
    --encoder-normalize-before \
    --decoder-normalize-before \
    --share-all-embeddings \
    --optimizer adam \
    --adam-betas '(0.9, 0.997)' \
    --adam-eps 1e-9 \
    --lr 9.88e-4 \
    --lr-scheduler inverse_sqrt \
    --warmup-updates 8000 \
    --warmup-init-lr 1e-7 \
    --criterion label_smoothed_cross_entropy \
    --label-smoothing 0.1 \
    --dropout 0.1 \
    --attention-dropout 0.1 \
    --activation-dropout 0.1 \
    --weight-decay 0.0 \
    --max-tokens 4096 \
    --update-freq 7 \
    --max-update 100000 \
    --save-dir "$WORK/checkpoints/chen2021a/rel_scalar/wmt18_en_cs.en-cs$SUFFIX" \
    --seed "$SEED" \
    --no-epoch-checkpoints \
    --log-format simple \
    --log-interval 100 \
    --save-interval-updates 1000 \
    --keep-interval-updates 5 \
    --distributed-world-size 1
done

# 3. translate and score every cell: checkpoint_avg5.pt of each model, every test sentence, detokenized,
#    BLEU as the paper computed it, chrF, length buckets. For each cell (seed 1) it runs
#    (and, where a model cannot represent a source, the flags that skip it and say so):
#
#   Vaswani (input), EN-DE:
#   fairseq-generate "$DATA/wmt15_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/chen2021a/vaswani_input/wmt15_en_de.en-de/checkpoint_avg5.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/vaswani_input/en-de/generate.newstest2015" \
#     --num-workers 0
#
#   Vaswani (input), DE-EN:
#   fairseq-generate "$DATA/wmt15_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang de \
#     --target-lang en \
#     --path "$WORK/checkpoints/chen2021a/vaswani_input/wmt15_en_de.de-en/checkpoint_avg5.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/vaswani_input/de-en/generate.newstest2015" \
#     --num-workers 0
#
#   Vaswani (input), EN-CS:
#   fairseq-generate "$DATA/wmt18_en_cs/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang cs \
#     --path "$WORK/checkpoints/chen2021a/vaswani_input/wmt18_en_cs.en-cs/checkpoint_avg5.pt" \
#     --gen-subset test1 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/vaswani_input/en-cs/generate.newstest2015" \
#     --num-workers 0
#
#   Shaw, EN-DE:
#   fairseq-generate "$DATA/wmt15_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/chen2021a/shaw/wmt15_en_de.en-de/checkpoint_avg5.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/shaw/en-de/generate.newstest2015" \
#     --num-workers 0
#
#   Shaw, DE-EN:
#   fairseq-generate "$DATA/wmt15_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang de \
#     --target-lang en \
#     --path "$WORK/checkpoints/chen2021a/shaw/wmt15_en_de.de-en/checkpoint_avg5.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/shaw/de-en/generate.newstest2015" \
#     --num-workers 0
#
#   Shaw, EN-CS:
#   fairseq-generate "$DATA/wmt18_en_cs/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang cs \
#     --path "$WORK/checkpoints/chen2021a/shaw/wmt18_en_cs.en-cs/checkpoint_avg5.pt" \
#     --gen-subset test1 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/shaw/en-cs/generate.newstest2015" \
#     --num-workers 0
#
#   Raffel (T5), EN-DE:
#   fairseq-generate "$DATA/wmt15_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/chen2021a/raffel_t5/wmt15_en_de.en-de/checkpoint_avg5.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/raffel_t5/en-de/generate.newstest2015" \
#     --num-workers 0
#
#   Raffel (T5), DE-EN:
#   fairseq-generate "$DATA/wmt15_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang de \
#     --target-lang en \
#     --path "$WORK/checkpoints/chen2021a/raffel_t5/wmt15_en_de.de-en/checkpoint_avg5.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/raffel_t5/de-en/generate.newstest2015" \
#     --num-workers 0
#
#   Raffel (T5), EN-CS:
#   fairseq-generate "$DATA/wmt18_en_cs/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang cs \
#     --path "$WORK/checkpoints/chen2021a/raffel_t5/wmt18_en_cs.en-cs/checkpoint_avg5.pt" \
#     --gen-subset test1 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/raffel_t5/en-cs/generate.newstest2015" \
#     --num-workers 0
#
#   REL-SCALAR, EN-DE:
#   fairseq-generate "$DATA/wmt15_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang de \
#     --path "$WORK/checkpoints/chen2021a/rel_scalar/wmt15_en_de.en-de/checkpoint_avg5.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/rel_scalar/en-de/generate.newstest2015" \
#     --num-workers 0
#
#   REL-SCALAR, DE-EN:
#   fairseq-generate "$DATA/wmt15_en_de/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang de \
#     --target-lang en \
#     --path "$WORK/checkpoints/chen2021a/rel_scalar/wmt15_en_de.de-en/checkpoint_avg5.pt" \
#     --gen-subset test \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/rel_scalar/de-en/generate.newstest2015" \
#     --num-workers 0
#
#   REL-SCALAR, EN-CS:
#   fairseq-generate "$DATA/wmt18_en_cs/bin" \
#     --user-dir "$USER_DIR" \
#     --task translation_gnmt \
#     --source-lang en \
#     --target-lang cs \
#     --path "$WORK/checkpoints/chen2021a/rel_scalar/wmt18_en_cs.en-cs/checkpoint_avg5.pt" \
#     --gen-subset test1 \
#     --beam 10 \
#     --lenpen 0.6 \
#     --remove-bpe \
#     --required-batch-size-multiple 1 \
#     --max-tokens 8000 \
#     --results-path "$WORK/results/chen2021a/rel_scalar/en-cs/generate.newstest2015" \
#     --num-workers 0
posenc-reproduce evaluate --paper chen2021a --data "$DATA" --work "$WORK" --seeds "$SEEDS"

# 4. the table: paper / ours / diff, chrF, p against the baseline, length buckets
posenc-reproduce table --paper chen2021a --work "$WORK"
