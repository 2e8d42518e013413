#!/usr/bin/env bash
# The leave-one-dataset-out campaigns of issue 55 (docs/lodo.md): each
# recipe of configs/lodo.py trained five times (each public set held out in turn; BUDGET short:
# 1,000 steps, long: 6,000) and scored on the held-out test splits under the strict protocol,
# which ranks the recipes in a fifth of the time the tolerance protocol takes; then the table
# of all of them. Held-out set by held-out set, every recipe on one before the next, so a
# campaign cut short still compares the recipes on the same folds. Resumable: run the same
# command again (bench/lodo.py skips what is done).
#   PUBLIC      the cropped copies' Datasets/ folder (Lightweight-Modular-Model), required
#   CRACKFOREST the CrackForest archive (default ../shared/datasets/crackforest)
#   WORK        where the runs go (default workdirs/lodo)
#   RECIPES     the recipes, in order (default: base photometric_scale photometric scale)
#   BUDGET      short (default) or long (configs/lodo.py's BUDGETS)
#   HELD_OUT    the held-out sets, in order (default: all five, configs/lodo.py's order)
#   OUT         the table (default results/lodo_<BUDGET>: .json and .md)
#   PEER        bench/peer_mtscrack.py JSON files on the same test splits, comma-separated
#   KEEP        a folder, committed (e.g. results/lodo_long), where each scored fold's scores
#               are kept; folds kept there are not run again, and the table takes them from
#               there when WORK has lost them (a campaign longer than a machine's life)
#   TEST_TIME   rows of the same files at test-time scales / flip (bench/lodo.py --test_time,
#               e.g. base:2,base:flip,photometric:1+2), scored after each held-out set's folds
#   STATUS=1    print where each fold stands (bench/lodo.py --status) and run nothing
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/script_help.sh
script_help "usage: PUBLIC=DIR [WORK=DIR RECIPES='base ...' BUDGET=short HELD_OUT='crackforest ...' OUT=...] bash scripts/lodo.sh" "$@"
PUBLIC=${PUBLIC:?set PUBLIC to the cropped copies\' Datasets/ folder}
CRACKFOREST=${CRACKFOREST:-../shared/datasets/crackforest}
WORK=${WORK:-workdirs/lodo}
RECIPES=${RECIPES:-base photometric_scale photometric scale}
BUDGET=${BUDGET:-short}
HELD_OUT=${HELD_OUT:-$(python -c 'from crackjax.configs import lodo; print(" ".join(lodo.MEMBERS))')}
OUT=${OUT:-results/lodo_$BUDGET}
COMMON=(--budget="$BUDGET" --work="$WORK" --crackforest="$CRACKFOREST" --public="$PUBLIC"
  --test_time="${TEST_TIME:-}" ${KEEP:+--keep="$KEEP"})
recipes=$(echo $RECIPES | tr ' ' ',')
if [[ "${STATUS:-}" == 1 ]]; then
  exec python bench/lodo.py --recipes="$recipes" --held_out="$(echo $HELD_OUT | tr ' ' ',')" \
    --protocols=strict --status "${COMMON[@]}"
fi
for held_out in $HELD_OUT; do
  python bench/lodo.py --recipes="$recipes" --held_out="$held_out" --protocols=strict "${COMMON[@]}"
done
python bench/lodo.py --recipes="$recipes" --stages=none "${COMMON[@]}" \
  --out="$OUT" ${PEER:+--peer="$PEER"}
