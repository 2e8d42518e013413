#!/usr/bin/env bash
# Makes the released general model `roads-unet-cpu` (docs/models.md) on a CPU, in stages:
#   train    : launch.py with configs/release/roads_unet_cpu.py (five public datasets mixed; every
#              epoch scored on their validation parts) until the plateau: at least MIN_EPOCHS
#              (30) epochs, then on to the best epoch + PATIENCE (5) until the mean validation
#              F1 has not risen for PATIENCE epochs (`python -m crackjax.deploy.release plateau`),
#              at most MAX_EPOCHS (100). Resumes from its last checkpoint; TRAIN_MINUTES=N stops
#              it after N minutes (SIGTERM: the checkpoints are kept, the scored epochs are the
#              candidates; the same command resumes later).
#   export   : the epoch with the best mean validation ODS F1 over the datasets, exported as a
#              model file (its threshold: the pooled validation strict ODS threshold).
#   score    : the model file scored once on every public test split (strict, tolerance_thin_gt;
#              F1 at its stored threshold beside ODS), each record put into its card; with
#              PHOTOS, also the whole test photos and false positives on their crack-free parts.
#   lodo     : its recipe's leave-one-dataset-out figure into its card (LODO_TABLE, below).
#   gate     : the released roads-unet-cpu scored on the same test splits (and PHOTOS) at its own
#              stored threshold and test-time rule, then `python -m crackjax.release.gate`: a
#              paired bootstrap over photos of each split's strict F1, new minus released; a
#              split fails only when its 95% interval lies wholly below -1 point, and the mean
#              over the splits must lead by 2 points (MTSCrack's figures beside, as information:
#              GATE_PEERS, default results/peer_mtscrack*.json); else the script stops here.
#   register : the file and its registry entry into the package.
# STAGES="train export score lodo gate register" (default: all). WORK=dir (default workdirs/release),
# CRACKFOREST=the CrackForest archive (default ../shared/datasets/crackforest), PUBLIC=the
# cropped copies' Datasets/ folder (https://github.com/Omaralmaqtari/Lightweight-Modular-Model),
# PHOTOS (optional)=a folder with DeepCrack/{test_img,test_lab} and CRACK500/{test_img,test_lab}
# (the authors' whole test photos, scored as a second copy of those two sets: MTSCrack's
# dataset/dc_544_384 and dataset/c5_640_360 without the photos whose crops the cropped copy's
# train split holds, laid out by scripts/link_test_photos.py: 227 and 91), DATA_DIR=where
# the datasets are prepared (default ~/tensorflow_datasets; the photos go to $WORK/tfds_photos).
# LODO_TABLE (optional)=bench/lodo.py --out's JSON with LODO_ROW, the recipe's row (e.g.
# 'jpeg (long) at scales 2'), and LODO_PEER (default MTSCrack's row): that figure into the card
# before it is registered (issue 55: a general model's card carries roads never seen, a figure
# of its recipe at the budget named there; not a condition of the gate).
# SCALES (optional, e.g. 2) with TEST_TIME_CHOSEN_BY: the file's default test-time scales (what
# its users' crackjax-predict / crackjax-evaluate / Predictor take; the score stage scores so).
# KEEP_OLD_AS (optional)=a name under which the model released as roads-unet-cpu so far stays
# released, byte for byte, beside the new one (users may have pinned it).
# PROTOCOLS (default strict,tolerance_thin_gt): the score stage's; strict alone for a quick look
# at a candidate (the gate reads strict; a release is scored under both).
# RUN (default WORK/roads-unet-cpu)=the training run the export stage exports from, e.g. the
# plateau run of scripts/plateau_cpu.sh (issue 76), with RUN_CONFIG its config as the card's
# notes name it (e.g. configs/release/roads_unet_cpu.py:cosine); DTYPE (default float32; bfloat16 halves the
# file, its card states the change). WIDTH_RULE (optional, e.g. 8) with TEST_TIME_CHOSEN_BY: the
# file's default width rule (a photo whose predicted cracks are wider than WIDTH_RULE px is
# predicted again at half size; chosen on the validation parts: bench/width_scale.py --choose);
# the score stage then also scores every split with --width_rule=off (strict; the card's
# "rule off" copies), so the card gives both. REUSE_RELEASED=1: the gate reuses the released
# model's scores already in WORK/score_released (the same released file; they take ~30 min).
# A tiny try: ARG=smoke (the config's seconds-long variant) TEST_SPLIT='test[:8]'.
set -euo pipefail
cd "$(dirname "$0")/.."
# lodo_stage and gate_stage, the stages the GPU release script shares.
. scripts/release_stages.sh
STAGES=${STAGES:-train export score lodo gate register}
WORK=${WORK:-workdirs/release}
CRACKFOREST=${CRACKFOREST:-../shared/datasets/crackforest}
PUBLIC=${PUBLIC:?set PUBLIC to the cropped copies\' Datasets/ folder}
CONFIG=configs/release/roads_unet_cpu.py${ARG:+:$ARG}
TEST_SPLIT=${TEST_SPLIT:-test}
NAME=roads-unet-cpu
RUN=${RUN:-$WORK/$NAME}
FILE="$WORK/$NAME.safetensors"
PROTOCOLS=${PROTOCOLS:-strict,tolerance_thin_gt}
# The members, from the config (never spelled here: tests/test_release_scripts.py ties them).
read -r -a SETS <<<"$(python -c "from crackjax.configs.release import roads_unet_cpu as r; print(' '.join(r.MEMBERS))")"
read -r -a MIX_FLAGS <<<"$(python -c "from crackjax.configs.release import roads_unet_cpu as r; print(' '.join(r.manual_dir_flags('$CRACKFOREST', '$PUBLIC')))")"
COMMON=("${MIX_FLAGS[@]}")
[[ -n "${DATA_DIR:-}" ]] && COMMON+=(--config.data.data_dir="$DATA_DIR")
[[ -n "${EXTRA:-}" ]] && COMMON+=($EXTRA)
MANUAL=()
for s in "${SETS[@]}"; do
  if [[ $s == crackforest ]]; then MANUAL+=(--manual_dir="$s=$CRACKFOREST"); else MANUAL+=(--manual_dir="$s=$PUBLIC"); fi
done

has() { [[ " $STAGES " == *" $1 "* ]]; }

if has train; then
  MIN_EPOCHS=${MIN_EPOCHS:-30}
  PATIENCE=${PATIENCE:-5}
  MAX_EPOCHS=${MAX_EPOCHS:-100}
  deadline=$((SECONDS + ${TRAIN_MINUTES:-0} * 60))
  # The first epoch by which the plateau can be reached: the best epoch so far + PATIENCE.
  earliest_plateau() {
    python -m crackjax.deploy.release plateau --workdir="$RUN" --patience="$PATIENCE" \
      --min_epochs="$MIN_EPOCHS" --earliest
  }
  # The epochs to train to: MIN_EPOCHS, or as many as the run has begun already (a resumed
  # script continues where the last one stopped): its last scored epoch, or the epoch its latest
  # checkpoint is in (a stop mid-epoch; launch.py refuses a checkpoint past num_epochs).
  # (`|| true`: a fresh run has no epoch file, and `set -e -o pipefail` would end the script.)
  last=$({ ls "$RUN"/epoch_*.json 2>/dev/null || true; } | sed 's/.*epoch_0*\([0-9]*\).json/\1/' | sort -n | tail -1)
  step=$({ ls "$RUN/checkpoints" 2>/dev/null || true; } | { grep -E '^[0-9]+$' || true; } | sort -n | tail -1)
  if [[ -n $step && -f $RUN/config.json ]]; then
    per_epoch=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["steps_per_epoch"])' "$RUN/config.json")
    begun=$(( (step + per_epoch - 1) / per_epoch ))
    (( begun > ${last:-0} )) && last=$begun
  fi
  epochs=$(( ${last:-0} > MIN_EPOCHS ? ${last:-0} : MIN_EPOCHS ))
  if [[ -n ${last:-} ]]; then  # and at least the earliest epoch its plateau can be reached at
    next=$(earliest_plateau 2>/dev/null || echo 0)  # 0: no epoch scored yet
    next=$(( next < MAX_EPOCHS ? next : MAX_EPOCHS ))
    epochs=$(( next > epochs ? next : epochs ))
  fi
  while :; do
    cmd=(python launch.py --config="$CONFIG" --workdir="$RUN" "${COMMON[@]}"
      --config.num_epochs="$epochs" --config.max_checkpoints_to_keep="$epochs")
    if [[ -n "${TRAIN_MINUTES:-}" ]]; then
      left=$((deadline - SECONDS))
      (( left > 60 )) || { echo "TRAIN_MINUTES spent: resume with the same command."; break; }
      status=0
      timeout --signal=TERM --kill-after=120 "$left" "${cmd[@]}" || status=$?
      # 124: the time limit's SIGTERM ended it (checkpoint kept; 137: killed while saving, the
      # last complete checkpoint kept); 143: launch.py's own status for a SIGTERM from outside
      # (a kill), its checkpoint kept. Anything else is launch.py's failure, said above: not a
      # time limit (a run of another config in RUN was once reported as one).
      if [[ $status != 0 && $status != 124 && $status != 137 && $status != 143 ]]; then
        echo "launch.py failed (exit $status), not a time limit: its message above says why."
        exit "$status"
      fi
      [[ $status == 0 ]] || { echo "Stopped (TRAIN_MINUTES or SIGTERM): resume with the same command."; break; }
    else
      "${cmd[@]}"
    fi
    python -m crackjax.deploy.release plateau --workdir="$RUN" --patience="$PATIENCE" \
      --min_epochs="$MIN_EPOCHS" && break
    (( epochs < MAX_EPOCHS )) || { echo "MAX_EPOCHS=$MAX_EPOCHS reached before the plateau."; break; }
    # On to the earliest epoch the plateau can be reached at (the best epoch + PATIENCE), not
    # PATIENCE more epochs: a best at epoch 37 is judged at 42, not after 46.
    next=$(earliest_plateau)
    epochs=$(( next > epochs ? next : epochs + 1 ))
    epochs=$(( epochs < MAX_EPOCHS ? epochs : MAX_EPOCHS ))
  done
  python -m crackjax.deploy.release show --workdir="$RUN"
