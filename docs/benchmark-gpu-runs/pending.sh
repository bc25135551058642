#!/usr/bin/env bash
# The GPU measurements pending since the last GPU session (2026-11-23): the code since then
# has attention dropout inside the fused kernels, lighter decoding steps, and xl's and
# huang4's encoder tables made in bands, none of them timed on a GPU. One
# stage per 10-minute command of the lent H100, from the repository root:
#
#   bash docs/benchmark-gpu-runs/pending.sh OUT STAGE [WAY ...]
#
#   tests      the GPU suite (README "Testing"), then the compiled kernels' accuracy
#              (docs/kernels/accuracy-gpu.txt)
#   dropout    training steps with the recipes' --attention-dropout 0.1, fp16, 128 and 512
#              tokens, for the encodings the fused kernels run (their dropout is new)
#   translate  beam-10 translation, fp16, 128 tokens, every encoding (the decoding steps'
#              own path is new since the table's translation column, and each step now
#              plans its call: about 1 us of host time per layer on CPU, attention_plan.py)
#   rows       xl's and huang4's kernel per call, fp16 and bf16, with their rows made as
#              one tensor and in bands (rows_tables.py)
#   rows-train [WAY ...]  their training steps, fp16, each way given (default: both):
#              `bands` (the default since 2026-11-23: the encoder's tables made in bands of
#              kernels.distance.rows.ROW_BAND = 16 rows, T + 15 columns) and `one-table`
#              (ROW_BAND = 0: 2T - 1 columns, as runs 8-12 measured). Keep the faster as
#              the default; if one-table wins, set ROW_BAND = 0
#
# The device has torch, triton, numpy, sacrebleu and sentencepiece; fairseq and the rest
# come as wheels (the developers' guide lists them; pytest-xdist and execnet for `tests`),
# installed into a temporary directory on PYTHONPATH before this script runs. Outputs go
# to OUT: logs, JSON and Markdown reports. Afterwards, here: `posenc-benchmark --merge`
# the JSON into docs/benchmark-gpu.{md,json} and update the GPU tables of docs/performance.md and the README.
set -euo pipefail
out="${1:?usage: pending.sh OUT STAGE}"
stage="${2:?usage: pending.sh OUT STAGE}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
bench=(python3 -m fairseq_posenc.benchmark --device cuda --level model)
kernels=(t5 diet_rel at5 tupe_r alibi kerple_log kerple_power sandwich huang1 huang2 shaw xl huang4)
case "$stage" in
  tests)
    workers=()  # pytest-xdist, where its wheel came along
    python3 -c "import xdist" 2>/dev/null && workers=(-n 8)
    python3 -m pytest tests/kernels "${workers[@]}" -q -rfE -p no:cacheprovider 2>&1 |
      tee "$out/gpu-tests.log" | tail -20 || echo "the GPU suite failed: $out/gpu-tests.log"
    python3 docs/kernels/accuracy.py > "$out/accuracy-gpu.txt"  # the checkout is on PYTHONPATH
    ;;
  dropout)
    "${bench[@]}" --encodings "${kernels[@]}" --lengths 128 512 --dtype float16 \
        --calls train --reps 8 --attention-dropout 0.1 \
        --out-json "$out/dropout-train.json" --out-md "$out/dropout-train.md" 2>&1 |
      tail -40
    ;;
  translate)
    "${bench[@]}" --lengths 128 --dtype float16 --calls translate --reps 5 \
        --out-json "$out/translate.json" --out-md "$out/translate.md" 2>&1 | tail -40
    ;;
  rows)
    python3 docs/benchmark-gpu-runs/rows_tables.py "$out/rows-tables.json" 2>&1 | tail -40
    ;;
  rows-train)
    ways=("${@:3}")
    [ ${#ways[@]} -gt 0 ] || ways=(bands one-table)
    for way in "${ways[@]}"; do
      case "$way" in
        bands) set_way="" ;;
        one-table) set_way="rows.ROW_BAND = 0" ;;
        *) echo "unknown way '$way': bands or one-table" >&2; exit 2 ;;
      esac
      python3 -c "import sys; from fairseq_posenc.kernels.distance import rows; $set_way
from fairseq_posenc.benchmark import main; main(sys.argv[1:])" \
          --device cuda --level model --encodings xl huang4 --lengths 128 512 \
          --dtype float16 --calls train --reps 8 --out-json "$out/rows-train-$way.json" \
          --out-md "$out/rows-train-$way.md" 2>&1 | tail -12
    done
    ;;
  *)
    echo "unknown stage '$stage': tests, dropout, translate, rows or rows-train" >&2
    exit 2
    ;;
esac
