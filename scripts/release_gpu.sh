#!/usr/bin/env bash
# Makes the paper-setting released model `crackforest-unet` (configs/release/crackforest_unet.py,
# docs/models.md): trained and exported in ONE call of a project GPU machine
# (../shared/gpu/README.md: Python 3.12 + jax 0.11, no network), finished here on the CPU.
#
# Prepare here (once per checkout), as for scripts/reproduce_gpu.sh:
#   bash ../shared/gpu/fetch-wheels.sh                  # -> .whl/ (the wheels the image lacks)
#   mkdir -p .data && cp -r ../shared/datasets/crackforest .data/
#   printf '/.whl/\n/.data/\n' >> .git/info/exclude
# Try it here first (a minute, the `tiny` config; DATA= a CrackForest copy, real or fake):
#   TINY=1 STAGES="train export finish" OUT=/tmp/release_try bash scripts/release_gpu.sh
# On the GPU, one call (stages train and export, the default):
#   device run: command="bash scripts/release_gpu.sh", carry=[".whl", ".data"], timeout_s=600
#   train  : the release run, 70 epochs of the paper's setting, every epoch scored on the
#            validation part train[58:] and kept; cut at TRAIN_MINUTES (SIGTERM: the run saves
#            its checkpoint, and the epochs scored by then are the candidates).
#   export : the epoch with the best validation ODS F1 scored once on the 46 test images
#            (float32 parameters, on the GPU: the card's `run_scores`) and exported as a
#            bfloat16 model file into $OUT, beside the run's records (release_run.tar.gz) and
#            log.txt.
# Back here, with the returned file (FILE=), on the CPU where the package is tested:
#   STAGES="finish register" FILE=<returned crackforest-unet.safetensors> bash scripts/release_gpu.sh
#   finish  : the file alone scored on the 46 test images here; those scores and this
#             machine's self check go into its card (python -m crackjax.deploy.release rescore).
#   register: the file copied into the package with its registry entry (release register).
# Environment knobs: STAGES, TINY=1, TRAIN_MINUTES=6, DATA=.data/crackforest (the CrackForest
# archive), OUT=<the device tool's output folder>, WORK=/tmp/release_gpu, FILE (finish,
# register; default $OUT/crackforest-unet.safetensors), BACKGROUND_WORKERS=4, EXTRA (more
# launch.py flags, for a CPU try: EXTRA="--config.steps_per_epoch=4 --config.num_epochs=2").
set -euo pipefail
cd "$(dirname "$0")/.."
# --help prints the comment above; the settings are environment variables, not arguments.
. scripts/script_help.sh
script_help "usage: [STAGES=... TINY=1 TRAIN_MINUTES=M FILE=...] bash scripts/release_gpu.sh" "$@"
STAGES=${STAGES:-train export}
CONFIG=configs/release/crackforest_unet.py
NAME=crackforest-unet
TRAIN_MINUTES=${TRAIN_MINUTES:-6}
DATA=${DATA:-.data/crackforest}
OUT=${OUT:-/tmp/release_gpu_out}
WORK=${WORK:-/tmp/release_gpu}
FILE=${FILE:-$OUT/$NAME.safetensors}
BACKGROUND_WORKERS=${BACKGROUND_WORKERS:-4}
ARG=
[ "${TINY:-0}" = 1 ] && ARG=:tiny
RUN=$WORK/$NAME
PROTOCOLS=strict,tolerance_thin_gt
# Every stage prepares TFDS data under WORK, never in the home folder.
export TFDS_DATA_DIR=${TFDS_DATA_DIR:-$WORK/tfds}

has() { [[ " $STAGES " == *" $1 "* ]]; }
mkdir -p "$OUT" "$WORK"
# The run's records (not its checkpoints, too large to come back) are packed on the way out,
# whatever stage failed: the epoch table and the logs come back even without a model file.
pack_records() {
  [ -d "$RUN" ] || return 0
  (cd "$WORK" && find "$NAME" -path "$NAME/checkpoints" -prune -o -type f \
    \( -name '*.json' -o -name '*.jsonl' -o -name '*.csv' -o -name '*.md' -o -name '*.log' -o -name '*.png' \) -print0 |
    tar -czf "$OUT/release_run.tar.gz" --null -T -) || true
}
if has train || has export; then trap pack_records EXIT; fi
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "release_gpu.sh: STAGES='$STAGES' config $CONFIG$ARG, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u '+%F %T UTC')"

if has train || has export; then
  gpu_python
fi

if has train; then
  # A time limit, not a crash: launch.py ends on SIGTERM with a checkpoint, and the epochs
  # scored by then are what the export chooses from.
  limit=$(python3 -c "print(int(60 * $TRAIN_MINUTES))")
  set +e
  timeout --signal=TERM --kill-after=90 "$limit" python3 launch.py --config="$CONFIG$ARG" \
    --workdir="$RUN" --config.data.manual_dir="$DATA" --config.data.data_dir="$TFDS_DATA_DIR" \
    --config.eval.background_workers="$BACKGROUND_WORKERS" ${EXTRA:-}
  code=$?
  set -e
  echo "train exit code $code"
  # 124: the time limit's SIGTERM ended it; 137: it was still saving 90 s later and was
  # killed. Either way the epochs scored before are on disk.
  [ "$code" = 0 ] || [ "$code" = 124 ] || [ "$code" = 137 ] || exit "$code"
fi

if has export; then
  STEP=$(python3 -m crackjax.deploy.release best-step --workdir="$RUN")
  echo "Exporting step $STEP (best validation ODS F1 of $RUN):"
  python3 -m crackjax.deploy.release show --workdir="$RUN"
  # The test split, scored once with the run's float32 parameters (the card's run_scores).
  python3 -m crackjax.trainer.evaluate_command --workdir="$RUN" --step="$STEP" \
    --data=crackforest:test --protocols="$PROTOCOLS"
  python3 -m crackjax.deploy.export_command --workdir="$RUN" --step="$STEP" --format=model \
    --dtype=bfloat16 --name="$NAME" --out="$FILE" --overwrite \
    --notes="Made by scripts/release_gpu.sh with $CONFIG; docs/models.md."
  # What comes back from the device machine: files of at most 16 MiB.
  size=$(stat -c %s "$FILE")
  echo "$FILE: $size bytes"
  [ "$size" -le $((16 * 1024 * 1024)) ] || echo "WARNING: $FILE is over 16 MiB: it will not come back from the device machine."
fi

if has finish; then
  # The file alone, on this machine: its card must hold what the file gives where the package
  # is tested (bfloat16 parameters and the GPU's arithmetic change the run's numbers a little).
  python3 -m crackjax.trainer.evaluate_command --model="$FILE" --data=crackforest:test \
    --protocols="$PROTOCOLS" --out="$WORK/check" --manual_dir=crackforest="$DATA" --overwrite
  python3 -m crackjax.deploy.release rescore --file="$FILE" \
    --record="$WORK/check/crackforest_test/eval.json"
fi

if has register; then
  python3 -m crackjax.deploy.release register --file="$FILE" --name="$NAME" --held_out=test \
    --config="$CONFIG" --command="bash scripts/release_gpu.sh"
fi
ls -la "$OUT"
