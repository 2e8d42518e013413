#!/usr/bin/env bash
# Every GPU measurement of issue 13 in one call, packed into one archive as it goes.
#
# On a device machine (H100/H200, the project's image; ../shared/gpu/README.md), from the repo
# root, with the wheels the image lacks in ./.whl (../shared/gpu/fetch-wheels.sh) and the raw
# CrackForest archive in ./.data/crackforest (both git-ignored, e.g. via .git/info/exclude,
# and named in the run's carry):
#
#   bash bench/gpu_perf.sh                      # all stages, in priority order, ~9 min budget
#   STAGES="loop_vs_step fps_f32" bash bench/gpu_perf.sh   # only these
#   TINY=1 bash bench/gpu_perf.sh               # CPU check: tiny U-Net, a few steps (~5 min
#                                               # on 2 cores; PyTorch stages say if no torch)
#
# Stages (default order = priority; each runs under `timeout`, and a stage whose expected time
# no longer fits in BUDGET_S is skipped and says so in summary.txt):
#   setup          versions, nvidia-smi, wheels (always runs)
#   prepare_data   CrackForest into the TFDS folder the bench stages share (always runs; the
#                  archive: CRACKFOREST_DIR, else ./.data/crackforest, else
#                  ../shared/datasets/crackforest)
#   bench_b8_bf16  bench/train_step.py batch 8 bf16 + PyTorch eager and torch.compile, same GPU;
#                  --fresh_memory: the step's steady-state device peak, read in a fresh process
#                  that loads the step from the compilation cache (no compiling, no autotuning);
#                  --profile_steps: 5 more steps traced, the device time by kind of kernel and
#                  the top kernels in the log (bench/trace_summary.py), the trace's Perfetto
#                  file beside it (every bench_* stage)
#   fps_bf16       python -m crackjax.paper.complexity, bf16, inference FPS batch 1 and 8
#   table_row      Table I row wce_exp_0.75_e10 (paper setting, f32, 10 epochs): launch.py to
#                  eval.json with breakdown (bench/launch_breakdown.py; no compilation cache)
#   bench_b2_f32   batch 2 f32 + PyTorch eager and torch.compile
#   loop_vs_step   bench/loop_vs_step.py: launch.py's loop vs the bench step, batch 2 f32,
#                  with a profile of 20 loop steps (device idle time)
#   bench_b2_bf16  batch 2 bf16 + PyTorch eager and torch.compile
#   fps_f32        crackjax.paper.complexity, f32, FPS batch 1 and 8
#   predict_speed  bench/predict_speed.py (issue 11): the paper's U-Net (random parameters,
#                  f32) on 3000x4000 photos in tiles of 1024 / 2048 at overlap 0 and 0.125,
#                  against whole 320x480 images
#
# Results: $OUT/gpu_perf.tar.gz (OUT defaults to /tmp/gpu_perf_out) holding gpu_perf/:
# summary.txt (stage, exit status, seconds), <stage>.log (stdout+stderr), <stage>.json,
# env.txt, the table row's metrics.jsonl / eval.json / launch log, and the loop's trace.
# Other settings: RES (results folder, default /tmp/gpu_perf), WORK (scratch, default
# /tmp/gpu_perf_work; both emptied first), CRACKFOREST_DIR, PYTHON (default python3).
set -u
# --help prints the comment above; the settings are environment variables, not arguments.
. "$(dirname "$0")/../scripts/script_help.sh"
script_help "usage: [STAGES=... TINY=1 BUDGET_S=... OUT=DIR] bash bench/gpu_perf.sh" "$@"

REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
OUT=${OUT:-/tmp/gpu_perf_out}
PY=${PYTHON:-python3}
TINY=${TINY:-0}
RES=${RES:-/tmp/gpu_perf}
WORK=${WORK:-/tmp/gpu_perf_work}
RAW=${CRACKFOREST_DIR:-$REPO/.data/crackforest}
# An explicit CRACKFOREST_DIR is used as given (a wrong one fails prepare_data, naming it).
if [ -z "${CRACKFOREST_DIR:-}" ] && [ ! -d "$RAW" ] && [ -d "$REPO/../shared/datasets/crackforest" ]; then
  RAW=$REPO/../shared/datasets/crackforest
fi
ALL_STAGES="setup prepare_data bench_b8_bf16 fps_bf16 table_row bench_b2_f32 loop_vs_step bench_b2_bf16 fps_f32 predict_speed"
STAGES=${STAGES:-$ALL_STAGES}
case " $STAGES " in *" prepare_data "*) ;; *) STAGES="prepare_data $STAGES" ;; esac

