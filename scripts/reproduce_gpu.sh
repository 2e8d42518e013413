#!/usr/bin/env bash
# One chunk of the GPU reproduction campaign of Tables I-IV (docs/reproduction.md), for the
# project's GPU machines (../shared/gpu/README.md: Python 3.12 + jax 0.11, no network).
#
# Prepare here (once per checkout), then run in ONE device call:
#   bash ../shared/gpu/fetch-wheels.sh                  # -> .whl/ (the wheels the image lacks)
#   mkdir -p .data && cp -r ../shared/datasets/crackforest .data/
#   printf '/.whl/\n/.data/\n' >> .git/info/exclude
#   device run: command="bash scripts/reproduce_gpu.sh", carry=[".whl", ".data"], timeout_s=600
# Dry run here first (which jobs the chunk would start, from the measured rates; no GPU, no
# wheels, nothing trained): the same knobs plus PLAN=1 [DEVICE_KIND='NVIDIA H100 80GB HBM3'].
# then copy the returned results/<campaign>.json over the committed one, regenerate the report
#   python -m crackjax.paper.report results/gpu_table1.json --out=docs/reproduction/gpu_table1
# and commit both, naming the GPU (the report does).
#
# Every chunk starts only the jobs expected to end within $MINUTES (`--fit`: the rates measured
# by earlier chunks on this GPU kind, kept in results/$CAMPAIGN.json; without them every job
# starts, and those still running at the limit get SIGTERM and are redone next time:
# full-width checkpoints are too large to carry back), skips the jobs that
# results/$CAMPAIGN.json already holds, and writes the merged results and its report into
# $OUT as it goes. Environment knobs:
#   TABLE=1  SEEDS=5  PARALLEL=4  MINUTES=7.5  ROWS=<comma keys, default all>
#   (PARALLEL=4: on one H100 four jobs of the paper's setting trained ~132 steps/s together,
#   six ~92 and one alone 93.8, and six start slower; docs/performance.md, "Jobs side by side")
#   CURVE_PROTOCOLS=strict  (the epochs that are no row's; the rows' epochs get every protocol)
#   VARIANT=  (paper setting; 'smoke' for a CPU try-out)   CAMPAIGN=gpu_table$TABLE
#   DATA=.data/crackforest   OUT=<the device tool's output folder>
#   BACKGROUND_WORKERS=<cores / PARALLEL - 1, at least 1>  (each job scores its epochs in a
#     background thread on that many processes while its next epoch trains: eval.background_workers)
set -uo pipefail
# --help prints the comment above; the settings are environment variables, not arguments.
. "$(dirname "$0")/script_help.sh"
script_help "usage: [ROWS=... SEEDS=N PARALLEL=N MINUTES=M PLAN=1 ...] bash scripts/reproduce_gpu.sh" "$@"
TABLE=${TABLE:-1}
SEEDS=${SEEDS:-5}
PARALLEL=${PARALLEL:-4}
MINUTES=${MINUTES:-7.5}
ROWS=${ROWS:-}
CURVE_PROTOCOLS=${CURVE_PROTOCOLS:-strict}
VARIANT=${VARIANT:-}
CAMPAIGN=${CAMPAIGN:-gpu_table${TABLE}}
DATA=${DATA:-.data/crackforest}
OUT=${OUT:-/tmp/reproduce_gpu_out}
WORK=${WORK:-/tmp/reproduce_gpu}
cores=$(nproc 2>/dev/null || echo 2)
BACKGROUND_WORKERS=${BACKGROUND_WORKERS:-$(( cores / PARALLEL > 1 ? cores / PARALLEL - 1 : 1 ))}

results=results/$CAMPAIGN.json
done_flag=()
[ -f "$results" ] && done_flag=(--done="$results")
rows_flag=()
[ -n "$ROWS" ] && rows_flag=(--rows="$ROWS")
common=(--table="$TABLE" --seeds="$SEEDS" "${rows_flag[@]}" --variant="$VARIANT"
  --curve_protocols="$CURVE_PROTOCOLS" --parallel="$PARALLEL" --max_minutes="$MINUTES"
  --shortest_first "${done_flag[@]}" --set=data.manual_dir="$DATA"
  --set=data.data_dir="$WORK/tfds" --set=eval.background_workers="$BACKGROUND_WORKERS"
  --workdir="$WORK/campaign")

if [ "${PLAN:-0}" = 1 ]; then
  exec python3 -m crackjax.paper.runner "${common[@]}" --plan \
    --device_kind="${DEVICE_KIND:-NVIDIA H100 80GB HBM3}"
fi

mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1

gpu_python
# GPU utilisation and memory every 5 s: does the GPU wait for the loop?
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 \
    >"$OUT/gpu_util.csv" 2>/dev/null &
  trap 'kill %1 2>/dev/null' EXIT
fi

# One compilation cache for the workers: a row's later seeds compile nothing.
export JAX_COMPILATION_CACHE_DIR=$WORK/jax_cache
# Hard stop a little after the scheduler's own limit, so the report below always runs (jobs
# cut at the limit are redone next time anyway: their checkpoints do not come back).
limit=$(python3 -c "print(int(60 * $MINUTES + 45))")
timeout --signal=TERM --kill-after=15 "$limit" python3 -m crackjax.paper.runner "${common[@]}" --fit
echo "reproduce exit code $?"

# The jobs' own records (small), in case the report below fails.
if [ -d "$WORK/campaign" ]; then
  (cd "$WORK" && find campaign -name '*.json' -not -path '*/checkpoints/*' -print0 |
    tar -czf "$OUT/campaign_records.tar.gz" --null -T -)
fi
inputs=()
[ -d "$WORK/campaign" ] && inputs+=("$WORK/campaign")
[ -f "$results" ] && inputs+=("$results")
if [ ${#inputs[@]} -gt 0 ]; then
  python3 -m crackjax.paper.report "${inputs[@]}" --complete_only --export="$OUT/$CAMPAIGN.json" \
    --out="$WORK/report"
  [ -d "$WORK/report" ] && tar -czf "$OUT/report.tar.gz" -C "$WORK" report
  # The workers' logs, for what failed or was cut (small).
  tar -czf "$OUT/logs.tar.gz" -C "$WORK" $(cd "$WORK" && find campaign -name worker.log) 2>/dev/null
fi
ls -la "$OUT"
