# The stages the general model's release scripts share (scripts/release_roads_cpu.sh and
# scripts/release_roads_gpu.sh source this file): its recipe's leave-one-dataset-out figure
# into the model's card (issue 55), and the gate before `register` (issue 76). They read the
# scripts' settings: LODO_TABLE, LODO_ROW, LODO_PEER, GATE_PEERS, PHOTOS, TEST_SPLIT and WORK
# (each script's comment says what they are).

# lodo_stage FILE: the row LODO_ROW of LODO_TABLE (bench/lodo.py --out's JSON) into FILE's
# card, MTSCrack's row (LODO_PEER) beside it; the registry entry and crackjax-models show the
# means. Without LODO_TABLE the card carries none: LODO is a figure of the recipe, measured at a
# budget the machine affords and named as such, not a condition of the gate.
lodo_stage() {
  if [[ -z "${LODO_TABLE:-}" ]]; then
    echo "No LODO_TABLE: the card carries no leave-one-dataset-out figure (issue 55 asks for one; the gate does not)."
    return 0
  fi
  python3 -m crackjax.deploy.release lodo --file="$1" --table="$LODO_TABLE" \
    --row="${LODO_ROW:?set LODO_ROW to the row of the recipe in LODO_TABLE}" \
    --peer="${LODO_PEER:-MTSCrack (its mask: output > 0)}"
}

# gate_stage AGAINST NEW NEW_PHOTOS EVALUATE_FLAGS...: the released model AGAINST scored on the
# same test splits as the new file, at its own stored threshold and test-time rule (the
# EVALUATE_FLAGS: --data=SET:SPLIT of every set, their --manual_dir and --data_dir; with PHOTOS,
# also the whole photos of DeepCrack and CRACK500 that NEW_PHOTOS holds), into
# $WORK/score_released (score_photos_released), then the gate: a paired bootstrap over photos of
# each split's strict F1, new (NEW, NEW_PHOTOS: the new file's crackjax-evaluate --out folders)
# minus released (python -m crackjax.release.gate: a split fails only when its 95% interval lies
# wholly below -1 point; the mean over the splits must lead by 2 points; exit 1 refused, 2 bad
# input; the verdict in $WORK/gate.json). MTSCrack's figures (GATE_PEERS) are shown beside, as
# information. Nothing released as AGAINST: nothing to hold the file to, the gate passes.
# RELEASED_SCORES=DIR: AGAINST's scores kept in the repository (DIR/crops, DIR/photos; e.g.
# results/gate/roads-unet-cpu@1), used instead of scoring it again.
gate_stage() {
  local against=$1 new=$2 new_photos=$3 p
  shift 3
  local released
  released=$(python3 -c "from crackjax.models import hub; print(any(m['name'] == '$against' for m in hub.released()))")
  if [[ $released != True ]]; then
    echo "No model released as $against: nothing to hold the new file to; the gate passes."
    return 0
  fi
  for p in "$new" ${PHOTOS:+"$new_photos"}; do
    [[ -d $p ]] || { echo "gate: $p: no such folder (the new file's scores: its score stage)" >&2; return 2; }
  done
  if [[ -n "${RELEASED_SCORES:-}" ]]; then
    # The released file's scores kept in the repository (results/gate/<name>/{crops,photos}).
    echo "RELEASED_SCORES=$RELEASED_SCORES: the released model's kept scores, not scored again."
    local args=(--new="$new" --old="$RELEASED_SCORES/crops")
    [[ -n "${PHOTOS:-}" ]] && args+=(--new="$new_photos" --old="$RELEASED_SCORES/photos")
    for p in ${GATE_PEERS:-results/peer_mtscrack.json results/peer_mtscrack_tests.json results/peer_mtscrack_dc227.json}; do
      args+=(--peer="$p")
    done
    python3 -m crackjax.release.gate "${args[@]}" --out="$WORK/gate.json"
    return
  fi
  local args=(--new="$new" --old="$WORK/score_released")
  if [[ ${REUSE_RELEASED:-} == 1 && -d $WORK/score_released ]]; then
    echo "REUSE_RELEASED=1: the released model's scores already in $WORK/score_released."
  else
    rm -rf "$WORK/score_released" "$WORK/score_photos_released"  # an earlier gate's splits
    python3 -m crackjax.trainer.evaluate_command --model="$against" "$@" --protocols=strict \
      --out="$WORK/score_released" --overwrite
  fi
  if [[ -n "${PHOTOS:-}" && ! ( ${REUSE_RELEASED:-} == 1 && -d $WORK/score_photos_released ) ]]; then
    python3 -m crackjax.trainer.evaluate_command --model="$against" --data="deepcrack:$TEST_SPLIT" \
      --data="crack500:$TEST_SPLIT" --protocols=strict --out="$WORK/score_photos_released" \
      --overwrite --manual_dir=deepcrack="$PHOTOS" --manual_dir=crack500="$PHOTOS" \
      --data_dir="$WORK/tfds_photos"
  fi
  [[ -n "${PHOTOS:-}" ]] && args+=(--new="$new_photos" --old="$WORK/score_photos_released")
  for p in ${GATE_PEERS:-results/peer_mtscrack.json results/peer_mtscrack_tests.json results/peer_mtscrack_dc227.json}; do
    args+=(--peer="$p")
  done
  python3 -m crackjax.release.gate "${args[@]}" --out="$WORK/gate.json"
}
