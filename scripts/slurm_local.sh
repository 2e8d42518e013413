#!/usr/bin/env bash
# A real one-node SLURM on this machine, for the slow tier's SLURM tests (tests/test_slurm.py)
# and for trying `python -m crackjax.paper.runner --executor=slurm` by hand. Needs root (apt-get,
# /etc/slurm, the daemons); .ci/run starts it before the test tiers and stops it at the end.
#
#   sudo bash scripts/slurm_local.sh start    # install if needed, configure, start; prints the time
#   sudo bash scripts/slurm_local.sh status   # the daemons' pids and `sinfo`
#   sudo bash scripts/slurm_local.sh stop     # ends the daemons this script started
#
# start: installs `slurm-wlm` and `munge` from the distribution's packages (apt-get) when
# slurmctld is missing, writes /etc/slurm/slurm.conf for one node (this machine: `nproc` cores,
# the memory `free -m` reports, partition `debug`; never over a slurm.conf this script did not
# write), starts munged, slurmctld and slurmd, and waits until the node is idle. Everything else
# (spool, state, logs, pid files) is under $SLURM_LOCAL_DIR (default /tmp/crackjax-slurm).
# stop ends only the processes named by those pid files, cancels nothing on a foreign SLURM,
# and leaves the packages and slurm.conf installed (the next start reuses them).
set -euo pipefail
DIR=${SLURM_LOCAL_DIR:-/tmp/crackjax-slurm}
CONF=/etc/slurm/slurm.conf
MARK='# written by crackjax scripts/slurm_local.sh'
WAIT_S=${SLURM_LOCAL_WAIT_S:-120}

die() {
  echo "slurm_local.sh: $*" >&2
  exit 1
}

pid_of() {  # the pid in $DIR/<name>.pid if that process is alive
  local file=$DIR/$1.pid
  [ -s "$file" ] && kill -0 "$(cat "$file")" 2>/dev/null && cat "$file"
}

install_packages() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
  [ "$(id -u)" = 0 ] || die 'SLURM is not installed and installing it needs root (apt-get).'
  echo 'slurm_local.sh: installing slurm-wlm and munge (apt-get)'
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null 2>&1 \
    || { apt-get update >/dev/null 2>&1 \
      && apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null; } \
    || die 'apt-get install slurm-wlm munge failed.'
}

write_conf() {
  if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    die "$CONF exists and was not written by this script: this machine has its own SLURM; use it."
  fi
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(free -m | awk '/^Mem:/ {print int($2 * 0.9)}')  # MiB, a tenth left to the system
  mkdir -p /etc/slurm "$DIR/ctld" "$DIR/d" "$DIR/log"
  cat >"$CONF" <<EOF
$MARK: a one-node SLURM for the tests (host $host, $cpus cores, $mem MiB).
ClusterName=crackjax
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job (time limit, preemption: submitit's checkpoint) may start again after 10 s
# (SLURM's default 120 s: the job credentials' lifetime).
AuthInfo=cred_expire=10
CredType=cred/munge
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/d
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# No cgroups (a container may have none it can write): processes tracked by their parents.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Seconds between SIGTERM and SIGKILL at a time limit or scancel (the default 30).
KillWait=30
# A finished job stays visible to squeue and scontrol for 5 minutes.
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  local begin=$SECONDS
  [ "$(id -u)" = 0 ] || die 'start needs root (the daemons, /etc/slurm).'
  install_packages
  write_conf
  if [ -z "$(pid_of munged || true)" ]; then
    mkdir -p /run/munge "$DIR/munge"
    chown munge:munge /run/munge "$DIR/munge"
    [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create >/dev/null
    runuser -u munge -- munged --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
      || die "munged did not start; see $DIR/munge/munged.log."
    cp "$DIR/munge/munged.pid" "$DIR/munged.pid"
  fi
  [ -n "$(pid_of slurmctld || true)" ] || slurmctld || die "slurmctld did not start; see $DIR/log/slurmctld.log."
  [ -n "$(pid_of slurmd || true)" ] || slurmd || die "slurmd did not start; see $DIR/log/slurmd.log."
  local deadline=$((SECONDS + WAIT_S)) state=''
  while [ $SECONDS -lt $deadline ]; do
    state=$(sinfo -h -N -o '%T' 2>/dev/null | head -1 || true)
    case "$state" in
      idle | mixed | allocated) break ;;
      down* | drain*) scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true ;;
    esac
    sleep 1
  done
  case "$state" in
    idle | mixed | allocated) ;;
    *) die "the node is '${state:-not registered}' after ${WAIT_S} s; see $DIR/log/slurmd.log and slurmctld.log." ;;
  esac
  echo "slurm_local.sh: SLURM up in $((SECONDS - begin)) s: node $(hostname -s) $state, partition debug, $(nproc) cores (logs: $DIR/log)"
}

stop() {
  local name pid
  for name in slurmd slurmctld munged; do
    pid=$(pid_of "$name" || true)
    [ -n "$pid" ] || continue
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    rm -f "$DIR/$name.pid"
  done
  echo 'slurm_local.sh: stopped'
}

status() {
  local name
  for name in munged slurmctld slurmd; do
    echo "$name: $(pid_of "$name" || echo 'not running')"
  done
  sinfo 2>&1 || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: bash scripts/slurm_local.sh start|stop|status" ;;
esac
