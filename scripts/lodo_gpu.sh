#!/usr/bin/env bash
# The leave-one-dataset-out campaign of issue 55 (docs/lodo.md) in ONE call
# of a project GPU machine (../shared/gpu/README.md: Python 3.12 + jax 0.11, no network): the
# five held-out sets side by side, one process each (bench/lodo.py: every recipe of RECIPES
# trained on the other four, its best validation epoch exported, the held-out test split scored
# under strict and tolerance_thin_gt), then the table. The data is scripts/pack_roads_data.py's
# pack (what a call can carry): its train subsets and its test parts, so this campaign is its
# own yardstick, comparable within itself (recipes, budgets), not cell by cell with the CPU
# campaign on the full copies (scripts/lodo.sh).
#
# Prepare here (once per checkout; .whl and .data are in .gitignore):
#   bash ../shared/gpu/fetch-wheels.sh; python scripts/pack_roads_data.py
# Try it here first (minutes: the `smoke` budget on a tiny pack made from the copies here):
#   TINY=1 bash scripts/lodo_gpu.sh
# On the GPU, one call:
#   device run: command="bash scripts/lodo_gpu.sh", carry=[".whl", ".data"], timeout_s=600
# What comes back in $OUT: log.txt, lodo_gpu.md / .json (the table, bench/lodo.py --out),
# lodo_gpu_runs.tar.gz (every fold's records: epochs, held-out eval.json, logs; no checkpoints)
# and the model files of RETURN_MODELS's folds, packed after the folds and on the way out.
# Two phases, the five processes side by side in each: training, cut at TRAIN_MINUTES (SIGTERM:
# the checkpoint is saved, the epochs scored stay); then each fold exported from its best epoch
# so far (bench/lodo.py --accept_cut: the table names a fold cut short) and scored, cut at
# FINISH_MINUTES. Environment knobs: RECIPES ('base photometric'), BUDGET (long; gpu: the
# GPU-made roads-unet's widths and batch for 6,000 steps; TINY: smoke), HELD_OUT (the five),
# TRAIN_MINUTES=5, FINISH_MINUTES=2.5, FINISH_STAGES=export,score (bench/lodo.py --stages; add
# fp,photo for the false positives and photo thresholds), DTYPE=bfloat16 (the exported files),
# RETURN_MODELS (held-out sets whose fold files come back as lodo_<recipe>_<budget>_<set>
# .safetensors, e.g. 'deepcrack crack500 gaps384', whose test parts the pack subsamples: at most
# 4 files of ~15.5 MB at the gpu budget), MEM_FRACTION=0.15 (each process's share of the GPU's
# memory), EVAL_WORKERS=1 (bench/lodo.py --eval_workers: each fold's validation metrics counted
# while its next epoch trains, the same records; on 30 Nov 2026 five folds scoring in their
# loops at once took ~60 s an epoch; the gain is not yet measured on a GPU), DATA=.data/roads
# (the pack), OUT=<the device tool's output folder>,
# WORK=/tmp/lodo_gpu, CRACKFOREST, PUBLIC (TINY: the copies the tiny pack is made from),
# TEST_TIME (bench/lodo.py --test_time, e.g. 2 or jpeg:2: rows of the same fold files at
# test-time scales; empty by default).
# RELEASE=1 (RECIPES one recipe): the release run of that recipe (scripts/release_roads_gpu.sh
# with RECIPE, configs/release/roads_unet.py:RECIPE: the folds' training with all five
# members) side by side with the folds, under the same TRAIN_MINUTES, its file and records
# back in $OUT/release/ (its stages prepare, train, export, score; then here on the CPU
# `STAGES="finish ..." RECIPE=... FILE=... bash scripts/release_roads_gpu.sh`). With it, at
# most one RETURN_MODELS (a call brings back 8 files).
# One roads-unet run alone went 54 steps/s on an H200 at the gpu budget's widths and batch,
# with its loader on the host; five side by side share the GPU and 16 cores: read the steps/s
# of lodo_*.log in the records.
set -euo pipefail
cd "$(dirname "$0")/.."
# --help prints the comment above; the settings are environment variables, not arguments.
. scripts/script_help.sh
script_help "usage: [RECIPES='base photometric' BUDGET=long TINY=1 TRAIN_MINUTES=5 FINISH_MINUTES=2.5 RETURN_MODELS=... DATA=...] bash scripts/lodo_gpu.sh" "$@"
RECIPES=${RECIPES:-base photometric}
OUT=${OUT:-/tmp/lodo_gpu_out}
WORK=${WORK:-/tmp/lodo_gpu}
TRAIN_MINUTES=${TRAIN_MINUTES:-5}
FINISH_MINUTES=${FINISH_MINUTES:-2.5}
FINISH_STAGES=${FINISH_STAGES:-export,score}
DTYPE=${DTYPE:-bfloat16}
RETURN_MODELS=${RETURN_MODELS:-}
EVAL_WORKERS=${EVAL_WORKERS:-1}
MEM_FRACTION=${MEM_FRACTION:-0.15}
HELD_OUT=${HELD_OUT:-}  # empty: configs/lodo.py's MEMBERS, read once crackjax imports (below)
if [ "${TINY:-0}" = 1 ]; then
  BUDGET=${BUDGET:-smoke}
  DATA=${DATA:-$WORK/tiny_pack}
else
  BUDGET=${BUDGET:-long}
  DATA=${DATA:-.data/roads}
