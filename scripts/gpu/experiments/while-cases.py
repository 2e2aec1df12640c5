#!/usr/bin/env python3
"""Writes a copy of examples/while-search with N cases into DIR: lists of 3 to 20 ints in 0..=50,
half of them holding SEARCH (seeded, so every run gets the same cases).

    while-cases.py N DIR
"""
import json
import pathlib
import random
import shutil
import sys

n, out = int(sys.argv[1]), pathlib.Path(sys.argv[2])
src = pathlib.Path(__file__).resolve().parents[3] / "examples" / "while-search"
out.mkdir(parents=True, exist_ok=True)
for f in ["grammar.bnf", "problem.toml", "template.cu"]:
    shutil.copy(src / f, out / f)
rng = random.Random(n)
cases = []
for c in range(n):
    values = [rng.randint(0, 50) for _ in range(rng.randint(3, 20))]
    if c % 2 == 0:
        search = rng.choice(values)
    else:
        search = rng.choice([v for v in range(51) if v not in values] or [51])
    cases.append({"INPUT": values, "SEARCH": search, "target": values.index(search) if search in values else -1})
(out / "cases.json").write_text(json.dumps(cases))
