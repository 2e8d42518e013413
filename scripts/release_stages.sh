# The stages the general model's release scripts share (scripts/release_roads_cpu.sh and
# scripts/release_roads_gpu.sh source this file): its recipe's leave-one-dataset-out figure
# into the model's card, and the gate before `register` (issue 55). They read the scripts'
# settings: LODO_TABLE, LODO_ROW, LODO_PEER, GATE_PEERS, GATE_MARGIN, GATE_OLD_ROW, PHOTOS,
# TEST_SPLIT and WORK (each script's comment says what they are).

# lodo_stage FILE: the row LODO_ROW of LODO_TABLE (bench/lodo.py --out's JSON) into FILE's
# card, MTSCrack's row (LODO_PEER) beside it; the registry entry and crackjax-models show the
# means. Without LODO_TABLE the card carries none (and the gate refuses it).
lodo_stage() {
  if [[ -z "${LODO_TABLE:-}" ]]; then
    echo "No LODO_TABLE: the card carries no leave-one-dataset-out figure (issue 55 asks for one)."
    return 0
  fi
  python3 -m crackjax.deploy.release lodo --file="$1" --table="$LODO_TABLE" \
    --row="${LODO_ROW:?set LODO_ROW to the row of the recipe in LODO_TABLE}" \
    --peer="${LODO_PEER:-MTSCrack (its mask: output > 0)}"
}

# gate_stage FILE NAME AGAINST: FILE, to be released as NAME, is allowed only if its card's
# LODO mean leads MTSCrack's by GATE_MARGIN (5) points (and the released AGAINST's) and no
# test split is worse than MTSCrack's (GATE_PEERS) or AGAINST's at the stored threshold
# (python -m crackjax.deploy.release gate: exit 1 refused, 2 bad input). With PHOTOS, AGAINST
# is scored on the same photos first (its card's may be another version of them: DeepCrack's
# 237 before scripts/link_test_photos.py left 10 out); GATE_OLD_ROW: AGAINST's recipe in
# LODO_TABLE where its card has no LODO figure.
gate_stage() {
  local file=$1 name=$2 against=$3 p s
  local args=()
  for p in ${GATE_PEERS:-results/peer_mtscrack.json results/peer_mtscrack_tests.json results/peer_mtscrack_dc227.json}; do
    args+=(--peer="$p")
  done
  local released
  released=$(python3 -c "from crackjax.models import hub; print(any(m['name'] == '$against' for m in hub.released()))")
  if [[ -n "${PHOTOS:-}" && $released == True ]]; then
    python3 -m crackjax.trainer.evaluate_command --model="$against" --data="deepcrack:$TEST_SPLIT" \
      --data="crack500:$TEST_SPLIT" --protocols=strict --out="$WORK/score_photos_released" \
      --overwrite --manual_dir=deepcrack="$PHOTOS" --manual_dir=crack500="$PHOTOS" \
      --data_dir="$WORK/tfds_photos"
    for s in deepcrack crack500; do
      args+=(--old_score="$s test (photos)=$(ls -d "$WORK/score_photos_released/${s}_"*/)eval.json")
    done
  fi
  if [[ -n "${GATE_OLD_ROW:-}" ]]; then
    args+=(--old_row="$GATE_OLD_ROW"
      --lodo_table="${LODO_TABLE:?set LODO_TABLE: the table holding GATE_OLD_ROW}")
  fi
  python3 -m crackjax.deploy.release gate --file="$file" --name="$name" --against="$against" \
    --held_out="$TEST_SPLIT" "${args[@]}" --margin="${GATE_MARGIN:-5}" --out="$WORK/gate.json" \
    --peer_set='DeepCrack photos=deepcrack test (photos)' \
    --peer_set='CRACK500 photos=crack500 test (photos)'
}
