#!/usr/bin/env bash
# Stop the single-node SLURM started by .ci/slurm_up.sh: by pid file, in reverse start order.
#   .ci/slurm_down.sh            # RACE_SLURM_DIR as for slurm_up.sh (default /tmp/race-slurm)
# munged is stopped only if slurm_up.sh started it (its pid file copy is under $RACE_SLURM_DIR).
set -uo pipefail
D=${RACE_SLURM_DIR:-/tmp/race-slurm}

stop() {  # stop NAME PIDFILE: SIGTERM, wait up to 10 s, then SIGKILL
  local name=$1 file=$2 pid
  [[ -s $file ]] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { echo "slurm_down: $name ($pid) ignored SIGTERM, killing"; kill -9 "$pid"; }
  fi
  rm -f "$file"
}

stop slurmd "$D/run/slurmd.pid"
stop slurmctld "$D/run/slurmctld.pid"
stop slurmdbd "$D/run/slurmdbd.pid"
stop mariadbd "$D/run/mariadb.pid"
if [[ -s $D/run/munged.pid ]]; then
  stop munged "$D/run/munged.pid"
  rm -f /run/munge/munged.pid
fi
echo "slurm_down: stopped (state kept under $D; delete it for a clean start)"
