#!/usr/bin/env bash
# A real Slurm cluster on this machine, from Debian's packages (slurm-wlm, munge; scripts/deps.sh):
# munged, slurmctld and one slurmd, started here with a generated slurm.conf in a private
# directory and stopped on every exit. Then the launches a user would try, each running the probe
# (tests/slurm/probe.c) and checked line by line:
#   srun -n 2 with --mpi=none, pmi2, pmix (those `srun --mpi=list` offers): shm backend, ranks
#     from Slurm, one thread per rank; ACCELERATE_BACKEND=mpi picks the MPI module of the PMI
#     (pmi2 -> MPICH, pmix -> Open MPI) or fails naming --mpi=... (none), never an abort;
#   sbatch -n 2 running the probe itself (one process, a warning naming srun) and through srun;
#   Accelerate's per-node recipe, srun --ntasks-per-node=1 accelerate launch --num_processes 2.
# Mode "two": two slurmd "nodes" in two network namespaces joined by a veth pair (as
# tests/multinode/netns.sh), each with its own PMIx directory (a private mount): srun -N 2 -n 3
# with each --mpi plugin, where the tasks span machines: the MPI module of the PMI carries the
# collectives (pmi2 -> MPICH, pmix -> Open MPI) with 2 + 1 local tasks, --mpi=none the store and
# gloo (2 + 1: flat gloo; 2 + 2: hierarchical);
# srun --mpi=none across the nodes (the store and gloo from Slurm's variables and MASTER_ADDR),
# Hugging Face's `srun accelerate launch ... --rdzv_backend c10d` without --machine_rank,
# and Accelerate's per-node recipe across both nodes (srun -N 2 --ntasks-per-node=1 accelerate
# launch --num_machines $SLURM_NNODES --machine_rank $SLURM_NODEID ...: 2 machines x 2 processes
# joined through the rendezvous store, the hierarchical backend).
# Needs root (slurmd runs the tasks as their user, slurmctld as SlurmUser=root). Exit 77 (skip)
# only when the packages are not installed, this is not root, or the daemons (or, for "two", the
# namespaces) cannot start.
#   slurm.sh one|two <probe> <accelerate> <module dir>
set -u
mode=$1 probe=$2 cli=$3 moddir=$4
skip() { echo "SKIP: $*"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

[ "$(id -u)" = 0 ] || skip "needs root to run slurmd and slurmctld"
for c in munged slurmctld slurmd srun sbatch sinfo python3; do
  command -v "$c" >/dev/null || skip "$c not found: install slurm-wlm and munge (scripts/deps.sh)"
done

T=$(mktemp -d /tmp/acc-slurm.XXXXXX) || skip "mktemp failed"
chmod 755 "$T"
ID=$(( $$ % 100000 ))$(od -An -N1 -tu1 /dev/urandom | tr -d " ")
NSA=acc-sl-$ID-a NSB=acc-sl-$ID-b VA=aslva$ID VB=aslvb$ID
stop() {
  for d in slurmd.n2 slurmd.n1; do
    [ -s "$T/$d.pid" ] && kill "$(cat "$T/$d.pid")" 2>/dev/null
  done
  for d in slurmctld munged; do
    [ -s "$T/$d.pid" ] && kill "$(cat "$T/$d.pid")" 2>/dev/null
  done
  # bounded wait for them to go, then the directory
  for _ in $(seq 50); do
    alive=0
    for d in slurmd.n1 slurmd.n2 slurmctld munged; do
      [ -s "$T/$d.pid" ] && kill -0 "$(cat "$T/$d.pid")" 2>/dev/null && alive=1
    done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for d in slurmd.n1 slurmd.n2 slurmctld munged; do
    [ -s "$T/$d.pid" ] && kill -9 "$(cat "$T/$d.pid")" 2>/dev/null
  done
  if [ "$mode" = two ]; then
    for ns in "$NSA" "$NSB"; do
      pids=$(ip netns pids "$ns" 2>/dev/null)
      [ -n "$pids" ] && kill -9 $pids 2>/dev/null
      ip netns del "$ns" 2>/dev/null
    done
    ip link del "$VA" 2>/dev/null
  fi
  rm -rf "$T"
}
trap stop EXIT
trap 'exit 1' INT TERM

# Two free TCP ports of this run (ctest -j runs other clusters beside this one).
read -r P1 P2 < <(python3 -c '
import socket
s=[socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1",0))
print(*[x.getsockname()[1] for x in s])')

# where each daemon runs: the host's network (one) or a namespace per node (two)
A1=127.0.0.1 A2=
in_a() { "$@"; }
in_b() { "$@"; }
if [ "$mode" = two ]; then
  command -v ip >/dev/null && command -v nsenter >/dev/null && command -v unshare >/dev/null ||
    skip "ip, nsenter and unshare are needed for two nodes"
  ip netns add "$NSA" 2>"$T/err" || skip "cannot create a network namespace: $(cat "$T/err")"
  ip netns add "$NSB" || skip "ip netns add $NSB failed"
  ip link add "$VA" type veth peer name "$VB" || skip "cannot create a veth pair"
  ip link set "$VA" netns "$NSA" && ip link set "$VB" netns "$NSB" || skip "cannot move the veth ends"
  N=$(( ID % 200 + 20 ))
  A1=10.233.$N.1 A2=10.233.$N.2
  ip -n "$NSA" addr add "$A1/24" dev "$VA" && ip -n "$NSB" addr add "$A2/24" dev "$VB" &&
    ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up &&
    ip -n "$NSA" link set "$VA" up && ip -n "$NSB" link set "$VB" up || skip "cannot set up the veth pair"
  # nsenter, not `ip netns exec`: the latter remounts /sys, and slurmd needs /sys/fs/cgroup
  in_a() { nsenter --net="/var/run/netns/$NSA" "$@"; }
  in_b() { nsenter --net="/var/run/netns/$NSB" "$@"; }
fi

mkdir -p "$T/munge" "$T/state" "$T/spool-n1" "$T/spool-n2" "$T/pmix" "$T/pmix-n2"
chmod 700 "$T/munge"
head -c 1024 /dev/urandom > "$T/munge.key" && chmod 600 "$T/munge.key"
timeout 20 munged -f --socket="$T/munge/sock" --key-file="$T/munge.key" --log-file="$T/munged.log" \
  --pid-file="$T/munged.pid" --seed-file="$T/munged.seed" || skip "munged did not start: $(cat "$T/munged.log" 2>/dev/null)"

H=$(hostname -s)
nodes="NodeName=n1 NodeHostname=$H NodeAddr=$A1 CPUs=4 State=UNKNOWN"
names=n1
if [ "$mode" = two ]; then
  nodes="$nodes
NodeName=n2 NodeHostname=$H NodeAddr=$A2 CPUs=4 State=UNKNOWN"
  names=n1,n2
fi
cat > "$T/slurm.conf" <<CONF
ClusterName=acctest
SlurmctldHost=$H($A1)
SlurmctldPort=$P1
SlurmdPort=$P2
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/sock
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool-%n
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.%n.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
ReturnToService=2
$nodes
PartitionName=p Nodes=$names Default=YES MaxTime=INFINITE State=UP
CONF
# PMIx's per-step directory defaults to /tmp/spmix_appdir_<uid>_<job>.<step>: shared by every
# cluster of this machine (job 2 of another run) and by both "nodes". One of our own, and the
# second node sees its own through a private bind mount.
echo "PMIxCliTmpDirBase=$T/pmix" > "$T/mpi.conf"
export SLURM_CONF=$T/slurm.conf
in_a timeout 30 slurmctld -i || skip "slurmctld did not start: $(tail -n 5 "$T/slurmctld.log" 2>/dev/null)"
in_a timeout 30 slurmd -N n1 || skip "slurmd did not start: $(tail -n 5 "$T/slurmd.n1.log" 2>/dev/null)"
if [ "$mode" = two ]; then
  in_b unshare -m sh -c "mount --bind '$T/pmix-n2' '$T/pmix' && exec timeout 30 slurmd -N n2" ||
    skip "the second slurmd did not start: $(tail -n 5 "$T/slurmd.n2.log" 2>/dev/null)"
fi
want=idle
up=0
for _ in $(seq 300); do # at most 30 s for the nodes to register
  [ "$(in_a timeout 10 sinfo -h -N -o %t 2>/dev/null | sort -u | tr -d '\n')" = $want ] && { up=1; break; }
  sleep 0.1
done
[ $up = 1 ] || skip "the Slurm nodes did not come up in 30 s: $(tail -n 5 "$T"/slurmd.*.log)"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0
export ACCELERATE_MODULE_DIR=$moddir
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS ACCELERATE_BACKEND ACCELERATE_MPI_FLAVOR

# run <name> <command...>: output in $T/<name>.out and .err, status in $rc.
run() {
  local name=$1; shift
  in_a timeout 120 "$@" >"$T/$name.out" 2>"$T/$name.err"
  rc=$?
}
# expect_lines <name> <line...>: the probe lines, sorted, are exactly these.
expect_lines() {
  local name=$1; shift
  local got want
  got=$(grep '^probe ' "$T/$name.out" | sort)
  want=$(printf '%s\n' "$@" | sort)
  if [ "$rc" != 0 ] || [ "$got" != "$want" ]; then
    fail "$name: status $rc"
    echo "--- expected"; echo "$want"; echo "--- got"; cat "$T/$name.out"; echo "--- stderr"; cat "$T/$name.err"
  else
    echo "ok: $name"
  fi
}
# expect_error <name> <text>: failed with a status below 128 (no signal, no abort) naming <text>.
expect_error() {
  local name=$1 text=$2
  if [ "$rc" = 0 ] || [ "$rc" -ge 124 ] || ! grep -qF -- "$text" "$T/$name.err" ||
     grep -q 'MPI_ABORT\|MPI_ERRORS_ARE_FATAL\|Local abort' "$T/$name.err"; then
    fail "$name: status $rc, expected a clear error naming '$text'"; cat "$T/$name.out" "$T/$name.err"
  else
    echo "ok: $name"
  fi
}
shm2() { # the lines of a 2-task step on one node over shared memory, one thread each
  echo "probe rank 0 of 2 local 0 of 2 launcher $1 backend shm module none omp 1 blas 1 sum 3"
  echo "probe rank 1 of 2 local 1 of 2 launcher $1 backend shm module none omp 1 blas 1 sum 3"
}
mpi2() {
  echo "probe rank 0 of 2 local 0 of 2 launcher slurm backend mpi module libaccelerate-mpi-$1.so omp 1 blas 1 sum 3"
  echo "probe rank 1 of 2 local 1 of 2 launcher slurm backend mpi module libaccelerate-mpi-$1.so omp 1 blas 1 sum 3"
}

plugins=$(in_a timeout 30 srun --mpi=list 2>&1)
echo "srun --mpi=list: $(echo "$plugins" | tr '\n' ' ')"

if [ "$mode" = two ]; then
  # 3 tasks over 2 nodes (2 + 1): ranks and local ranks from Slurm, the MPI module of the PMI
  spread() { # spread <module>
    echo "probe rank 0 of 3 local 0 of 2 launcher slurm backend mpi module libaccelerate-mpi-$1.so omp 1 blas 1 sum 6"
    echo "probe rank 1 of 3 local 1 of 2 launcher slurm backend mpi module libaccelerate-mpi-$1.so omp 1 blas 1 sum 6"
    echo "probe rank 2 of 3 local 0 of 1 launcher slurm backend mpi module libaccelerate-mpi-$1.so omp unset blas unset sum 6"
  }
  gloo3() { # srun --mpi=none, 2 + 1 tasks: the store and flat gloo (ecosystem 4, D10)
    echo "probe rank 0 of 3 local 0 of 2 launcher slurm backend gloo module none omp 1 blas 1 sum 6"
    echo "probe rank 1 of 3 local 1 of 2 launcher slurm backend gloo module none omp 1 blas 1 sum 6"
    echo "probe rank 2 of 3 local 0 of 1 launcher slurm backend gloo module none omp unset blas unset sum 6"
  }
  hier4() { # 2 + 2: hierarchical (launcher $1)
    for r in 0 1 2 3; do
      echo "probe rank $r of 4 local $((r % 2)) of 2 launcher $1 backend hierarchical module none omp 1 blas 1 sum 10"
    done
  }
  for m in none pmi2 pmix; do
    if ! echo "$plugins" | grep -qw "$m"; then echo "note: srun has no --mpi=$m plugin, not run"; continue; fi
    if [ $m = none ]; then # the store's address: MASTER_ADDR (the node names do not resolve here)
      run "two_srun_$m" env MASTER_ADDR="$A1" MASTER_PORT=29513 srun -N 2 -n 3 --mpi="$m" "$probe"
    else
      run "two_srun_$m" srun -N 2 -n 3 --mpi="$m" "$probe"
    fi
    case $m in
      none) expect_lines "two_srun_$m" "$(gloo3)"
            run two_srun_none_even env MASTER_ADDR="$A1" MASTER_PORT=29514 srun -N 2 --ntasks-per-node=2 --mpi=none "$probe"
            expect_lines two_srun_none_even "$(hier4 slurm)" ;;
      pmi2) [ -e "$moddir/libaccelerate-mpi-mpich.so" ] && expect_lines "two_srun_$m" "$(spread mpich)" ;;
      pmix) [ -e "$moddir/libaccelerate-mpi-openmpi.so" ] && expect_lines "two_srun_$m" "$(spread openmpi)" ;;
    esac
  done
  # a job script on two nodes: the script itself is one process, srun inside it the 3 tasks
  printf '#!/bin/sh\n"%s"\nexec srun --mpi=pmix "%s"\n' "$probe" "$probe" > "$T/two.sh"
  if [ -e "$moddir/libaccelerate-mpi-openmpi.so" ]; then
    run two_sbatch sbatch -N 2 -n 3 --wait -o "$T/two_sbatch.log" "$T/two.sh"
    cp "$T/two_sbatch.log" "$T/two_sbatch.out" 2>/dev/null
    expect_lines two_sbatch "$(spread openmpi)" \
      "probe rank 0 of 1 local 0 of 1 launcher slurm-batch backend single module none omp unset blas unset sum 1"
  fi
  # Accelerate's per-node recipe across the two nodes: one `accelerate launch` per node (srun
  # --ntasks-per-node=1), the machine rank from SLURM_NODEID, machine 1 joining machine 0's
  # rendezvous store at n1's address; 2 processes per node (the launcher sets one thread each).
  printf '#!/bin/sh\necho "recipe on $SLURMD_NODENAME machine_rank $SLURM_NODEID"\nexec "%s" launch --num_machines "$SLURM_NNODES" --machine_rank "$SLURM_NODEID" --main_process_ip %s --main_process_port 29511 --num_processes 4 "%s"\n' \
    "$cli" "$A1" "$probe" > "$T/recipe.sh"
  chmod 755 "$T/recipe.sh"
  run two_recipe srun -N 2 --ntasks-per-node=1 "$T/recipe.sh"
  expect_lines two_recipe \
    "probe rank 0 of 4 local 0 of 2 launcher accelerate backend hierarchical module none omp 1 blas 1 sum 10" \
    "probe rank 1 of 4 local 1 of 2 launcher accelerate backend hierarchical module none omp 1 blas 1 sum 10" \
    "probe rank 2 of 4 local 0 of 2 launcher accelerate backend hierarchical module none omp 1 blas 1 sum 10" \
    "probe rank 3 of 4 local 1 of 2 launcher accelerate backend hierarchical module none omp 1 blas 1 sum 10"
  # one launcher on each node (not both on one)
  [ "$(grep '^recipe on' "$T/two_recipe.out" | sort | tr '\n' ' ')" = "recipe on n1 machine_rank 0 recipe on n2 machine_rank 1 " ] ||
    fail "two_recipe: expected one launcher on n1 (machine 0) and one on n2 (machine 1), got: $(grep '^recipe on' "$T/two_recipe.out" | tr '\n' ' ')"
  # Hugging Face's examples/slurm/submit_multinode.sh line as written (ecosystem 4, D2): no
  # --machine_rank, --rdzv_backend c10d; the machine rank is SLURM_NODEID
  run two_hf srun -N 2 --ntasks-per-node=1 "$cli" launch --num_processes 4 --num_machines 2 \
    --rdzv_backend c10d --main_process_ip "$A1" --main_process_port 29512 "$probe"
  expect_lines two_hf "$(hier4 accelerate)"
  [ $fails = 0 ] && echo PASS || { echo "FAILED: $fails"; exit 1; }
  exit 0
