#!/usr/bin/env bash
# Start a single-node Slurm on this machine (munged, slurmctld, slurmd), with Slurm's own OCI
# container support (oci.conf -> runc) so that `srun --container=BUNDLE` works. Idempotent; run as
# root. Installs slurm-wlm, munge, libpmix2 and runc with apt when they are missing.
# Usage: bash .ci/start-slurm.sh            (prints nothing on stdout; logs in /var/log/slurm)
set -euo pipefail

conf_dir=/etc/slurm
marker="# written by imagebuild .ci/start-slurm.sh"
runc_root=/run/imagebuild-slurm-runc

up() {
  scontrol ping 2>/dev/null | grep -q 'is UP' &&
    sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'
}

if command -v scontrol >/dev/null 2>&1 && up; then
  exit 0
fi

missing=()
for tool in slurmctld:slurmctld slurmd:slurmd srun:slurm-client munged:munge runc:runc; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
[ -e /usr/lib/x86_64-linux-gnu/libpmix.so.2 ] || ls /usr/lib/*/libpmix.so.2 >/dev/null 2>&1 || missing+=(libpmix2)
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq slurm-wlm munge libpmix2 runc >&2
fi

# --- munge: its own user, its own directories, a key
install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
install -d -o munge -g munge -m 0711 /var/lib/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
fi
if ! pgrep -u munge -x munged >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
fi
for _ in $(seq 1 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
munge -n | unmunge >/dev/null || { echo "munged does not answer" >&2; exit 1; }

# --- slurm.conf naming this host, with what slurmd detects on it
host=$(hostname)
node_line=$(slurmd -C | head -n 1 | sed -E 's/ UpTime=[^ ]*//')
mkdir -p "$conf_dir" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm "$runc_root"
if [ -e "$conf_dir/slurm.conf" ] && ! grep -qF "$marker" "$conf_dir/slurm.conf"; then
  echo "$conf_dir/slurm.conf exists and was not written by imagebuild; not touching it" >&2
  exit 1
fi
cat > "$conf_dir/slurm.conf" <<EOF
$marker
ClusterName=imagebuild
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=10
$node_line State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat > "$conf_dir/oci.conf" <<EOF
$marker
RunTimeQuery="runc --root=$runc_root state %n.%u.%j.%s.%t"
RunTimeKill="runc --root=$runc_root kill -a %n.%u.%j.%s.%t SIGTERM"
RunTimeDelete="runc --root=$runc_root delete --force %n.%u.%j.%s.%t"
RunTimeRun="runc --root=$runc_root run %n.%u.%j.%s.%t -b %b"
EOF
cat > "$conf_dir/cgroup.conf" <<EOF
$marker
CgroupPlugin=autodetect
IgnoreSystemd=yes
EOF

pgrep -x slurmctld >/dev/null 2>&1 || slurmctld
pgrep -x slurmd >/dev/null 2>&1 || slurmd
for _ in $(seq 1 100); do
  if up; then exit 0; fi
  sleep 0.2
done
echo "Slurm did not come up; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
tail -n 5 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
