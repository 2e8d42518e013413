#!/usr/bin/env bash
# Makes docs/models.md's "Side by side with MTSCrack" table: bench/peer_mtscrack.py on the public
# test sets, MTSCrack's released ONNX file beside crackjax's released models, scored under
# strict and tolerance_thin_gt, with false positives on crack-free patches. Writes
# $OUT.json and $OUT.md (default results/peer_mtscrack). Needs onnxruntime
# (pip install onnxruntime, or pip install -e '.[onnx]').
# Settings (environment variables):
#   MODELS     models, comma-separated (default crackforest-unet-cpu,mtscrack; add roads-unet-cpu)
#   MTS_ONNX   MTSCrack's model/mtscrack_neural_eris_static.onnx (default $MTS_DIR/onnx/...)
#   MTS_DIR    the authors' full test photos, extracted from MTSCrack's repository
#              (dataset/dc_544_384/test_{img,lab}, dataset/c5_640_360/test_{img,lab}) under
#              $MTS_DIR/dataset (default /work/data/mts)
#   DATASETS   the cropped copies (Datasets/<Set>/...; default /work/data/Datasets)
#   CRACKFOREST the CrackForest archive (default ../shared/datasets/crackforest)
#   DATA_DIR   TFDS data directory (default /work/tfds)
#   MAX_IMAGES --max_images (default: every image), OUT, WORKERS, EXTRA (more flags)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/script_help.sh
script_help "usage: [MODELS=...] [MTS_ONNX=FILE] [MTS_DIR=DIR] [DATASETS=DIR] bash scripts/peer_table.sh" "$@"
MODELS=${MODELS:-crackforest-unet-cpu,mtscrack}
MTS_DIR=${MTS_DIR:-/work/data/mts}
MTS_ONNX=${MTS_ONNX:-$MTS_DIR/onnx/mtscrack_neural_eris_static.onnx}
DATASETS=${DATASETS:-/work/data/Datasets}
CRACKFOREST=${CRACKFOREST:-../shared/datasets/crackforest}
DATA_DIR=${DATA_DIR:-/work/tfds}
OUT=${OUT:-results/peer_mtscrack}
ARGS=(
  --models="$MODELS" --mtscrack_onnx="$MTS_ONNX" --out="$OUT"
  --set="DeepCrack photos=$MTS_DIR/dataset/dc_544_384/test_img:$MTS_DIR/dataset/dc_544_384/test_lab"
  --set="CRACK500 photos=$MTS_DIR/dataset/c5_640_360/test_img:$MTS_DIR/dataset/c5_640_360/test_lab"
  --data_dir="$DATA_DIR"
)
# The general model's other members' test splits (DeepCrack and CRACK500: their whole photos
# above), read from the config, never spelled here (tests/test_release_scripts.py).
for s in $(python3 -c "from crackjax.configs.release import roads_unet_cpu as r; print(' '.join(r.MEMBERS))"); do
  case $s in
    deepcrack|crack500) continue ;;
    crackforest) ARGS+=(--data="$s:test" --manual_dir="$s=$CRACKFOREST") ;;
    *) ARGS+=(--data="$s:test" --manual_dir="$s=$DATASETS") ;;
  esac
done
[[ -n "${MAX_IMAGES:-}" ]] && ARGS+=(--max_images="$MAX_IMAGES")
[[ -n "${WORKERS:-}" ]] && ARGS+=(--workers="$WORKERS")
[[ -n "${EXTRA:-}" ]] && ARGS+=($EXTRA)
python bench/peer_mtscrack.py "${ARGS[@]}"
