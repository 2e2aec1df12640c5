#!/usr/bin/env bash
# Another user's two attacks on gpfarm's files, tried again and again: run as root, with `nobody`
# as the other user. Each try, before root runs
#   gpfarm evolve --route nvrtc --problem search --population 50 --generations 1 --seed 3 --eval cpu -n 2
# (individual 36 fails to compile, so its unit is written to a crash folder):
#   folder squat: nobody takes the name of root's segment folder (`gpfarm-0` in a fresh segment
#     root, as in /dev/shm), mode 0777, with links in it to a file of root's (mode 0600);
#   symlink: nobody pre-creates `/tmp/gpfarm-crashes-<pid>` for the next 200 pids, mode 0777, each
#     with `g0_i36.cu` a link to that file.
# An attack succeeds if root's file changes, if root writes anything into nobody's folders, if
# the run fails, or if what root made (its segment folder, its crash folder and units) is not
# root's alone (0700 folders, 0600 files). Prints one CSV line per try and a summary.
#
#   TRIES=1000 J=8 scripts/cpu/attacks.sh > attacks.csv
set -uo pipefail
TRIES=${TRIES:-1000}
J=${J:-2}
GPFARM=${GPFARM:-target/release/gpfarm}
export GPFARMD=${GPFARMD:-$(dirname "$GPFARM")/gpfarmd}
if [ "$(id -u)" != 0 ]; then
    echo "attacks.sh: needs root (it acts as user nobody too)" >&2
    exit 1
fi
nob() { setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "$1"; }
work=$(mktemp -d)
chmod 755 "$work"
victim="$work/victim"
echo "root's secret" > "$victim"
chmod 600 "$victim"
want=$(sha256sum < "$victim")

one_try() {
    local n=$1 root state next rc=0 why=""
    root=$(mktemp -d -p /dev/shm gpfarm-attack.XXXXXX)
    chmod 1777 "$root"
    state=$(mktemp -d)
    nob "mkdir -m 0777 $root/gpfarm-0 && for k in 0 1; do ln -s $victim $root/gpfarm-0/gpfarm-0-x-\$k; done"
    local before_squat
    before_squat=$( (stat -c "%U %a %y" "$root/gpfarm-0"; ls -lA --time-style=full-iso "$root/gpfarm-0") | sha256sum)
    next=$(cat /proc/sys/kernel/ns_last_pid)
    # One process plants them all, so that the run's own pid falls in the range.
    nob "python3 -c 'import os
for p in range($next + 1, $next + 201):
    d = \"/tmp/gpfarm-crashes-%d\" % p
    try:
        os.mkdir(d); os.chmod(d, 0o777); os.symlink(\"$victim\", d + \"/g0_i36.cu\")
    except OSError:
        pass'"
    local t0 t1 out
    t0=$(date +%s.%N)
    out=$(GPFARM_SEGMENT_ROOT="$root" GPFARM_STATE_DIR="$state" TMPDIR=/tmp "$GPFARM" evolve --route nvrtc \
        --problem search --population 50 --generations 1 --seed 3 --eval cpu -n 2 2>&1) || rc=$?
    t1=$(date +%s.%N)
    [ "$rc" = 0 ] || why="$why run failed ($rc: $(echo "$out" | tail -1));"
    [ "$(sha256sum < "$victim")" = "$want" ] || why="$why root's file changed;"
    [ "$( (stat -c "%U %a %y" "$root/gpfarm-0"; ls -lA --time-style=full-iso "$root/gpfarm-0") | sha256sum)" = "$before_squat" ] || why="$why the squatted folder changed;"
    # Anything of root's inside a folder of nobody's.
    local planted
    planted=$(find "$root/gpfarm-0" /tmp -maxdepth 2 -path '/tmp/gpfarm-crashes-*' -user root -newer "$victim" 2>/dev/null \
        | while read -r f; do [ "$(stat -c %U "$(dirname "$f")" 2>/dev/null)" = nobody ] && echo "$f"; done)
    planted="$planted$(find "$root/gpfarm-0" -user root 2>/dev/null)"
    [ -z "$planted" ] || why="$why root wrote into nobody's folder: $planted;"
    # What root made is root's alone.
    local loose
    loose=$(find "$root" -maxdepth 1 -name 'gpfarm-0-x*' -user root ! -perm 0700 2>/dev/null)
    [ -z "$loose" ] || why="$why segment folder not 0700: $loose;"
    # The crash units of this run (its folder is named in the output when a unit failed).
    local crash
    crash=$(echo "$out" | grep -o '/tmp/gpfarm-crashes-[A-Za-z0-9.]*' | head -1)
    local units=0
    if [ -n "$crash" ]; then
        [ "$(stat -c '%U %a' "$crash" 2>&1)" = "root 700" ] || why="$why crash folder $crash is $(stat -c '%U %a' "$crash");"
        units=$(find "$crash" -type f 2>/dev/null | wc -l)
        [ -z "$(find "$crash" -type f ! -perm 0600 2>/dev/null)" ] || why="$why a crash unit not 0600;"
        [ -z "$(find "$crash" -type l 2>/dev/null)" ] || why="$why a link in the crash folder;"
        rm -rf "$crash"
    fi
    printf '%s,%s,%s,%.2f,"%s"\n' "$n" "$([ -z "$why" ] && echo held || echo BROKEN)" "$units" \
        "$(awk "BEGIN { print $t1 - $t0 }")" "$why"
    nob "rm -rf $root/gpfarm-0; for p in \$(seq $((next + 1)) $((next + 200))); do rm -rf /tmp/gpfarm-crashes-\$p 2>/dev/null; done; true"
    rm -rf "$root" "$state"
}
export -f one_try nob
export victim want GPFARM

echo "try,outcome,crash_units,seconds,why"
seq 1 "$TRIES" | xargs -P "$J" -I{} bash -c 'one_try {}' | tee "$work/all.csv"
held=$(grep -c ',held,' "$work/all.csv")
broken=$(grep -c ',BROKEN,' "$work/all.csv")
with_units=$(awk -F, '$3 > 0' "$work/all.csv" | wc -l)
echo "# $TRIES tries, $J at once: attacks held $held, broke $broken; tries whose run wrote crash units: $with_units" >&2
rm -rf "$work"
[ "$broken" = 0 ]
