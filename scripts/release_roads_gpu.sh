#!/usr/bin/env bash
# Makes the general released model `roads-unet` (configs/release/roads_unet.py: roads-unet-cpu's
# recipe, five public datasets mixed, at widths 32...512, stored in bfloat16; docs/models.md):
# trained and exported in ONE call of a project GPU machine (../shared/gpu/README.md: Python
# 3.12 + jax 0.11, no network), finished here on the CPU.
#
# Prepare here (once per checkout; .whl and .data are in .gitignore):
#   bash ../shared/gpu/fetch-wheels.sh                  # -> .whl/ (the wheels the image lacks)
#   python scripts/pack_roads_data.py                   # -> .data/roads/ (~33 MB; it prints
#                                                       #    what it kept and what a call sends)
# Try it here first (minutes: the `tiny` config on a tiny pack made from the copies here):
#   TINY=1 bash scripts/release_roads_gpu.sh            # every stage, finish included
# On the GPU, one call (stages prepare, train, export, score: the default):
#   device run: command="bash scripts/release_roads_gpu.sh", carry=[".whl", ".data"], timeout_s=600
#   prepare: the wheels installed, the five datasets prepared from the pack (.data/roads) into
#            TFDS folders under WORK (the counts per split printed).
#   train  : the release run, every epoch scored on the five validation parts and kept; cut at
#            TRAIN_MINUTES (SIGTERM: the run saves its checkpoint, the epochs scored by then
#            are the candidates).
#   export : the epoch with the best mean over the datasets of their validation ODS F1 (its
#            threshold: the pooled validation one) exported as a bfloat16 model file into $OUT.
#   score  : that epoch (float32 parameters, on the GPU) scored on the packed test parts of
#            every dataset (strict, tolerance_thin_gt): a check, beside the run's records in
#            $OUT/release_run.tar.gz (packed after every stage) and log.txt.
# Back here, with the returned file (FILE=), on the CPU where the package is tested:
#   STAGES="finish lodo gate register" FILE=<returned roads-unet.safetensors> [RECIPE=jpeg
#     LODO_TABLE=... LODO_ROW='jpeg (gpu)' PHOTOS=...] bash scripts/release_roads_gpu.sh
#   finish  : the file alone scored on every test image of the five datasets (the copies here:
#             CRACKFOREST, PUBLIC; with PHOTOS, also DeepCrack's and CRACK500's whole test
#             photos), each record put into its card with this machine's self check
#             (python -m crackjax.deploy.release rescore).
#   lodo    : its recipe's LODO figure into its card (LODO_TABLE, LODO_ROW; LODO_PEER).
#   gate    : GATE_AGAINST (roads-unet-cpu) scored on finish's test splits (and PHOTOS) at its
#             own stored threshold, then python -m crackjax.release.gate: a paired bootstrap over
#             photos of each split's strict F1, new minus released; a split fails only when its
#             95% interval lies wholly below -1 point, and the mean over the splits must lead by
#             2 points (MTSCrack's figures beside, as information); else it stops.
#   register: the file copied into the package with its registry entry (release register).
# Environment knobs: STAGES, TINY=1, RECIPE (e.g. jpeg: configs/release/roads_unet.py:RECIPE,
# the recipe of configs/lodo.py at its `gpu` budget, whose LODO folds scripts/lodo_gpu.sh
# trains beside this run with RELEASE=1), TRAIN_MINUTES=6, DATA=.data/roads (the pack),
# OUT=<the device tool's output folder>, WORK=/tmp/release_roads_gpu, FILE (finish, register;
# default $OUT/roads-unet.safetensors), BACKGROUND_WORKERS=4, CRACKFOREST=../shared/datasets/
# crackforest and PUBLIC=/work/data/Datasets (finish; TINY: the tiny pack), PHOTOS (finish,
# optional), TEST_SPLIT=test (finish; a try: 'test[:8]'), EXTRA (more launch.py flags).
set -euo pipefail
cd "$(dirname "$0")/.."
# --help prints the comment above; the settings are environment variables, not arguments.
. scripts/script_help.sh
# lodo_stage and gate_stage, the stages the CPU release script shares.
. scripts/release_stages.sh
script_help "usage: [STAGES=... TINY=1 TRAIN_MINUTES=M DATA=... FILE=...] bash scripts/release_roads_gpu.sh" "$@"
CONFIG=configs/release/roads_unet.py
NAME=roads-unet
TRAIN_MINUTES=${TRAIN_MINUTES:-6}
OUT=${OUT:-/tmp/release_roads_gpu_out}
WORK=${WORK:-/tmp/release_roads_gpu}
FILE=${FILE:-$OUT/$NAME.safetensors}
BACKGROUND_WORKERS=${BACKGROUND_WORKERS:-4}
TEST_SPLIT=${TEST_SPLIT:-test}
CRACKFOREST=${CRACKFOREST:-../shared/datasets/crackforest}
PUBLIC=${PUBLIC:-/work/data/Datasets}
# The config argument: RECIPE (configs/release/roads_unet.py: a recipe of configs/lodo.py at
# its `gpu` budget, the training its LODO folds had) and, with TINY=1, tiny.
ARG=${RECIPE:-}
if [ "${TINY:-0}" = 1 ]; then ARG=${ARG:+$ARG,}tiny; fi
ARG=${ARG:+:$ARG}
if [ "${TINY:-0}" = 1 ]; then
  # The whole chain on this CPU: the GPU's stages, then the file's finish on the tiny pack.
  STAGES=${STAGES:-prepare train export score finish}
  DATA=${DATA:-$WORK/tiny_pack}
