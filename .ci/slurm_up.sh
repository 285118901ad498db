#!/usr/bin/env bash
# Start a real single-node SLURM with accounting on localhost, for tests/test_slurm.py.
#
#   .ci/slurm_up.sh            # installs what is missing (Debian 12, root), starts, waits for idle
#   export SLURM_CONF=${RACE_SLURM_DIR:-/tmp/race-slurm}/etc/slurm.conf   # then: pytest -m slurm
#   .ci/slurm_down.sh          # stops the daemons this script started
#
# Daemons: munged -> mariadbd (127.0.0.1:$PORT, private datadir) -> slurmdbd -> slurmctld -> slurmd.
# Everything lives under $RACE_SLURM_DIR; pid files there are what slurm_down.sh stops.
# Facts behind the choices (found setting up a single-node cluster): accounting is needed for
# submitit to see cancels and requeues; KillWait=5; AuthInfo=cred_expire=10 for fast requeues;
# the config must exist before any SLURM command, or it looks the controller up through DNS.
# Prints the `export SLURM_CONF=...` line last; exit 0 once `sinfo` reports the node idle.
set -euo pipefail

D=${RACE_SLURM_DIR:-/tmp/race-slurm}
PORT=${RACE_SLURM_DB_PORT:-3307}          # MariaDB, off the default 3306
DB_PASS=race-slurm-ci                     # local, loopback-only throw-away database
export SLURM_CONF=$D/etc/slurm.conf
mkdir -p "$D"/{etc,state,spool,log,run,db}

# --- packages (only what is missing)
export PATH=$PATH:/usr/sbin
need=()
for pair in slurmctld:slurm-wlm slurmd:slurm-wlm munged:munge slurmdbd:slurmdbd mariadbd:mariadb-server; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair##*:}")
done
if ((${#need[@]})); then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${need[@]}" >"$D/log/apt.log" 2>&1 \
    || { apt-get update >>"$D/log/apt.log" 2>&1 && apt-get install -y --no-install-recommends "${need[@]}" >>"$D/log/apt.log" 2>&1; }
fi

alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local t=$1 what=$2; shift 2
  for _ in $(seq $((t * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "slurm_up: $what did not come up in ${t}s; see $D/log/" >&2; return 1
}

# --- config files, written before any SLURM command runs
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) * 9 / 10 / 1024 ))
cat >"$SLURM_CONF" <<EOF
ClusterName=racecluster
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MailProg=/bin/true
KillWait=5
MinJobAge=300
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$D/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
LogFile=$D/log/slurmdbd.log
PidFile=$D/run/slurmdbd.pid
EOF
chmod 600 "$D/etc/slurmdbd.conf"

# --- munge
if ! [[ -S /run/munge/munge.socket.2 ]] || ! munge -n </dev/null >/dev/null 2>&1; then
  [[ -s /etc/munge/munge.key ]] || { mungekey -c -k /etc/munge/munge.key && chown munge:munge /etc/munge/munge.key; }
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  runuser -u munge -- munged --pid-file=/run/munge/munged.pid
  cp /run/munge/munged.pid "$D/run/munged.pid" 2>/dev/null || true
  wait_for 10 munged munge -n
fi

# --- MariaDB (private datadir, loopback only) and the slurmdbd user
if ! alive "$D/run/mariadb.pid"; then
  if [[ ! -d $D/db/mysql ]]; then
    mariadb-install-db --user=root --datadir="$D/db" --auth-root-authentication-method=socket \
      >"$D/log/mariadb-install.log" 2>&1
  fi
  mariadbd --user=root --datadir="$D/db" --port="$PORT" --bind-address=127.0.0.1 \
    --socket="$D/run/mariadb.sock" --pid-file="$D/run/mariadb.pid" \
    --log-error="$D/log/mariadb.log" --innodb-buffer-pool-size=64M >/dev/null 2>&1 &
  wait_for 30 mariadbd mariadb --socket="$D/run/mariadb.sock" -uroot -e "SELECT 1"
fi
mariadb --socket="$D/run/mariadb.sock" -uroot <<EOF
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
EOF

# --- slurmdbd, slurmctld, slurmd
alive "$D/run/slurmdbd.pid" || slurmdbd
wait_for 30 slurmdbd bash -c "exec 3<>/dev/tcp/127.0.0.1/6819"
alive "$D/run/slurmctld.pid" || slurmctld -i
wait_for 30 slurmctld scontrol ping
alive "$D/run/slurmd.pid" || slurmd -N localhost
for _ in $(seq 300); do
  state=$(sinfo -h -o %T 2>/dev/null | head -1)
  [[ $state == idle ]] && break
  sleep 0.1
done
if [[ ${state:-} != idle ]]; then
  echo "slurm_up: node state is '${state:-none}', not idle; see $D/log/" >&2
  exit 1
fi
# accounting answers (sacct is what submitit reads job states from)
wait_for 30 sacct sacct -n -X -S now
echo "slurm_up: single-node SLURM idle ($CPUS CPUs, ${MEM_MB} MB), accounting on 127.0.0.1:$PORT"
echo "export SLURM_CONF=$SLURM_CONF"
