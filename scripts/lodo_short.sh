#!/usr/bin/env bash
# The short-budget leave-one-dataset-out campaign of issue 55 (docs/models.md, "Roads never
# seen"): each recipe of configs/lodo.py trained five times (each public set held out in turn,
# 1,000 steps) and scored on the held-out test splits under the strict protocol, which ranks
# the recipes in a fifth of the time the tolerance protocol takes; then the table of all of
# them. Resumable: run the same command again (bench/lodo.py skips what is done).
#   PUBLIC      the cropped copies' Datasets/ folder (Lightweight-Modular-Model), required
#   CRACKFOREST the CrackForest archive (default ../shared/datasets/crackforest)
#   WORK        where the runs go (default workdirs/lodo)
#   RECIPES     the recipes, in order (default: base photometric_scale photometric scale)
#   OUT         the table (default results/lodo_short: .json and .md)
#   PEER        bench/peer_mtscrack.py JSON files on the same test splits, comma-separated
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/script_help.sh
script_help "usage: PUBLIC=DIR [WORK=DIR RECIPES='base ...' OUT=results/lodo_short] bash scripts/lodo_short.sh" "$@"
PUBLIC=${PUBLIC:?set PUBLIC to the cropped copies\' Datasets/ folder}
CRACKFOREST=${CRACKFOREST:-../shared/datasets/crackforest}
WORK=${WORK:-workdirs/lodo}
RECIPES=${RECIPES:-base photometric_scale photometric scale}
OUT=${OUT:-results/lodo_short}
COMMON=(--budget=short --work="$WORK" --crackforest="$CRACKFOREST" --public="$PUBLIC")
for recipe in $RECIPES; do
  python bench/lodo.py --recipes="$recipe" --protocols=strict "${COMMON[@]}"
done
python bench/lodo.py --recipes="$(echo $RECIPES | tr ' ' ',')" --stages=none "${COMMON[@]}" \
  --out="$OUT" ${PEER:+--peer="$PEER"}