fi

for m in none pmi2 pmix; do
  if ! echo "$plugins" | grep -qw "$m"; then echo "note: srun has no --mpi=$m plugin, not run"; continue; fi
  run "srun_$m" srun -n 2 --mpi="$m" "$probe"
  expect_lines "srun_$m" "$(shm2 slurm)"
  # the MPI backend asked for: the module of the PMI's MPI, or a clear error (never an abort)
  run "srun_${m}_mpi" env ACCELERATE_BACKEND=mpi srun -n 2 --mpi="$m" "$probe"
  case $m in
    none) expect_error "srun_${m}_mpi" "--mpi=pmix" ;;
    pmi2) if [ -e "$moddir/libaccelerate-mpi-mpich.so" ]; then expect_lines "srun_${m}_mpi" "$(mpi2 mpich)"
          else echo "note: no MPICH module, srun_${m}_mpi not run"; fi ;;
    pmix) if [ -e "$moddir/libaccelerate-mpi-openmpi.so" ]; then expect_lines "srun_${m}_mpi" "$(mpi2 openmpi)"
          else echo "note: no Open MPI module, srun_${m}_mpi not run"; fi ;;
  esac
done

# srun --mpi=pmi2 with only the Open MPI module installed: Open MPI would abort inside MPI_Init,
# so the module is not loaded; the error names the mismatch.
if [ -e "$moddir/libaccelerate-mpi-openmpi.so" ] && echo "$plugins" | grep -qw pmi2; then
  mkdir -p "$T/only-openmpi"
  cp "$moddir/libaccelerate-mpi-openmpi.so" "$T/only-openmpi/"
  run srun_pmi2_only_openmpi env ACCELERATE_BACKEND=mpi ACCELERATE_MODULE_DIR="$T/only-openmpi" \
    srun -n 2 --mpi=pmi2 "$probe"
  expect_error srun_pmi2_only_openmpi "the installed MPI module is Open MPI's"
