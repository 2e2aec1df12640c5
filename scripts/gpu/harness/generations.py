#!/usr/bin/env python3
"""Per generation of an `evolve --json` file (also of a run stopped early): a first line with
LABEL, the last generation's best and the mean generation time, then one line per record key
(default: generation_ms, fit_worker_ms, fit_ms, eval_ms) with its value in every generation.

usage: generations.py FILE LABEL [KEY...]
"""
import json
import sys


def generations(path):
    gens = []
    for line in open(path):
        try:
            g = json.loads(line)
        except ValueError:
            continue
        if "generation_ms" in g:
            gens.append(g)
    return gens


def main(path, label, keys):
    gens = generations(path)
    mean = sum(g["generation_ms"] for g in gens) / max(len(gens), 1)
    print(f"{label}: best {gens[-1]['best'] if gens else None}, mean generation {mean:.1f} ms")
    for k in keys or ["generation_ms", "fit_worker_ms", "fit_ms", "eval_ms"]:
        print(f"  {k}: " + " ".join(f"{g.get(k, 0):.1f}" for g in gens))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
