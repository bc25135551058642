#!/usr/bin/env bash
# Four tiny posenc-compare runs on one GPU, one after another (--parallel 1) against all at
# once (--parallel 4): each command's wall time, and whether both give the same scores.
#   bash docs/benchmark-gpu-runs/parallel_runs.sh OUT [dry]   # dry: on the CPU, 20 updates
# Writes OUT/parallel-runs.txt and each command's output as OUT/parallel-N.log.
set -euo pipefail
out="${1:?usage: parallel_runs.sh OUT [dry]}"
dry="${2:-}"
work=$(mktemp -d)
updates=300 train=3000 device=()
if [ "$dry" = dry ]; then
  updates=20 train=300 device=(--cpu)
fi
python3 scripts/make_toy_corpus.py --seed 3 --train "$train" --valid 50 --test 50 \
  --out "$work/raw" > /dev/null
for n in 1 4; do
  start=$(date +%s.%N)
  python3 -m fairseq_posenc.tools.compare "$work/p$n" --data "$work/raw" -s en -t de \
    --encodings sinusoidal t5 alibi rope --max-update "$updates" --test test \
    --bpe-merges 500 --workers 4 --parallel "$n" "${device[@]}" > "$out/parallel-$n.log" 2>&1
  end=$(date +%s.%N)
  echo "parallel $n: $(python3 -c "print(round($end - $start, 1))") s" | tee -a "$out/parallel-runs.txt"
done
python3 - "$work" <<'PY' | tee -a "$out/parallel-runs.txt"
import json, sys
scores = [{(r["encoding"], r["seed"]): r["tests"]["test"]["bleu"]
           for r in json.load(open(f"{sys.argv[1]}/p{n}/report.json"))["runs"]} for n in (1, 4)]
print("scores equal:", scores[0] == scores[1], scores[0])
PY