else
  STAGES=${STAGES:-prepare train export score}
  DATA=${DATA:-.data/roads}
fi
RUN=$WORK/$NAME
PROTOCOLS=strict,tolerance_thin_gt
# Every stage prepares TFDS data under WORK, never in the home folder: the pack's copies in
# tfds/, the full copies of finish in tfds_full/ (the same builders; other files).
export TFDS_DATA_DIR=${TFDS_DATA_DIR:-$WORK/tfds}

has() { [[ " $STAGES " == *" $1 "* ]]; }
mkdir -p "$OUT" "$WORK"
# The run's records (not its checkpoints, too large to come back), the preparation's counts and
# the test check are packed after every stage and on the way out, whatever stage failed.
pack_records() {
  (cd "$WORK" && find . -path "./$NAME/checkpoints" -prune -o -path ./tfds -prune -o \
    -path ./tfds_full -prune -o -path ./tiny_pack -prune -o -type f \
    \( -name '*.json' -o -name '*.jsonl' -o -name '*.csv' -o -name '*.md' -o -name '*.log' -o -name '*.png' \) -print0 |
    tar -czf "$OUT/release_run.tar.gz" --null -T -) || true
}
GPU_STAGES=0
if has prepare || has train || has export || has score; then GPU_STAGES=1; trap pack_records EXIT; fi
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "release_roads_gpu.sh: STAGES='$STAGES' config $CONFIG$ARG, data $DATA, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u '+%F %T UTC')"
clock() { echo "[$1: $(($(date +%s) - T0)) s]"; }

if [ "$GPU_STAGES" = 1 ]; then
  gpu_python
fi
if [ "${TINY:-0}" = 1 ] && [ ! -d "$DATA" ]; then
  # The tiny pack: a few images of every split of the copies here (or fake ones in a test).
  python3 scripts/pack_roads_data.py --tiny --out="$DATA" --crackforest="$CRACKFOREST" --public="$PUBLIC"
fi
if [ -d "$DATA" ]; then DATA=$(cd "$DATA" && pwd); fi
read -r -a MIX_FLAGS <<<"$(python3 -c "from crackjax.configs.release import roads_unet as r; print(' '.join(r.manual_dir_flags('$DATA/crackforest', '$DATA/Datasets')))")"
# The members, from the config (never spelled here: tests/test_release_scripts.py ties them).
read -r -a SETS <<<"$(python3 -c "from crackjax.configs.release import roads_unet as r; print(' '.join(r.MEMBERS))")"
packed=()
for s in "${SETS[@]}"; do
  if [[ $s == crackforest ]]; then packed+=(--manual_dir="$s=$DATA/crackforest"); else packed+=(--manual_dir="$s=$DATA/Datasets"); fi
done
# The test splits finish scores (and the gate scores the released model on): every test image
# of the copies here (TINY: the tiny pack's test images stand for them).
full=()
if [ "${TINY:-0}" = 1 ]; then
  full=("${packed[@]}")
else
  for s in "${SETS[@]}"; do
    if [[ $s == crackforest ]]; then full+=(--manual_dir="$s=$CRACKFOREST"); else full+=(--manual_dir="$s=$PUBLIC"); fi
  done
fi
data=()
for s in "${SETS[@]}"; do data+=(--data="$s:$TEST_SPLIT"); done

