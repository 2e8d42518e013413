# Sourced by the one-call GPU scripts (bench/gpu_perf.sh, scripts/reproduce_gpu.sh,
# scripts/release_gpu.sh), first thing:   script_help "usage: ..." "$@"
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
