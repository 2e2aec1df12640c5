#!/usr/bin/env bash
# What differs between the host's fast and slow spells: runs keijzer6 (100 generations, stopped
# after LIMIT seconds) once per NAME:FLAGS[:VAR=VALUE] argument (commas for spaces) and, three seconds in,
# takes two snapshots three seconds apart of the daemons, the GP process and the machine
# (snap.py), with a one-thread CPU and page-touch microbenchmark between them.
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/env.sh"
# As when this was run: the CUDA driver's compute cache on (gpfarm now switches it off).
export CUDA_CACHE_DISABLE=${CUDA_CACHE_DISABLE:-0}
bench() {
  python3 -c '
import time
t = time.perf_counter(); s = 0
for i in range(3000000): s += i
a = time.perf_counter() - t
t = time.perf_counter(); b = bytearray(1 << 28); b[::4096] = bytes(65536); c = time.perf_counter() - t
print(f"loop {a*1000:.0f} ms, touch 256 MB {c*1000:.0f} ms")'
  .carry/chase
  $bin compile --compiler inprocess --random 96 --per-unit 8 --seed 7 2>&1 | sed -n 's/^ *wall/inprocess NVRTC, 12 units: wall/p'
}
{
  uname -r; ldd --version | head -1; lscpu | grep -E "^(CPU\(s\)|Thread|Core|Socket|NUMA|Model name|L3)"
  echo "thp $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
  echo "numa_balancing $(cat /proc/sys/kernel/numa_balancing 2>/dev/null)"
  echo "cgroup cpu.max $(cat /sys/fs/cgroup/cpu.max 2>/dev/null) memory.max $(cat /sys/fs/cgroup/memory.max 2>/dev/null)"
  echo "virtio: $(ls /sys/bus/virtio/drivers 2>/dev/null | tr '\n' ' ')"
  grep -E "MemTotal|MemFree|MemAvailable|Cached|AnonPages" /proc/meminfo | tr -s ' ' | tr '\n' ';'; echo
  echo "idle bench: $(bench)"
} 2>&1 | tee "$r/probe-host.txt"
for spec in "$@"; do
  name=${spec%%:*}; rest=${spec#*:}; flags=${rest%%:*}; flags=${flags//,/ }
  envs=; [[ $rest == *:* ]] && envs=${rest#*:}
  env $envs timeout -s INT "${LIMIT:-40}" $bin evolve --problem keijzer6 --population 300 --generations 100 --eval ${EVAL:-gpu} --seed 1 \
    --json $flags > "$r/$name.jsonl" 2> "$r/$name.err" &
  pid=$!
  sleep 3; python3 "$here/snap.py" "$r/$name.a.json"
  b=$(bench); sleep 1; python3 "$here/snap.py" "$r/$name.b.json"
  wait $pid; rc=$?
  echo "== $name ($flags${envs:+; $envs}) rc=$rc $(python3 "$here/snap.py" --summary "$r/$name.jsonl" 2>&1)"
  python3 "$here/snap.py" --diff "$r/$name.a.json" "$r/$name.b.json" "$b"
  echo "after the run, idle: $(bench | tr '\n' ' ')"
done 2>&1 | tee "$r/probe.txt"
tar czf "$out/probe.tgz" -C "$r" .