if has prepare; then
  T0=$(date +%s)
  CONFIG_ARG=${ARG#:} DATA="$DATA" python3 - <<'EOF' | tee "$WORK/prepare.log"
import os
import runpy

from crackjax.configs.release import roads_unet

prepare = runpy.run_path('scripts/pack_roads_data.py')['prepare']
config = roads_unet.get_config(os.environ['CONFIG_ARG'] or None)
prepare(config.data, os.environ['DATA'], os.environ['TFDS_DATA_DIR'])
EOF
  clock prepare
  pack_records
fi

if has train; then
  T0=$(date +%s)
  # A time limit, not a crash: launch.py ends on SIGTERM with a checkpoint, and the epochs
  # scored by then are what the export chooses from.
  limit=$(python3 -c "print(int(60 * $TRAIN_MINUTES))")
  set +e
  timeout --signal=TERM --kill-after=60 "$limit" python3 launch.py --config="$CONFIG$ARG" \
    --workdir="$RUN" "${MIX_FLAGS[@]}" --config.data.data_dir="$TFDS_DATA_DIR" \
    --config.eval.background_workers="$BACKGROUND_WORKERS" ${EXTRA:-}
  code=$?
  set -e
  echo "train exit code $code"
  clock train
  pack_records
  # 124: the time limit's SIGTERM ended it; 137: it was still saving 60 s later and was
  # killed. Either way the epochs scored before are on disk.
  [ "$code" = 0 ] || [ "$code" = 124 ] || [ "$code" = 137 ] || exit "$code"
fi

if has export; then
  T0=$(date +%s)
  STEP=$(python3 -m crackjax.deploy.release best-step --workdir="$RUN")
  echo "Exporting step $STEP (the best mean validation ODS F1 over the datasets of $RUN):"
  python3 -m crackjax.deploy.release show --workdir="$RUN" | tee "$WORK/epochs.md"
  python3 -m crackjax.deploy.export_command --workdir="$RUN" --step="$STEP" --format=model \
    --dtype=bfloat16 --name="$NAME" --out="$FILE" --overwrite \
    --notes="Made by scripts/release_roads_gpu.sh with $CONFIG$ARG (data: scripts/pack_roads_data.py); docs/models.md."
  # What comes back from the device machine: files of at most 16 MiB; the package's limit for
  # one file is 16 MB.
  size=$(stat -c %s "$FILE")
  echo "$FILE: $size bytes"
  [ "$size" -le 16000000 ] || echo "WARNING: $FILE is over 16 MB (the package's limit for one file)."
  [ "$size" -le $((16 * 1024 * 1024)) ] || echo "WARNING: $FILE is over 16 MiB: it will not come back from the device machine."
  clock export
  pack_records
fi

if has score; then
  T0=$(date +%s)
  STEP=$(python3 -m crackjax.deploy.release best-step --workdir="$RUN")
  # The packed test parts, scored with the run's float32 parameters: a check of the GPU run
  # (the card's test scores are the file's own on every test image: stage finish).
  data=()
  for s in "${SETS[@]}"; do data+=(--data="$s:test"); done
  python3 -m crackjax.trainer.evaluate_command --workdir="$RUN" --step="$STEP" "${data[@]}" \
    "${packed[@]}" --data_dir="$TFDS_DATA_DIR" --protocols="$PROTOCOLS" --out="$WORK/gpu_test" --overwrite
  clock score
  pack_records
fi

if has finish; then
  T0=$(date +%s)
  # The file alone, on this machine, on every test image: its card must hold what the file
  # gives where the package is tested (bfloat16 parameters and the GPU's arithmetic change the
  # run's numbers a little). TINY: the tiny pack's test images stand for the copies here.
  python3 -m crackjax.trainer.evaluate_command --model="$FILE" "${data[@]}" "${full[@]}" \
    --data_dir="$WORK/tfds_full" --protocols="$PROTOCOLS" --out="$WORK/check" --overwrite
  for s in "${SETS[@]}"; do
    copy=(); [[ $s == deepcrack || $s == crack500 ]] && copy=(--copy=crops)
    python3 -m crackjax.deploy.release rescore --file="$FILE" \
      --record="$(ls -d "$WORK/check/${s}_"*/)eval.json" "${copy[@]}"
  done
  if [[ -n "${PHOTOS:-}" ]]; then
    python3 -m crackjax.trainer.evaluate_command --model="$FILE" --data="deepcrack:$TEST_SPLIT" \
      --data="crack500:$TEST_SPLIT" --protocols="$PROTOCOLS" --out="$WORK/check_photos" --overwrite \
      --manual_dir=deepcrack="$PHOTOS" --manual_dir=crack500="$PHOTOS" --data_dir="$WORK/tfds_photos"
    for s in deepcrack crack500; do
      python3 -m crackjax.deploy.release rescore --file="$FILE" \
        --record="$(ls -d "$WORK/check_photos/${s}_"*/)eval.json" --copy=photos
    done
  fi
  clock finish
fi

if has lodo; then
  lodo_stage "$FILE"
fi
if has gate; then
  # The first roads-unet joins roads-unet-cpu: held to it (GATE_AGAINST) on finish's splits.
  gate_stage "${GATE_AGAINST:-roads-unet-cpu}" "$WORK/check" "$WORK/check_photos" "${data[@]}" \
    "${full[@]}" --data_dir="$WORK/tfds_full"
fi
if has register; then
  python3 -m crackjax.deploy.release register --file="$FILE" --name="$NAME" --held_out="$TEST_SPLIT" \
    --config="$CONFIG$ARG" --command="${RECIPE:+RECIPE=$RECIPE }bash scripts/release_roads_gpu.sh"
fi
ls -la "$OUT"
