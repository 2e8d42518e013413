# Sourced by crackjax's shell scripts (the one-call GPU scripts, lodo.sh, peer_table.sh,
# wheel_smoke.sh, bench/gpu_perf.sh). script_help "usage: ..." "$@", first thing:
# --help / -h prints the usage line and the calling script's header comment (line 2 up to its
# first `set -` line: `set -u`, `set -euo pipefail`), then exits 0, before any setup; any
# other argument is refused (exit 2): their settings are environment variables.
script_help() {
  local usage=$1
  shift
  case "${1:-}" in
    -h|--help)
      echo "$usage"
      sed -n '2,/^set -/{/^set -/d;s/^# \{0,1\}//;p;}' "$0"
      exit 0 ;;
    "") ;;
    *)
      echo "$0: takes no arguments (got '$1'); its settings are environment variables (bash $0 --help)." >&2
      exit 2 ;;
  esac
}

# gpu_python: the GPU image's Python made ready for crackjax (../shared/gpu/README.md): the
# carried wheels (.whl, ../shared/gpu/fetch-wheels.sh) installed into /tmp/site where the
# image lacks them, the checkout on PYTHONPATH, and the GPU, jax and flax named in the log.
gpu_python() {
  if [ -d .whl ] && ! python3 -c 'import tensorflow_datasets, grain, ml_collections' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  fi
  export PYTHONPATH=$PWD:${PYTHONPATH:-}
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
  python3 -c 'import jax, flax; print("jax", jax.__version__, "flax", flax.__version__, jax.devices())'
}