fi
if has export; then
  STEP=$(python -m crackjax.deploy.release best-step --workdir="$RUN")
  echo "Exporting step $STEP (the best mean validation ODS F1 of $RUN)."
  test_time=()
  [[ -n "${SCALES:-}" ]] && test_time+=(--scales="$SCALES")
  [[ -n "${WIDTH_RULE:-}" ]] && test_time+=(--width_rule="$WIDTH_RULE")
  (( ${#test_time[@]} )) && test_time+=(
    --test_time_chosen_by="${TEST_TIME_CHOSEN_BY:?set TEST_TIME_CHOSEN_BY: how SCALES / WIDTH_RULE were chosen}")
  crackjax-export --workdir="$RUN" --step="$STEP" --format=model --name="$NAME" --out="$FILE" \
    --dtype="${DTYPE:-float32}" --overwrite \
    --notes="Made by scripts/release_roads_cpu.sh with ${RUN_CONFIG:-$CONFIG}; docs/models.md." \
    "${test_time[@]}"
fi
if has score; then
  # Every set's test split, scored once by the file itself (crackforest first: the registry's
  # primary entry), then the authors' whole photos of DeepCrack and CRACK500 where given.
  data=()
  for s in "${SETS[@]}"; do data+=(--data="$s:$TEST_SPLIT"); done
  crackjax-evaluate --model="$FILE" "${data[@]}" --protocols="$PROTOCOLS" --out="$WORK/score" \
    --overwrite "${MANUAL[@]}" ${DATA_DIR:+--data_dir="$DATA_DIR"}
  for s in "${SETS[@]}"; do
    copy=(); [[ $s == deepcrack || $s == crack500 ]] && copy=(--copy=crops)
    python -m crackjax.deploy.release rescore --file="$FILE" --record="$(ls -d "$WORK/score/${s}_"*/)eval.json" "${copy[@]}"
  done
  if [[ -n "${PHOTOS:-}" ]]; then
    crackjax-evaluate --model="$FILE" --data="deepcrack:$TEST_SPLIT" --data="crack500:$TEST_SPLIT" \
      --protocols="$PROTOCOLS" --out="$WORK/score_photos" --overwrite \
      --manual_dir=deepcrack="$PHOTOS" --manual_dir=crack500="$PHOTOS" --data_dir="$WORK/tfds_photos"
    for s in deepcrack crack500; do
      python -m crackjax.deploy.release rescore --file="$FILE" \
        --record="$(ls -d "$WORK/score_photos/${s}_"*/)eval.json" --copy=photos
    done
  fi
  if [[ -n "${WIDTH_RULE:-}" ]]; then
    # The same splits with the width rule off: the card gives both (issue 76).
    crackjax-evaluate --model="$FILE" "${data[@]}" --protocols=strict --width_rule=off \
      --out="$WORK/score_rule_off" --overwrite "${MANUAL[@]}" ${DATA_DIR:+--data_dir="$DATA_DIR"}
    for s in "${SETS[@]}"; do
      copy='rule off'; [[ $s == deepcrack || $s == crack500 ]] && copy='crops, rule off'
      python -m crackjax.deploy.release rescore --file="$FILE" --copy="$copy" \
        --record="$(ls -d "$WORK/score_rule_off/${s}_"*/)eval.json"
    done
    if [[ -n "${PHOTOS:-}" ]]; then
      crackjax-evaluate --model="$FILE" --data="deepcrack:$TEST_SPLIT" --data="crack500:$TEST_SPLIT" \
        --protocols=strict --width_rule=off --out="$WORK/score_photos_rule_off" --overwrite \
        --manual_dir=deepcrack="$PHOTOS" --manual_dir=crack500="$PHOTOS" --data_dir="$WORK/tfds_photos"
      for s in deepcrack crack500; do
        python -m crackjax.deploy.release rescore --file="$FILE" --copy='photos, rule off' \
          --record="$(ls -d "$WORK/score_photos_rule_off/${s}_"*/)eval.json"
      done
    fi
  fi
fi
if has score && [[ -n "${PHOTOS:-}" ]]; then
  # False positives on crack-free patches of the whole test photos (issue 43 item 6).
  python -m crackjax.deploy.release fp --file="$FILE" \
    --set="DeepCrack photos=$PHOTOS/DeepCrack/test_img:$PHOTOS/DeepCrack/test_lab" \
    --set="CRACK500 photos=$PHOTOS/CRACK500/test_img:$PHOTOS/CRACK500/test_lab"
fi
if has lodo; then
  lodo_stage "$FILE"
fi
if has gate; then
  data=()
  for s in "${SETS[@]}"; do data+=(--data="$s:$TEST_SPLIT"); done
  gate_stage "$NAME" "$WORK/score" "$WORK/score_photos" "${data[@]}" "${MANUAL[@]}" \
    ${DATA_DIR:+--data_dir="$DATA_DIR"}
fi
if has register; then
  python -m crackjax.deploy.release register --file="$FILE" --name="$NAME" --held_out="$TEST_SPLIT" \
    --config="$CONFIG" --command="bash scripts/release_roads_cpu.sh" \
    ${KEEP_OLD_AS:+--keep_old_as="$KEEP_OLD_AS"}
fi
