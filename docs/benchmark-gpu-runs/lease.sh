#!/usr/bin/env bash
# The GPU measurements, in parts that each fit one command of a 15-minute lease (at most
# 9 minutes, wheels installed included). A lent session runs the next part not yet in
# docs/benchmark-gpu-runs/README.md ("Parts"), first, before any other GPU work:
#
#   bash docs/benchmark-gpu-runs/lease.sh OUT PART      # from the repository root
#
#   1  the library route per call (cuDNN SDPA with a bias and dBias, library_routes.py);
#      training steps, fp16, 128 and 512 tokens, every encoding with a target, with and
#      without the recipes' --attention-dropout 0.1 (the README's training columns); the
#      GPU kernel suite in the time left
#   2  training steps of the fixed tables (alibi, sandwich) with torch's SDPA and its
#      summed mask against the fused kernel (fused_kernels.py train_fixed: it decides the
#      planner's choice); beam-10 translation, fp16, 128 tokens, every encoding registered
#      (the decoding steps' own path and their plans); the compiled kernels' accuracy
#   3  the encodings added since part 1 (NEW below, those registered): training steps,
#      fp16, with and without attention dropout (part 2 translates every encoding)
#   4  alibi's and sandwich's training steps at 128, 256 and 512 tokens as "auto" planned
#      them at 328adaa, and both routes at 256 tokens and with dropout
#      (fused_kernels.py train_fixed_more); bf16 training steps, every encoding with a
#      target; xl's and huang4's steps with dropout (one table per row) and the
#      translation of those four; first, the GPU suite (tests/core/kernels/test_gpu.py)
#   5  the GPU suite again (the planner's rules for fixed tables and causal ALiBi changed
#      after part 4); alibi's and sandwich's training steps as "auto" plans them now, at
#      128, 256 and 512 tokens, fp16 with and without attention dropout, and bf16; fox's
#      training steps, fp16, 128 and 512 tokens (its decoder on extra dimensions); four
#      tiny posenc-compare runs on the GPU at once against one after another
#      (parallel_runs.sh: --parallel 4 / 1)
#   6  the README's headline on real text: posenc-compare --until-converged on the Debian
#      gettext corpus, six encodings at once on the GPU, the cap raised in steps
#      (converged_real.sh; data/gettext carried: docs/real-corpus.md)
#   7  fire and cope against stock: FIRE below its threshold in the fused
#      distance kernel, CoPE's logits in blocks of queries. First the whole GPU suite
#      (tests/core/kernels/test_gpu.py, fire's and cope's tests among it: the kinds' hooks
#      replaced the attention's paths over kinds since part 5); then training steps, fp16,
#      128 and 512 tokens (64 x 512 at the default 32768 tokens), with the peak memory.
#      Targets: fire train <= 1.10 of stock at 128 and 512, peak memory <= 1.05; cope
#      trains 64 x 512 (no out of memory) with peak memory <= 2.0 of stock
#   8  path and stickbreaking (decoders only, torch's path: PaTH blockwise in torch,
#      stick-breaking's explicit weights): their decoder layers against stock's
#      (--layer-stacks decoder) and the whole models' training steps, fp16, 128 and 512
#      tokens, with peak memory
#
# Wheels: fairseq and its missing requirements, and nvidia-cudnn-frontend 1.16.0, from the
# ignored folder .whl (named in the device's `carry`); see README.md here, "Parts". Every
# stage writes under OUT as it ends, and a stage that would overrun the deadline
# (LEASE_SECONDS, default 530 s from the start) is cut short by `timeout`, its JSON left
# out. At most 8 files come back: each part writes at most 7.
# LEASE_DRY=1: a dry run on the CPU (tiny models, 12 tokens, one repetition, three
# encodings; the CUDA-only stages report their error), to check the script before a lease.
# Afterwards, here: merge the JSON (`posenc-benchmark --merge`, README.md here) and rebuild
# the GPU tables of README.md and docs/performance.md.
set -uo pipefail
out="${1:?usage: lease.sh OUT PART}"
part="${2:?usage: lease.sh OUT PART}"
start=$(date +%s)
deadline=$((start + ${LEASE_SECONDS:-530}))
mkdir -p "$out"
exec > >(tee -a "$out/lease.log") 2>&1
left() { echo $((deadline - $(date +%s))); }
stage() {  # stage NAME NEED CAP CMD...: run CMD if NEED seconds are left, for at most CAP
  local name=$1 need=$2 cap=$3
  shift 3
  local budget
  budget=$(left)
  if [ "$budget" -lt "$need" ]; then
    echo "== $name: skipped, ${budget}s left, needs about ${need}s"
    return 0
  fi
  echo "== $name: start at +$(( $(date +%s) - start ))s, ${budget}s left"
  budget=$((budget - 5))
  [ "$budget" -gt "$cap" ] && budget=$cap
  timeout --kill-after=5 "$budget" "$@"
  echo "== $name: exit $? at +$(( $(date +%s) - start ))s"
  local partial  # a finished run's checkpoint of its configurations
  for partial in "$out"/*.partial; do
    [ -f "${partial%.partial}" ] && rm -f "$partial"
  done
  return 0
}

if [ -d .whl ] && [ "${LEASE_DRY:-0}" != 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export PATH="/tmp/site/bin:$PATH"  # fairseq-train, as posenc-compare runs it
# cudnn-frontend loads the libcudnn that torch's CUDA build brings
cudnn_lib=$(python3 -c "import glob, os, sysconfig; print(' '.join(glob.glob(os.path.join(sysconfig.get_path('purelib'), 'nvidia/cu*/lib/libcudnn.so.9'))))" 2>/dev/null)
[ -n "$cudnn_lib" ] && export LD_LIBRARY_PATH="$(dirname ${cudnn_lib%% *})${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'triton', triton.__version__)"
echo "commit ${POSENC_GIT_COMMIT:-unknown}"

device=(--device cuda --level model --reps 8)
targeted=$(python3 -c "from fairseq_posenc.tools.benchmark.settings import CUDA_TARGETS; print(' '.join(CUDA_TARGETS))")
# the encodings added after part 1 ran (2026-11-26), those registered in this checkout
new=$(python3 -c "from fairseq_posenc.core.encodings import ENCODINGS
print(' '.join(n for n in 'kerple_log kerple_power sandwich fire cope xpos shape'.split() if n in ENCODINGS))")
lengths=(128 512)
fixed_lengths=(128 256 512)
half=float16 bf16=bfloat16
kernel_tests=(tests/core/kernels)
if [ "${LEASE_DRY:-0}" = 1 ]; then
  device=(--device cpu --level model --reps 1 --sizes tiny --batch 2 --translate-sentences 1)
  targeted="sinusoidal t5 xl"
  new="sandwich"
  lengths=(12)
  fixed_lengths=(12)
  half=float32 bf16=float32
  kernel_tests=(tests/core/kernels/test_gpu.py)
fi
bench=(python3 -m fairseq_posenc.tools.benchmark "${device[@]}")

case "$part" in
  1)
    stage library-routes 40 120 python3 docs/benchmark-gpu-runs/library_routes.py "$out"
    stage train 150 600 "${bench[@]}" --encodings $targeted --lengths "${lengths[@]}" --dtype "$half" \
      --calls train --out-json "$out/train-fp16.json" --out-md /tmp/train-fp16.md
    stage train-dropout 150 600 "${bench[@]}" --encodings $targeted --lengths "${lengths[@]}" \
      --dtype "$half" --calls train --attention-dropout 0.1 \
      --out-json "$out/train-fp16-dropout.json" --out-md /tmp/train-fp16-dropout.md
    workers=()
    python3 -c "import xdist" 2>/dev/null && workers=(-n 8)
    stage gpu-tests 60 600 python3 -m pytest "${kernel_tests[@]}" "${workers[@]}" -q -rfE \
      -p no:cacheprovider -o log_cli=false --junitxml="$out/gpu-tests.xml"
    ;;
  2)
    stage fixed-tables 60 120 python3 docs/benchmark-gpu-runs/fused_kernels.py "$out" \
      train_fixed
    stage translate 200 600 "${bench[@]}" --lengths "${lengths[0]}" --dtype "$half" \
      --calls translate --reps 5 --out-json "$out/translate-fp16.json" \
      --out-md /tmp/translate.md
    stage accuracy 40 90 bash -c "python3 docs/kernels/accuracy.py > '$out/accuracy-gpu.txt'"
    ;;
  3)
    stage train-new 100 600 "${bench[@]}" --encodings $new --lengths "${lengths[@]}" \
      --dtype "$half" --calls train --out-json "$out/train-new-fp16.json" \
      --out-md /tmp/train-new.md
    stage train-new-dropout 100 600 "${bench[@]}" --encodings $new \
      --lengths "${lengths[@]}" --dtype "$half" --calls train --attention-dropout 0.1 \
      --out-json "$out/train-new-fp16-dropout.json" --out-md /tmp/train-new-dropout.md
    ;;
  4)
    workers=()
    python3 -c "import xdist" 2>/dev/null && workers=(-n 8)
    stage gpu-tests 60 150 python3 -m pytest tests/core/kernels/test_gpu.py "${workers[@]}" -q -rfE \
      -p no:cacheprovider --junitxml="$out/gpu-tests.xml"
    stage fixed-rule 60 150 "${bench[@]}" --encodings alibi sandwich \
      --lengths "${fixed_lengths[@]}" --dtype "$half" --calls train \
      --out-json "$out/fixed-rule-fp16.json" --out-md /tmp/fixed-rule.md
    stage fixed-tables-more 60 150 python3 docs/benchmark-gpu-runs/fused_kernels.py "$out" \
      train_fixed_more
    stage train-bf16 150 300 "${bench[@]}" --encodings $targeted --lengths "${lengths[@]}" \
      --dtype "$bf16" --calls train --out-json "$out/train-bf16.json" \
      --out-md /tmp/train-bf16.md
    stage changed-since 60 150 bash -c "$(printf '%q ' "${bench[@]}") --encodings xl huang4 \
      --lengths ${lengths[*]} --dtype $half --calls train --attention-dropout 0.1 \
      --out-json '$out/rows-dropout-fp16.json' --out-md /tmp/rows-dropout.md && \
      $(printf '%q ' "${bench[@]}") --encodings alibi sandwich xl huang4 --lengths ${lengths[0]} \
      --dtype $half --calls translate --reps 5 --out-json '$out/translate-changed-fp16.json' \
      --out-md /tmp/translate-changed.md"
    ;;
  5)
    workers=()
    python3 -c "import xdist" 2>/dev/null && workers=(-n 8)
    stage gpu-tests 60 170 python3 -m pytest tests/core/kernels/test_gpu.py "${workers[@]}" -q -rfE \
      -p no:cacheprovider --junitxml="$out/gpu-tests.xml"
    stage fixed-rule 60 150 "${bench[@]}" --encodings alibi sandwich \
      --lengths "${fixed_lengths[@]}" --dtype "$half" "$bf16" --calls train \
      --out-json "$out/fixed-rule-auto.json" --out-md /tmp/fixed-rule.md
    stage fixed-rule-dropout 60 150 "${bench[@]}" --encodings alibi sandwich \
      --lengths "${fixed_lengths[@]}" --dtype "$half" --calls train --attention-dropout 0.1 \
      --out-json "$out/fixed-rule-auto-dropout.json" --out-md /tmp/fixed-rule-dropout.md
    stage train-fox 60 120 "${bench[@]}" --encodings fox --lengths "${lengths[@]}" \
      --dtype "$half" --calls train --out-json "$out/train-fox-fp16.json" \
      --out-md /tmp/train-fox.md
    dry=()
    [ "${LEASE_DRY:-0}" = 1 ] && dry=(dry)
    stage parallel-runs 90 240 bash docs/benchmark-gpu-runs/parallel_runs.sh "$out" "${dry[@]}"
    ;;
  6)
    dry=()
    [ "${LEASE_DRY:-0}" = 1 ] && dry=(dry)
    stage converged-real 120 560 bash docs/benchmark-gpu-runs/converged_real.sh "$out" \
      $(( $(left) - 20 )) "${dry[@]}"
    ;;
  7)
    workers=()
    python3 -c "import xdist" 2>/dev/null && workers=(-n 8)
    stage gpu-tests 60 200 python3 -m pytest tests/core/kernels/test_gpu.py "${workers[@]}" -q -rfE \
      -p no:cacheprovider --junitxml="$out/gpu-tests.xml"
    stage fire-cope-train 100 300 "${bench[@]}" --encodings fire cope --lengths "${lengths[@]}" \
      --dtype "$half" --calls train --out-json "$out/train-fire-cope-fp16.json" \
      --out-md "$out/train-fire-cope-fp16.md"
    ;;
  8)
    stage path-sb-layers 100 200 "${bench[@]}" --encodings path stickbreaking \
      --lengths "${lengths[@]}" --dtype "$half" --calls train --level layer rest \
      --layer-stacks decoder --out-json "$out/layers-path-sb-fp16.json" \
      --out-md "$out/layers-path-sb-fp16.md"
    stage path-sb-train 100 250 "${bench[@]}" --encodings path stickbreaking \
      --lengths "${lengths[@]}" --dtype "$half" --calls train --level model \
      --out-json "$out/train-path-sb-fp16.json" --out-md /tmp/train-path-sb.md
    ;;
  *)
    echo "unknown part '$part': 1 to 8" >&2
    exit 2
    ;;
esac
echo "== done at +$(( $(date +%s) - start ))s"