RES=$RES/gpu_perf
rm -rf "$RES" "$WORK"
mkdir -p "$RES" "$WORK" "$OUT"

if [ "$TINY" = 1 ]; then
  # Minutes on a CPU: the tiny U-Net at 64x96, a few steps; torch.compile with the aot_eager
  # backend (no kernel generation); the smoke variant of the table row.
  MODEL=("--config.model.widths=(4, 8, 16, 32, 64)")
  HW=64,96
  STEPS=(--steps=2 --warmup=1)
  TORCH=(--torch_device=auto --torch_compile --torch_compile_backend=aot_eager)
  FPS=(--hw=64,96 --repeats=2)
  ROW=configs/table1.py:wce_exp_0.75_e10,smoke
  ROW_EXTRA=("--config.data.input_size=(64, 96)" "--config.eval.protocols=('strict',)")
  LOOP=(--config=configs/crackforest_exp.py:smoke "--config.data.input_size=(64, 96)"
    --config.steps_per_epoch=6 --config.num_epochs=2 --config.log_every_steps=2
    --bench_steps=2 --bench_after --host_batches=3 --profile_steps=4,8)
  PREDICT=(--large_hw=600,800 --num_large=1 --num_small=2 --tile_size=256 --overlap=0,0.125)
  PROFILE_STEPS=1
  SCALE=20  # expected stage times are divided by this
  BUDGET_S=${BUDGET_S:-1800}
else
  MODEL=()
  HW=320,480
  STEPS=(--steps=20 --warmup=3)
  TORCH=(--torch_device=cuda --torch_compile)
  FPS=(--repeats=50)
  ROW=configs/table1.py:wce_exp_0.75_e10
  ROW_EXTRA=()
  LOOP=(--config=configs/crackforest_exp.py --config.steps_per_epoch=300 --config.num_epochs=1
    --bench_steps=20 --bench_after --host_batches=50 --profile_steps=100,120)
  PREDICT=(--num_large=3 --num_small=60 --tile_size=1024,2048 --overlap=0,0.125)
  PROFILE_STEPS=5
  SCALE=1
  BUDGET_S=${BUDGET_S:-560}
fi
TFDS=$WORK/tfds
START=$(date +%s)
DEADLINE=$((START + BUDGET_S))
DATA=(--config.data.data_dir="$TFDS" --config.data.manual_dir="$RAW")

pack() {
  tar -C "$(dirname "$RES")" -czf "$OUT/gpu_perf.tar.gz.part" gpu_perf \
    && mv "$OUT/gpu_perf.tar.gz.part" "$OUT/gpu_perf.tar.gz"
}

# stage NAME EXPECTED_S LIMIT_S COMMAND...: runs COMMAND under timeout if NAME is selected and
# EXPECTED_S still fits before the deadline; logs to $RES/NAME.log; packs the archive after.
stage() {
  local name=$1 expected=$(($2 / SCALE)) limit=$3
  shift 3
  case " $STAGES " in *" $name "*) ;; *) return 0 ;; esac
  local now left t0 rc
  now=$(date +%s)
  left=$((DEADLINE - now))
  if [ "$left" -lt "$expected" ]; then
    echo "$name skipped: ${left}s left of the budget, expects ${expected}s" | tee -a "$RES/summary.txt"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name (limit ${limit}s) ==="
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$RES/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc $(($(date +%s) - t0))s" | tee -a "$RES/summary.txt"
  tail -n 40 "$RES/$name.log"
  pack
}

setup() {
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null) $(git status --short 2>/dev/null | wc -l) changed files"
    echo "tiny: $TINY, budget: ${BUDGET_S}s, stages: $STAGES"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 || true
    nproc
  } >"$RES/env.txt"
  if [ -d .whl ] && ! "$PY" -c 'import tensorflow_datasets, grain, ml_collections' 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
  fi
  export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
  "$PY" - >>"$RES/env.txt" 2>&1 <<'EOF'
import importlib, platform
print('python', platform.python_version())
for m in ('jax', 'jaxlib', 'flax', 'optax', 'numpy', 'torch', 'tensorflow_datasets', 'grain'):
  try:
    print(m, importlib.import_module(m).__version__)
  except Exception as e:  # noqa: BLE001
    print(m, 'n/a', e)
