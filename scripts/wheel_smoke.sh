#!/usr/bin/env bash
# What a user installs is what CI tries (.ci/run's last step; runs alone too): builds crackjax's
# wheel from this checkout (its tracked and untracked, not ignored, files: no stale build/),
# installs it into a new virtual environment outside the repository, and from an empty folder
# runs, each printing its normal output and each required to exit 0:
#   crackjax-models; crackjax-docs troubleshooting --path (the installed page)
#   the README's first command, verbatim (its first ```bash block, after the install's &&)
#   crackjax-predict --model=crackforest-unet-cpu on one photo
#   crackjax-evaluate --model=crackforest-unet-cpu --folder=IMAGES:MASKS on three pairs
#   two steps of the fine-tuning recipe (crackjax-train --config=configs/finetune.py, from
#   roads-unet-cpu, docs/datasets.md) on a folder of its own
# The pairs are three CrackForest photos with their masks, or three synthetic ones where the
# CrackForest copy is absent. Prints each step's time and the total; fails at the first error.
# Environment knobs: PYTHON=python3 (makes the venv), CRACKFOREST_DIR (the CrackForest copy;
# default ../shared/datasets/crackforest beside the repository), KEEP=1 (keep the temp folder).
set -euo pipefail
cd "$(dirname "$0")/.."
# --help prints the comment above; the settings are environment variables, not arguments.
. scripts/script_help.sh
script_help "usage: [PYTHON=python3 CRACKFOREST_DIR=DIR KEEP=1] bash scripts/wheel_smoke.sh" "$@"
repo=$(pwd)
# The README's first command as a user copies it: its first ```bash block, less the install
# that precedes '&& ' (the wheel is this script's install).
first=$(awk '/^```bash/{f=1; next} f && /^```/{exit} f' README.md | sed -n 's/^pip install [^&]*&& //p')
[ -n "$first" ] || { echo "wheel_smoke: FAILED: no 'pip install ... && COMMAND' in README.md's first bash block" >&2; exit 1; }
PYTHON=${PYTHON:-python3}
CRACKFOREST_DIR=${CRACKFOREST_DIR:-$repo/../shared/datasets/crackforest}
MODEL=crackforest-unet-cpu
export PYTHONNOUSERSITE=1  # nothing from ~/.local
unset PYTHONPATH
tmp=$(mktemp -d "${TMPDIR:-/tmp}/crackjax-wheel.XXXXXX")
if [ "${KEEP:-}" = 1 ]; then echo "wheel_smoke: keeping $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
t0=$SECONDS
step() {  # step NAME COMMAND...: runs it, echoed, and prints its time
  local name=$1 start=$SECONDS
  shift
  echo "wheel_smoke: \$ $*"
  "$@" || { echo "wheel_smoke: FAILED ($name, exit $?): $*" >&2; exit 1; }
  echo "wheel_smoke: $name took $((SECONDS - start)) s"
}

# The wheel, from a copy of the checkout as git sees it.
mkdir "$tmp/src" "$tmp/dist"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do if [ -f "$f" ]; then printf '%s\0' "$f"; fi; done \
  | xargs -0 cp --parents -t "$tmp/src"
step "venv" "$PYTHON" -m venv "$tmp/venv"
py=$tmp/venv/bin/python
step "build the wheel" "$py" -m pip wheel -q --no-deps -w "$tmp/dist" "$tmp/src"
wheel=$(ls "$tmp/dist"/crackjax-*.whl)
step "install the wheel" "$py" -m pip install -q "$wheel"
rm -rf "$tmp/src"

# An empty folder, and the installed commands only (PATH: the venv's bin first).
mkdir "$tmp/here"
cd "$tmp/here"
export PATH="$tmp/venv/bin:$PATH" TFDS_DATA_DIR="$tmp/tfds"
step "import" python -c "import crackjax, sys; sys.exit(0 if '$tmp/venv' in crackjax.__file__ else 'crackjax is not the wheel: ' + crackjax.__file__)"
step "crackjax-models" crackjax-models
page=$(crackjax-docs troubleshooting --path)
case "$page" in "$tmp/venv/"*) echo "wheel_smoke: crackjax-docs: $page" ;;
  *) echo "wheel_smoke: FAILED: crackjax-docs gave $page, not the installed page" >&2; exit 1 ;; esac
test -s "$page"
test -s "$(dirname "$(python -c 'import crackjax.models; print(crackjax.models.__file__)')")/released/LICENSE-MODELS.md"

step "the README's first command" bash -c "$first"
test -s predictions/measurements.csv
rm -rf predictions

# Three pairs (IMAGES/x.png, MASKS/x.png): CrackForest's, or synthetic 320x480 ones.
python - "$CRACKFOREST_DIR" pairs <<'EOF'
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import scipy.io

source, out = Path(sys.argv[1]), Path(sys.argv[2])
(out / 'images').mkdir(parents=True)
(out / 'masks').mkdir()
names = ['001', '002', '003']
if all((source / 'groundTruth' / f'{n}.mat').is_file() for n in names):
  print(f'wheel_smoke: three CrackForest pairs from {source}')
  for n in names:
    image = PIL.Image.open(source / 'image' / f'{n}.jpg').convert('RGB')
    seg = scipy.io.loadmat(source / 'groundTruth' / f'{n}.mat')['groundTruth'][0, 0]['Segmentation']
    image.save(out / 'images' / f'{n}.png')
    PIL.Image.fromarray(np.isin(seg, (2, 4)).astype(np.uint8) * 255).save(out / 'masks' / f'{n}.png')
else:
  print(f'wheel_smoke: no CrackForest copy at {source}: three synthetic pairs')
  for i, n in enumerate(names):  # bright noisy pavement, a dark crack along a row and a column
    rng = np.random.default_rng(i)
    image = rng.integers(150, 230, size=(320, 480, 3), dtype=np.uint8)
    mask = np.zeros((320, 480), np.uint8)
    mask[100 + 40 * i : 103 + 40 * i, :] = 255
    mask[:, 200 + 30 * i : 202 + 30 * i] = 255
    image[mask > 0] = 40
    PIL.Image.fromarray(image).save(out / 'images' / f'{n}.png')
    PIL.Image.fromarray(mask).save(out / 'masks' / f'{n}.png')
EOF
step "crackjax-predict" crackjax-predict --model=$MODEL --out=predictions pairs/images/001.png
test -s predictions/measurements.csv
step "crackjax-evaluate" crackjax-evaluate --model=$MODEL --folder=pairs/images:pairs/masks --out=scores
step "fine-tuning, 2 steps" crackjax-train --config=configs/finetune.py --workdir=ft \
  --config.data.folder.images=pairs/images --config.data.folder.masks=pairs/masks \
  --config.num_epochs=1 --config.steps_per_epoch=2
test -s ft/eval.json
test -s ft/before_after.md  # the model as shipped and the run, on the held-out photos
locks=$(find "$tmp/tfds" -name '*.lock')
[ -z "$locks" ] || { echo "wheel_smoke: FAILED: lock files left: $locks" >&2; exit 1; }
echo "wheel_smoke: passed in $((SECONDS - t0)) s ($(basename "$wheel"))"
