#!/usr/bin/env python3
"""One line for an `evolve --json` file: how many generation records it holds and their mean
generation time. Also reads the file of a run that was stopped early.

usage: summary.py FILE
"""
import json
import sys


def summary(path):
    gens = []
    for line in open(path):
        try:
            gens.append(json.loads(line))
        except ValueError:
            pass
    gens = [g for g in gens if "generation_ms" in g]
    mean = sum(g["generation_ms"] for g in gens) / max(len(gens), 1)
    return f"{len(gens)} generations, mean {mean:.0f} ms/gen"


if __name__ == "__main__":
    print(summary(sys.argv[1]))
