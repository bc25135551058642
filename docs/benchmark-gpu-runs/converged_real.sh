#!/usr/bin/env bash
# The README's headline on real text: posenc-compare --until-converged on the Debian gettext
# corpus (docs/real-corpus.md), six encodings trained at once on one GPU.
#   bash docs/benchmark-gpu-runs/converged_real.sh OUT SECONDS [dry]
# Needs data/gettext, built where the network is (the device has none) and carried to the
# device (`carry: ["data/gettext", ...]`, 5 MB without the downloads), from the Debian mirror
# of that machine's apt sources, or --mirror URL on one that is not Debian (a --cache that
# holds every package needs neither):
#   python scripts/make_gettext_corpus.py --out data/gettext --cache /tmp/gettext-debs
# The cap rises in steps (CAPS): a step that ends leaves a whole report (every run
# converged or at the step's cap, shown as such), the next raises the cap and continues only
# the runs that reached it; a step starts only while the time left (SECONDS from the start)
# holds twice the last step's time. Writes OUT/converged-real.txt (each step's command,
# wall time and where each run stopped), OUT/converged-real.log (posenc-compare's output)
# and the last finished step's report.md, report.json, validation.png and lengths.png.
# dry: on the CPU, 3,000 training pairs of the corpus, two encodings, tiny caps.
set -uo pipefail
out="${1:?usage: converged_real.sh OUT SECONDS [dry]}"
seconds="${2:?usage: converged_real.sh OUT SECONDS [dry]}"
dry="${3:-}"
start=$(date +%s)
data=data/gettext
[ -f "$data/train.en" ] || { echo "no $data/train.en: build it with scripts/make_gettext_corpus.py" >&2; exit 1; }
work=$(mktemp -d)
encodings=(sinusoidal t5 rope alibi shaw diet_rel)
caps=(${CAPS:-2000 4000 8000})
run=(--until-converged --patience "${PATIENCE:-5}" --validate-every "${VALIDATE_EVERY:-100}"
     --batch-tokens "${BATCH_TOKENS:-16384}" --parallel "${#encodings[@]}" --bpe-merges 4000
     --workers 8)
if [ "$dry" = dry ]; then
  mkdir -p "$work/raw"
  for l in en de; do
    head -3000 "$data/train.$l" > "$work/raw/train.$l"
    head -300 "$data/valid.$l" > "$work/raw/valid.$l"
    head -300 "$data/test.$l" > "$work/raw/test.$l"
  done
  data="$work/raw"
  encodings=(sinusoidal t5)
  caps=(20 40)
  run=(--until-converged --patience 2 --validate-every 10 --parallel 2 --bpe-merges 500
       --workers 2 --cpu)
fi
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed 's/^/device: /' | tee -a "$out/converged-real.txt"
last=0
for cap in "${caps[@]}"; do
  left=$((start + seconds - $(date +%s)))
  if [ "$left" -lt $((2 * last + 30)) ]; then
    echo "cap $cap: not started, ${left}s left, the last step took ${last}s" | tee -a "$out/converged-real.txt"
    break
  fi
  cmd=(python3 -m fairseq_posenc.tools.compare "$work/cmp" --data "$data" -s en -t de
       --encodings "${encodings[@]}" --test test --max-update "$cap" "${run[@]}")
  echo "cap $cap: ${cmd[*]}" | tee -a "$out/converged-real.txt"
  t0=$(date +%s)
  timeout --kill-after=10 $((left - 10)) "${cmd[@]}" >> "$out/converged-real.log" 2>&1
  code=$?
  last=$(( $(date +%s) - t0 ))
  echo "cap $cap: exit $code after ${last}s" | tee -a "$out/converged-real.txt"
  [ "$code" = 0 ] || break
  cp "$work/cmp/report.md" "$work/cmp/report.json" "$out/"
  cp "$work/cmp/report/validation.png" "$work/cmp/report/lengths.png" "$out/" 2>/dev/null
  python3 - "$work/cmp/report.json" <<'PY' | tee -a "$out/converged-real.txt"
import json, sys
report = json.load(open(sys.argv[1]))
for r in report["runs"]:
    test = r["tests"].get("test", {})
    print(f"  {r['encoding']:12s} {r['stopped']:9s} at {r['stopped_at']:>6}  best {r['best_update']} "
          f"({r['best_loss']})  BLEU {test.get('bleu')}  chrF {test.get('chrf')}")
done = all(r["stopped"] == "converged" for r in report["runs"])
print("  every run converged" if done else "  runs at the cap continue with the next cap")
sys.exit(3 if done else 0)
PY
  [ "${PIPESTATUS[0]}" = 3 ] && break
done
echo "total: $(( $(date +%s) - start ))s" | tee -a "$out/converged-real.txt"