fi

# Threads the user chose are kept.
run srun_omp3 env OMP_NUM_THREADS=3 srun -n 2 "$probe"
expect_lines srun_omp3 \
  "probe rank 0 of 2 local 0 of 2 launcher slurm backend shm module none omp 3 blas 1 sum 3" \
  "probe rank 1 of 2 local 1 of 2 launcher slurm backend shm module none omp 3 blas 1 sum 3"

# sbatch: the script running the probe itself is one process (with a warning naming srun); the
# same script through srun is the 2-task step.
printf '#!/bin/sh\nexec "%s"\n' "$probe" > "$T/direct.sh"
printf '#!/bin/sh\nexec srun "%s"\n' "$probe" > "$T/viasrun.sh"
run sbatch_direct sbatch -n 2 --wait -o "$T/sbatch_direct.log" "$T/direct.sh"
cp "$T/sbatch_direct.log" "$T/sbatch_direct.out" 2>/dev/null
expect_lines sbatch_direct \
  "probe rank 0 of 1 local 0 of 1 launcher slurm-batch backend single module none omp unset blas unset sum 1"
grep -q 'start the program with `srun` to run it as 2 tasks' "$T/sbatch_direct.log" ||
  fail "sbatch_direct: no warning naming srun in $(cat "$T/sbatch_direct.log")"
run sbatch_srun sbatch -n 2 --wait -o "$T/sbatch_srun.log" "$T/viasrun.sh"
cp "$T/sbatch_srun.log" "$T/sbatch_srun.out" 2>/dev/null
expect_lines sbatch_srun "$(shm2 slurm)"

# Accelerate's per-node recipe on one node: one accelerate launch per node, its processes
# joined by the launcher (the launcher sets one thread per process itself).
run recipe srun --ntasks-per-node=1 -n 1 "$cli" launch --num_processes 2 "$probe"
expect_lines recipe "$(shm2 accelerate)"

[ $fails = 0 ] && echo PASS || { echo "FAILED: $fails"; exit 1; }
