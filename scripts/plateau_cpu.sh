#!/usr/bin/env bash
# Trains the general model `roads-unet-cpu` to its plateau on a CPU (issue 76), a run that
# outlives its machine: configs/release/roads_unet_cpu.py:cosine (the 28 Nov recipe, its step
# size decayed by a cosine from step 11,000 to 26,000) warm-started from the newest committed
# candidate in CANDIDATES (python -m crackjax.release.candidates latest), or from the released
# 28 Nov file at its step 11,000 when there is none. On a machine that still holds the run in
# WORK (a run of at least the candidate's step), the same command resumes it from its own
# checkpoint instead. TRAIN_MINUTES=N stops it after N minutes (SIGTERM: checkpoint kept).
# CANDIDATE=1 (after training, or alone with TRAIN_MINUTES=0) exports the run's newest and best
# scored epochs into CANDIDATES as bfloat16 files with their records: commit them the same day.
# WORK (default workdirs/plateau), CANDIDATES (default candidates/roads-unet-cpu), CRACKFOREST
# (default ../shared/datasets/crackforest), PUBLIC (the cropped copies' Datasets/ folder of
# https://github.com/Omaralmaqtari/Lightweight-Modular-Model), DATA_DIR (optional), ARG
# (default cosine; cosine_smoke for a seconds-long try).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/script_help.sh
script_help "usage: TRAIN_MINUTES=N PUBLIC=DIR [CANDIDATE=1] bash scripts/plateau_cpu.sh" "$@"
WORK=${WORK:-workdirs/plateau}
CANDIDATES=${CANDIDATES:-candidates/roads-unet-cpu}
CRACKFOREST=${CRACKFOREST:-../shared/datasets/crackforest}
PUBLIC=${PUBLIC:?set PUBLIC to the cropped copies\' Datasets/ folder}
ARG=${ARG:-cosine}
CONFIG=configs/release/roads_unet_cpu.py:$ARG
read -r -a MIX_FLAGS <<<"$(python -c "from crackjax.configs.release import roads_unet_cpu as r; print(' '.join(r.manual_dir_flags('$CRACKFOREST', '$PUBLIC')))")"
[[ -n "${DATA_DIR:-}" ]] && MIX_FLAGS+=(--config.data.data_dir="$DATA_DIR")

read -r START_FILE START_STEP <<<"$(python -m crackjax.release.candidates latest --dir="$CANDIDATES" --fallback=roads-unet-cpu)"
# The run in WORK that got furthest (its newest checkpoint); resumed if it is at least as far as
# the candidate, else a new run warm-starts from the candidate.
best_run= best_step=-1
for run in "$WORK"/from_step_*; do
  [[ -d $run/checkpoints ]] || continue
  s=$({ ls "$run/checkpoints" || true; } | { grep -E '^[0-9]+$' || true; } | sort -n | tail -1)
  [[ -n $s ]] && (( s > best_step )) && best_run=$run best_step=$s
done
if [[ -n $best_run ]] && (( best_step >= START_STEP )); then
  RUN=$best_run
  START_FILE=$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_init"]["pretrained"])' "$RUN/config.json")
  START_STEP=$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_init"]["start_step"])' "$RUN/config.json")
  echo "Resuming $RUN at its step $best_step (warm-started from $START_FILE at step $START_STEP)."
else
  RUN=$WORK/from_step_$(printf %06d "$START_STEP")
  echo "Warm start: $RUN from $START_FILE at step $START_STEP."
fi
if (( ${TRAIN_MINUTES:-1} > 0 )); then
  status=0
  timeout --signal=TERM --kill-after=120 "$(( ${TRAIN_MINUTES:-100000} * 60 ))" \
    python launch.py --config="$CONFIG" --workdir="$RUN" "${MIX_FLAGS[@]}" \
    --config.model_init.pretrained="$START_FILE" --config.model_init.start_step="$START_STEP" \
    || status=$?
  if [[ $status != 0 && $status != 124 && $status != 137 && $status != 143 ]]; then
    echo "launch.py failed (exit $status), not a time limit: its message above says why."
    exit "$status"
  fi
  [[ $status == 0 ]] || echo "Stopped (TRAIN_MINUTES or SIGTERM): resume with the same command."
fi
python -m crackjax.deploy.release show --workdir="$RUN" || true
if [[ ${CANDIDATE:-} == 1 ]]; then
  python -m crackjax.release.candidates add --workdir="$RUN" --dir="$CANDIDATES" --name=roads-unet-cpu
  python -m crackjax.release.candidates list --dir="$CANDIDATES"
fi
