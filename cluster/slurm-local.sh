#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, to run cluster/slurm.sbatch as users would (the check is
# cluster/check-slurm.sh). Root, Debian 12 (Slurm 22.05), no systemd:
#   apt-get install --no-install-recommends slurmctld slurmd slurm-client munge
#   eval "$(bash cluster/slurm-local.sh start)"    # starts munged, slurmctld, slurmd; exports SLURM_CONF
#   sbatch --wait ... cluster/slurm.sbatch
#   bash cluster/slurm-local.sh stop
# `start` is idempotent: daemons already running are left alone. Its state, configuration and logs
# are in $ACR_SLURM_DIR (default /tmp/acr-slurm); the node offers every CPU of this machine, no GPU.
set -euo pipefail

DIR=${ACR_SLURM_DIR:-/tmp/acr-slurm}
CONF=$DIR/slurm.conf
NODE=localhost

need() {
    command -v "$1" >/dev/null || {
        echo "$1 not found; install: apt-get install --no-install-recommends slurmctld slurmd slurm-client munge" >&2
        exit 2
    }
}

write_conf() {
    mkdir -p "$DIR/state" "$DIR/spool"
    # proctrack/linuxproc and task/none: the cgroup plugins need a cgroup hierarchy of their own,
    # which a container or a hybrid-cgroup host does not give. ReturnToService=2: a node that was
    # down (a previous stop) comes back as soon as its slurmd registers.
    cat > "$CONF" <<EOF
ClusterName=acrlocal
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldPort=${ACR_SLURMCTLD_PORT:-6817}
SlurmdPort=${ACR_SLURMD_PORT:-6818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=30
NodeName=$NODE CPUs=$(nproc) State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

running() {  # the daemon whose pid file is $1 is alive
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

start_munge() {
    if ! pgrep -x munged >/dev/null; then
        mkdir -p /run/munge && chown munge:munge /run/munge
        [ -s /etc/munge/munge.key ] || mungekey --create
        runuser -u munge -- /usr/sbin/munged
    fi
}

wait_idle() {  # until the node takes jobs (idle, mixed or allocated), 60 s at most
    local state
    for _ in $(seq 60); do
        state=$(sinfo -h -N -n "$NODE" -o %T 2>/dev/null || true)
        case $state in idle* | mix* | alloc*) return 0 ;; esac
        sleep 1
    done
    echo "node $NODE is '${state:-unknown}' after 60 s; see $DIR/slurmctld.log and $DIR/slurmd.log" >&2
    exit 1
}

start() {
    need slurmctld; need slurmd; need sbatch; need munged
    export SLURM_CONF=$CONF
    write_conf
    start_munge
    running "$DIR/slurmctld.pid" || slurmctld -i -f "$CONF"
    running "$DIR/slurmd.pid" || slurmd -f "$CONF" -N "$NODE"
    wait_idle
    echo "export SLURM_CONF=$CONF"
}

stop() {
    local pid
    for daemon in slurmd slurmctld; do
        if running "$DIR/$daemon.pid"; then
            pid=$(cat "$DIR/$daemon.pid")
            kill "$pid"
            for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        fi
    done
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    conf) echo "export SLURM_CONF=$CONF" ;;
    *) echo "usage: $0 start|stop|conf" >&2; exit 2 ;;
esac
