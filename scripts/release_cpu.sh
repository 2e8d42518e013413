#!/usr/bin/env bash
# Makes the released model `crackforest-unet-cpu` (docs/models.md) on a CPU, in stages:
#   select : the 2-epoch selection runs of each candidate loss (configs/release/
#            crackforest_unet_cpu.py LOSSES), scored on the validation part train[58:]; the
#            table of their validation ODS F1 is printed and the config's CHOSEN must be the best.
#   train  : the release run (CHOSEN, 10 epochs), every epoch scored on the validation part.
#   export : the epoch with the best validation ODS F1 exported as a model file.
#   check  : the model file scored once on the test split (strict, tolerance_thin_gt) into the
#            card, then copied into the package with its registry entry.
# STAGES="select train export check" (default: all), WORK=dir for the runs (default
# workdirs/release), MANUAL_DIR=the CrackForest archive (default ../shared/datasets/crackforest).
# Each stage resumes: a finished launch.py run is not retrained.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGES=${STAGES:-select train export check}
WORK=${WORK:-workdirs/release}
MANUAL_DIR=${MANUAL_DIR:-../shared/datasets/crackforest}
CONFIG=configs/release/crackforest_unet_cpu.py
NAME=crackforest-unet-cpu
COMMON=(--config.data.manual_dir="$MANUAL_DIR")
[[ -n "${DATA_DIR:-}" ]] && COMMON+=(--config.data.data_dir="$DATA_DIR")
[[ -n "${EXTRA:-}" ]] && COMMON+=($EXTRA)

has() { [[ " $STAGES " == *" $1 "* ]]; }

if has select; then
  for loss in $(python -c "from configs.release import crackforest_unet_cpu as m; print(' '.join(m.LOSSES))"); do
    python launch.py --config="$CONFIG:select_$loss" --workdir="$WORK/select_$loss" "${COMMON[@]}"
  done
  python -m crackjax.deploy.release select --config="$CONFIG" --work="$WORK"
fi
if has train; then
  python launch.py --config="$CONFIG" --workdir="$WORK/$NAME" "${COMMON[@]}"
fi
RUN="$WORK/$NAME"
FILE="$WORK/$NAME.safetensors"
PROTOCOLS=strict,tolerance_thin_gt
if has export; then
  STEP=$(python -m crackjax.deploy.release best-step --workdir="$RUN")
  echo "Exporting step $STEP (best validation ODS F1 of $RUN)."
  # The test split, scored once, for the card (the run's threshold.json stays the validation's).
  crackjax-evaluate --workdir="$RUN" --step="$STEP" --data=crackforest:test --protocols="$PROTOCOLS"
  crackjax-export --workdir="$RUN" --step="$STEP" --format=model --name="$NAME" --out="$FILE" \
    --overwrite --notes="Made by scripts/release_cpu.sh with $CONFIG; docs/models.md."
fi
if has check; then
  # The file alone reproduces the card's test scores; then it ships in the package.
  crackjax-evaluate --model="$FILE" --data=crackforest:test --protocols="$PROTOCOLS" \
    --out="$WORK/check" --manual_dir=crackforest="$MANUAL_DIR"
  python -m crackjax.deploy.release check --file="$FILE" --record="$WORK/check/crackforest_test/eval.json"
  python -m crackjax.deploy.release register --file="$FILE" --name="$NAME" --held_out=test \
    --config="$CONFIG" --command="bash scripts/release_cpu.sh"
fi