import jax
print('devices', jax.devices())
EOF
  # The bench stages share a compilation cache; the table row does not use it (a user's first
  # launch compiles from scratch).
  export JAX_COMPILATION_CACHE_DIR=$WORK/jax_cache
  [ -d "$RAW" ] || { echo "no CrackForest archive at $RAW (set CRACKFOREST_DIR)"; return 1; }
}

# setup runs in this shell (it exports the environment), timed like the stages.
t0=$(date +%s)
setup >"$RES/setup.log" 2>&1
echo "setup rc=$? $(($(date +%s) - t0))s" | tee -a "$RES/summary.txt"
cat "$RES/env.txt"
# The table row's own preparation code (bench/launch_breakdown.py: one place to keep current;
# absent data exits with one line naming it).
stage prepare_data 30 120 "$PY" -c "
import runpy
exec(runpy.run_path('bench/launch_breakdown.py')['PREPARE_CODE'])
" --config=configs/crackforest_exp.py "${DATA[@]}"

bench() {  # bench NAME DTYPE BATCH
  local name=$1 dtype=$2 batch=$3
  # JAX keeps this fraction of the GPU while the bench's PyTorch processes run: leave them
  # the rest.
  stage "$name" 150 240 env XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 "$PY" bench/train_step.py --config=configs/crackforest_exp.py \
    ${MODEL[@]+"${MODEL[@]}"} --config.model.dtype="$dtype" --hw=$HW --batch="$batch" "${STEPS[@]}" \
    "${TORCH[@]}" --fresh_memory --profile_steps="$PROFILE_STEPS" --profile_dir="$WORK/${name}_profile" \
    --json="$RES/$name.json"
  # The trace's Perfetto file comes back for a second look (the kernel table is in the log).
  find "$WORK/${name}_profile" -name 'perfetto_trace.json.gz' -size -8192k \
    -exec cp {} "$RES/${name}.perfetto_trace.json.gz" \; 2>/dev/null
  pack
}

fps() {  # fps NAME DTYPE
  local name=$1 dtype=$2
  stage "$name" 60 120 "$PY" -m crackjax.paper.complexity --config=configs/crackforest_exp.py \
    ${MODEL[@]+"${MODEL[@]}"} --config.model.dtype="$dtype" --fps_batch=8 "${FPS[@]}" --json="$RES/$name.json"
}

table_row() {
  stage table_row 100 240 env -u JAX_COMPILATION_CACHE_DIR "$PY" bench/launch_breakdown.py \
    --workdir="$WORK/row" --json="$RES/table_row.json" --prepare_first \
    --config="$ROW" --config.data.data_dir="$WORK/tfds_row" --config.data.manual_dir="$RAW" \
    ${ROW_EXTRA[@]+"${ROW_EXTRA[@]}"}
  for f in metrics.jsonl eval.json config.json; do
    [ -f "$WORK/row/$f" ] && cp "$WORK/row/$f" "$RES/table_row.$f"
  done
  [ -f "$WORK/row.launch.log" ] && cp "$WORK/row.launch.log" "$RES/table_row.launch.log"
  pack
}

loop_vs_step() {
  stage loop_vs_step 90 180 "$PY" bench/loop_vs_step.py "${LOOP[@]}" ${MODEL[@]+"${MODEL[@]}"} "${DATA[@]}" \
    --workdir="$WORK/loop" --profile_dir="$RES/loop_profile" --json="$RES/loop_vs_step.json"
  find "$RES/loop_profile" -name '*.xplane.pb' -size +20M -delete 2>/dev/null
  pack
}

predict_speed() {
  stage predict_speed 120 240 "$PY" bench/predict_speed.py --config=configs/crackforest_exp.py \
    ${MODEL[@]+"${MODEL[@]}"} "${PREDICT[@]}" --json="$RES/predict_speed.json"
  pack
}

for s in $STAGES; do
  case $s in
    setup | prepare_data) ;;
    bench_b8_bf16) bench bench_b8_bf16 bfloat16 8 ;;
    bench_b2_f32) bench bench_b2_f32 float32 2 ;;
    bench_b2_bf16) bench bench_b2_bf16 bfloat16 2 ;;
    fps_bf16) fps fps_bf16 bfloat16 ;;
    fps_f32) fps fps_f32 float32 ;;
    table_row) table_row ;;
    loop_vs_step) loop_vs_step ;;
    predict_speed) predict_speed ;;
    *) echo "unknown stage $s" | tee -a "$RES/summary.txt" ;;
  esac
done
echo "total $(($(date +%s) - START))s" | tee -a "$RES/summary.txt"
pack
echo "archive: $OUT/gpu_perf.tar.gz"
