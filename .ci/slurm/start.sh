#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the Slurm executor's tests (tests/harness/test_slurm.py).
#
# Installs Debian's slurm-wlm and munge when missing, writes /etc/slurm/slurm.conf for this host (its CPUs and
# memory; no cgroups: proctrack/linuxproc, task/none; no accounting) and starts munged, slurmctld and slurmd as
# root. Idempotent: a cluster that already answers `sinfo` is left as it is. Never fails the caller: without apt or
# root it prints why and exits 0, and the Slurm tests then skip, saying so.
set -uo pipefail

say() { echo "[slurm] $*"; }

if [ "$(id -u)" != 0 ]; then
  say "not root: cannot install or start a cluster; the Slurm tests will be skipped"
  exit 0
fi
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    say "no apt-get: cannot install slurm-wlm and munge; the Slurm tests will be skipped"
    exit 0
  fi
  say "installing slurm-wlm and munge (Debian packages)"
  if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null); then
    say "could not install slurm-wlm and munge; the Slurm tests will be skipped"
    exit 0
  fi
fi

# munge: one key, readable by its daemon only.
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null \
    || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
  runuser -u munge -- munged 2>/dev/null || munged --force
fi

host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)  # slurmd refuses a node with more than it finds
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
conf=$(mktemp)
cat > "$conf" <<CONF
# Written by regbench's .ci/slurm/start.sh: one node, root daemons, no cgroups, no accounting.
ClusterName=regbench
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# Finished jobs stay visible to squeue / scontrol for an hour: without accounting this is where their state is.
MinJobAge=3600
ReturnToService=2
KillWait=5
# Look at pending jobs (dependencies just met) every 2 s, not every minute: the tests' chains are short.
SchedulerParameters=sched_interval=2,bf_interval=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem_mb} State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
if cmp -s "$conf" /etc/slurm/slurm.conf; then
  rm -f "$conf"
else
  mv "$conf" /etc/slurm/slurm.conf
  chmod 0644 /etc/slurm/slurm.conf
  if pgrep -x slurmctld >/dev/null; then scontrol reconfigure || true; fi
fi

pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 1 30); do
  state=$(sinfo -h -o %T 2>/dev/null | head -1)
  case "$state" in
    idle|mixed|allocated) say "cluster up: $(sinfo -h -o '%N %c CPUs %m MB %T' | head -1)"; exit 0 ;;
    down*|drain*) scontrol update nodename="$host" state=resume 2>/dev/null ;;
  esac
  sleep 1
done
say "the cluster did not come up (node state: ${state:-none}); see /var/log/slurm/*.log; the Slurm tests will be skipped"
exit 0
