#!/usr/bin/env bash
# Writes the 100,000-case regression problem into directory $1: keijzer6's grammar and template,
# x over [1, 64], target ln x + 0.5772 (as float32).
set -euo pipefail
reg="$1"; mkdir -p "$reg"
cp gp/problems/keijzer6/{grammar.bnf,template.cu} "$reg/"
sed 's/^name = "keijzer6"/name = "regression100k"/' gp/problems/keijzer6/problem.toml > "$reg/problem.toml"
python3 - "$reg/cases.json" <<'PY'
import json, math, struct, sys
f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]
n = 100_000
cases = [{"x": f32(1 + 63 * c / (n - 1)), "target": f32(math.log(1 + 63 * c / (n - 1)) + 0.5772)} for c in range(n)]
json.dump(cases, open(sys.argv[1], "w"))
PY
