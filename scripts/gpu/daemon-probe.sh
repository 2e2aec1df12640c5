#!/usr/bin/env bash
# Is the host's slow spell a property of the machine or of the daemons of one run? Compiles a
# fixed random population (160 units of 8) with fresh farms, in process, and through resident
# daemons, idle and while an overlap run of keijzer6 is slow, and prints what the kernel says
# about a daemon of each kind (status, scheduling, limits, environment).
set -uo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
source "$here/env.sh"
# As when this was run: the CUDA driver's compute cache on (gpfarm now switches it off).
export CUDA_CACHE_DISABLE=0
info() {
  local pid=$1
  echo "--- $2: pid $pid $(tr '\0' ' ' </proc/$pid/cmdline)"
  grep -E "^(Cpus_allowed_list|Mems_allowed_list|Sig(Blk|Ign|Cgt)|Seccomp|NoNewPrivs|Speculation|SpeculationIndirect|Cap(Eff|Prm)|THP_enabled|x86_Thread)" /proc/$pid/status | tr -s '\t ' ' ' | tr '\n' ';'; echo
  grep -E "^(policy|prio|nr_migrations|nr_switches|se.nr_migrations)" /proc/$pid/sched | tr -s ' ' | tr '\n' ';'; echo
  diff <(sed 1d /proc/$pid/limits) <(sed 1d /proc/self/limits) >/dev/null && echo "limits: as this shell" || sed 1d /proc/$pid/limits
  echo "environment beyond this shell's: $(comm -23 <(tr '\0' '\n' </proc/$pid/environ | sort) <(env | sort) | tr '\n' ' ')"
  echo "maps: $(wc -l </proc/$pid/maps) mappings; cuda libs: $(grep -oE '[^/]*(cuda|nvidia|nvrtc)[^/ ]*\.so[^ ]*' /proc/$pid/maps | sort -u | tr '\n' ' ')"
}
farm_probe() { $bin compile --compiler farm -n ${FARM_N:-16} --random ${FARM_K:-1280} --per-unit 8 --seed 7 "$@" 2>&1 | grep -E "wall|busiest" | tr -s ' ' | tr '\n' ' '; echo; }
inproc_probe() { $bin compile --compiler inprocess --random 96 --per-unit 8 --seed 7 2>&1 | grep -E "wall" | tr -s ' '; }
{ cat /proc/cmdline; dmesg 2>/dev/null | tail -5; } | tee "$r/kernel.txt"
echo "idle, fresh farm: $(farm_probe)"
echo "idle, in process: $(inproc_probe)"
echo "idle, fresh farm: $(farm_probe)"
timeout -s INT 40 $bin evolve --problem keijzer6 --population 300 --generations 100 --eval gpu --seed 1 --json \
  --daemons ${FARM_N:-16} --trace-units "$r/slow.units.jsonl" > "$r/slow.jsonl" 2> "$r/slow.err" &
ev=$!
sleep 4
info "$(pgrep -x gpfarmd | head -1)" "daemon of the overlap run"
farm_probe > "$r/farm_during.txt" &
fp=$!
sleep 1.2
info "$(pgrep -x gpfarmd | sort -n | tail -1)" "daemon of a fresh farm during the run"
wait $fp
echo "during the run, fresh farm (32 daemons share 16 cores): $(cat "$r/farm_during.txt")"
echo "during the run, in process: $(inproc_probe)"
wait $ev
echo "overlap run: $(python3 "$here/snap.py" --summary "$r/slow.jsonl")"
echo "after, fresh farm: $(farm_probe)"
$bin daemons start -n ${FARM_N:-16} --detach > "$r/resident.txt" 2>&1
sleep 1
info "$(pgrep -x gpfarmd | head -1)" "resident daemon"
echo "resident, attached: $(farm_probe --attach)"
echo "resident, attached: $(farm_probe --attach)"
$bin daemons stop >/dev/null 2>&1
timeout -s INT 60 $bin evolve --problem keijzer6 --population 300 --generations 10 --eval gpu --seed 1 --json --compiler inprocess \
  > "$r/inproc.jsonl" 2> "$r/inproc.err"
python3 - "$r/inproc.jsonl" "$r/slow.jsonl" <<'PY'
import json, sys
for f in sys.argv[1:]:
    g = []
    for l in open(f):
        try: g.append(json.loads(l))
        except ValueError: pass
    g = [x for x in g if "compile" in x]
    units = sum(x["compile"]["units"] for x in g); busy = sum(x["compile"]["busy_ms"] for x in g)
    comp = sum(x["individuals"]["compiled"] for x in g)
    print(f"{f.split('/')[-1]}: {len(g)} generations, {units} units, {comp} individuals, compile busy {busy/max(units,1):.1f} ms per unit, {busy/max(comp,1):.2f} ms per individual")
PY
tar czf "$out/dprobe.tgz" -C "$r" .
