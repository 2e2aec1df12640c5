"""Fit a symbolic regression to a CSV file with gpfarm, notebook style.

    pip install ./python
    python examples/regression_csv.py data.csv --target y

Every column but the target is a variable, named by its header when pandas is installed (else
x0, x1, ...); a quarter of the rows, drawn with the seed, is held out to test the fitted program.
Without a GPU the CPU evaluates.
"""

import argparse
import csv

import numpy as np

import gpfarm

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("csv", help="a CSV file with a header row")
parser.add_argument("--target", help="the column to predict (default: the last)")
parser.add_argument("--population", type=int, default=300)
parser.add_argument("--generations", type=int, default=30)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--eval", default="auto", help="auto, gpu or cpu")
args = parser.parse_args()

# Read the table; the target is one column, the variables the others.
with open(args.csv, newline="") as f:
    rows = list(csv.reader(f))
header = rows[0]
target = args.target or header[-1]
if target not in header:
    raise SystemExit(f"no column {target!r} in {header}")
table = np.array([[float(v) for v in r] for r in rows[1:]])
t = header.index(target)
names = [h for j, h in enumerate(header) if j != t]
X, y = np.delete(table, t, axis=1), table[:, t]
try:
    import pandas as pd

    X = pd.DataFrame(X, columns=names)
except ImportError:
    pass

# Hold out a quarter to test on.
order = np.random.RandomState(args.seed).permutation(len(y))
test, train = order[: len(y) // 4], order[len(y) // 4 :]
pick = (lambda rows: X.iloc[rows]) if hasattr(X, "iloc") else (lambda rows: X[rows])

model = gpfarm.SymbolicRegressor(
    population=args.population, generations=args.generations, random_state=args.seed, eval=args.eval
)
model.fit(pick(train), y[train])
rmse = lambda rows: float(np.sqrt(np.mean((model.predict(pick(rows)) - y[rows]) ** 2)))
print(f"program: {model.program_}")
print(f"route: {model.route_}, {len(model.history_) - 1} generations")
print(f"train RMSE {rmse(train):.4g}, test RMSE {rmse(test):.4g} (target standard deviation {y.std():.4g})")