fi
export TFDS_DATA_DIR=${TFDS_DATA_DIR:-$WORK/tfds}
mkdir -p "$OUT" "$WORK"
# The folds' records (not their checkpoints or model files, too large to come back).
pack_records() {
  (cd "$WORK" && find . -path ./tfds -prune -o -path ./tiny_pack -prune -o -name checkpoints -prune \
    -o -type f \( -name '*.json' -o -name '*.jsonl' -o -name '*.csv' -o -name '*.md' -o -name '*.log' \) \
    -print0 | tar -czf "$OUT/lodo_gpu_runs.tar.gz" --null -T -) || true
}
trap pack_records EXIT
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "lodo_gpu.sh: recipes '$RECIPES', budget $BUDGET, held out '${HELD_OUT:-the members of configs/lodo.py}', data $DATA, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u '+%F %T UTC')"
T0=$(date +%s)
clock() { echo "[$1: $(($(date +%s) - T0)) s]"; }

gpu_python
[ -n "$HELD_OUT" ] || HELD_OUT=$(python3 -c "from crackjax.configs import lodo; print(' '.join(lodo.MEMBERS))")
if [ "${TINY:-0}" = 1 ] && [ ! -d "$DATA" ]; then
  python3 scripts/pack_roads_data.py --tiny --out="$DATA" \
    --crackforest="${CRACKFOREST:-../shared/datasets/crackforest}" --public="${PUBLIC:-/work/data/Datasets}"
fi
DATA=$(cd "$DATA" && pwd)

# Prepared once, before the folds: five processes preparing one TFDS folder at once would race.
DATA="$DATA" BUDGET="$BUDGET" python3 - <<'EOF'
import os
import runpy

from crackjax.configs import lodo

prepare = runpy.run_path('scripts/pack_roads_data.py')['prepare']
# Two folds' configs hold every member (each leaves one out), with the budget's split names.
for held_out in lodo.MEMBERS[:2]:
  config = lodo.get_config(f'{held_out},base,{os.environ["BUDGET"]}')
  prepare(config.data, os.environ['DATA'], os.environ['TFDS_DATA_DIR'])
EOF
clock prepare

recipes=$(echo $RECIPES | tr ' ' ',')
COMMON=(--recipes="$recipes" --budget="$BUDGET" --work="$WORK" --crackforest="$DATA/crackforest"
  --public="$DATA/Datasets" --data_dir="$TFDS_DATA_DIR" --workers=2 --test_time="${TEST_TIME:-}"
  --eval_workers="$EVAL_WORKERS")
# Each held-out set one process, all side by side, under a time limit; `side_by_side PHASE` waits
# for them and names each one's exit code (124: the limit's SIGTERM).
pids=()
side_by_side() {  # PHASE LIMIT_S bench/lodo.py flags...
  local phase=$1 limit=$2
  shift 2
  pids=()
  for held_out in $HELD_OUT; do
    XLA_PYTHON_CLIENT_MEM_FRACTION=$MEM_FRACTION PYTHONUNBUFFERED=1 timeout --signal=TERM \
      --kill-after=30 "$limit" python3 bench/lodo.py "${COMMON[@]}" --held_out="$held_out" "$@" \
      >> "$WORK/lodo_$held_out.log" 2>&1 &
    pids+=("$held_out:$!")
  done
  for entry in "${pids[@]}"; do
    set +e
    wait "${entry#*:}"
    code=$?
    set -e
    echo "$phase, held out ${entry%%:*}: exit code $code ($(grep --count '^+ ' "$WORK/lodo_${entry%%:*}.log") commands); $(clock "$phase")"
    [ "$code" = 0 ] || tail -n 5 "$WORK/lodo_${entry%%:*}.log"
  done
}
release_pid=
if [ "${RELEASE:-0}" = 1 ]; then
  [[ $RECIPES != *" "* ]] || { echo "RELEASE=1 takes one recipe in RECIPES, got '$RECIPES'."; exit 2; }
  # Its own WORK, TFDS folder and OUT subfolder; its output in its own log.txt there.
  OUT="$OUT/release" WORK="$WORK/release" TFDS_DATA_DIR="$WORK/release/tfds" RECIPE="$RECIPES" \
    TRAIN_MINUTES="$TRAIN_MINUTES" DATA="$DATA" XLA_PYTHON_CLIENT_MEM_FRACTION=$MEM_FRACTION \
    STAGES="prepare train export score" bash scripts/release_roads_gpu.sh > /dev/null 2>&1 &
  release_pid=$!
fi
# Training first, cut at TRAIN_MINUTES (SIGTERM: each training saves its checkpoint and the
# epochs scored by then stay); then every fold exported from its best epoch so far (the table
# names a fold cut short) and scored, so a call's limit never loses a trained fold.
side_by_side train "$(python3 -c "print(int(60 * $TRAIN_MINUTES))")" --stages=train
side_by_side finish "$(python3 -c "print(int(60 * $FINISH_MINUTES))")" --stages="$FINISH_STAGES" --accept_cut --dtype="$DTYPE"
if [ -n "$release_pid" ]; then
  set +e
  wait "$release_pid"
  code=$?
  set -e
  echo "release run ($RECIPES): exit code $code; $(clock release) (its log: release/log.txt)"
  tail -n 3 "$OUT/release/log.txt" || true
fi
# The model files asked back (each at most 16 MiB: bfloat16 at the gpu budget's widths is
# ~15.5 MB), to score the full test splits where the copies are.
for held_out in $RETURN_MODELS; do
  for recipe in $RECIPES; do
    f=$WORK/${recipe}_$BUDGET/$held_out/model.safetensors
    [ -f "$f" ] && cp "$f" "$OUT/lodo_${recipe}_${BUDGET}_$held_out.safetensors"
  done
done
pack_records
held=$(echo $HELD_OUT | tr ' ' ',')
python3 bench/lodo.py "${COMMON[@]}" --held_out="$held" --stages=none --out="$OUT/lodo_gpu"
clock table
