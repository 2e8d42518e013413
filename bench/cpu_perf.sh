#!/usr/bin/env bash
# The CPU measurements of docs/performance.md (issues 45 and 49) in one run, on an idle machine.
#
#   bash bench/cpu_perf.sh                       # all stages, ~15 min on 2 cores
#   STAGES="step_f32 step_bf16" bash bench/cpu_perf.sh
#   TINY=1 bash bench/cpu_perf.sh                # a check of the script: tiny U-Net, few steps,
#                                                # 20 photos (~3 min)
#
# Stages, each under `timeout`, each log in $RES/<stage>.log (and .json where the bench writes
# one); `uptime` before and after every stage goes to $RES/summary.txt, so a loaded machine
# shows:
#   step_f32       bench/train_step.py, U-Net 16...256 (configs/crackforest_exp.py:cpu), 320x480,
#                  batch 2, float32: 15 steps a side in 5 interleaved blocks against PyTorch
#                  eager (when torch imports), then 3 profiled steps: op time by kind of work
#   step_bf16      the same in bfloat16 compute (PyTorch: bf16 autocast, channels_last),
#                  6 steps in 3 blocks
#   step_paper     the paper's widths 64...1024, float32, 4 steps in 2 blocks
#   evaluate_1000  bench/evaluate_folder.py: crackjax-evaluate --folder on 1,000 CrackForest
#                  photos (links), strict + tolerance_thin_gt
# Settings: RES (default /tmp/cpu_perf, emptied first), PYTHON (default python3),
# CRACKFOREST_DIR (default ../shared/datasets/crackforest).
set -u
. "$(dirname "$0")/../scripts/script_help.sh"
script_help "usage: [STAGES=... TINY=1 RES=DIR] bash bench/cpu_perf.sh" "$@"

REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
PY=${PYTHON:-python3}
TINY=${TINY:-0}
RES=${RES:-/tmp/cpu_perf}
CF=${CRACKFOREST_DIR:-$REPO/../shared/datasets/crackforest}
STAGES=${STAGES:-step_f32 step_bf16 step_paper evaluate_1000}
rm -rf "$RES" && mkdir -p "$RES"

if [ "$TINY" = 1 ]; then
  SMALL=(--config.model.widths='(4, 8, 16, 32, 64)' --hw=32,48)
  PAPER=(--config.model.widths='(8, 16, 32, 64, 128)' --hw=32,48)
  STEPS_F32=(--steps=4 --blocks=2 --profile_steps=1)
  STEPS_BF16=(--steps=2 --blocks=2)
  STEPS_PAPER=(--steps=2 --blocks=2)
  NS=20
else
  SMALL=(--hw=320,480)
  PAPER=(--config.model.widths='(64, 128, 256, 512, 1024)' --hw=320,480)
  STEPS_F32=(--steps=15 --blocks=5 --profile_steps=3)
  STEPS_BF16=(--steps=6 --blocks=3)
  STEPS_PAPER=(--steps=4 --blocks=2)
  NS=1000
fi
BENCH=("$PY" bench/train_step.py --config=configs/crackforest_exp.py:cpu --batch=2)

{
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(git status --porcelain 2>/dev/null | grep -q . && echo '(uncommitted changes)')"
  echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
  lscpu 2>/dev/null | grep -E 'Model name|^CPU\(s\)|Flags' | sed 's/Flags:.*\(avx512_bf16\).*/Flags: ... \1 .../'
  "$PY" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__)'
  "$PY" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo 'torch: not importable'
} > "$RES/env.txt" 2>&1

stage() {  # name, timeout seconds, command...
  local name=$1 limit=$2
  shift 2
  case " $STAGES " in *" $name "*) ;; *) return 0 ;; esac
  echo "$name: before: $(uptime)" >> "$RES/summary.txt"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$RES/$name.log" 2>&1
  local rc=$?
  echo "$name: rc $rc, $((SECONDS - t0)) s; after: $(uptime)" >> "$RES/summary.txt"
  echo "$name: rc $rc, $((SECONDS - t0)) s"
}

stage step_f32 600 "${BENCH[@]}" "${SMALL[@]}" "${STEPS_F32[@]}" --json="$RES/step_f32.json"
stage step_bf16 600 "${BENCH[@]}" "${SMALL[@]}" --config.model.dtype=bfloat16 "${STEPS_BF16[@]}" \
  --json="$RES/step_bf16.json"
stage step_paper 900 "${BENCH[@]}" "${PAPER[@]}" "${STEPS_PAPER[@]}" --json="$RES/step_paper.json"
stage evaluate_1000 900 "$PY" bench/evaluate_folder.py --ns="$NS" --crackforest="$CF" \
  --json="$RES/evaluate_1000.json"
cat "$RES/summary.txt"
