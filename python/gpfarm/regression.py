"""Symbolic regression from arrays: a problem directory built from X and y, and a
scikit-learn style estimator over it."""

from __future__ import annotations

import io
import json
import keyword
import numbers
import os
import math
import re
import tempfile
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy

from . import _gpfarm

#: C keywords and the CUDA math functions the default grammar calls: not usable as variable names.
_RESERVED = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "int", "long", "register", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while",
    "c", "target", "sinf", "cosf", "expf", "logf", "sqrtf", "fabsf", "tanhf", "NCASES",
}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Operator:
    """An operator of your own for symbolic regression: `name(x)` (arity 1) or `name(x, y)`
    (arity 2, up to 4: x, y, z, w) is `cuda`, a CUDA C expression over those parameters in
    float (write constants as `1.0f`), using `+ - * /`, the math functions (`sinf`, `expf`,
    `fabsf`, `fminf`, `powf`, ...) and operators declared before it. `numpy`, if given, is the
    same function on NumPy arrays: it is checked against `cuda` at construction.

        softsign = gpfarm.Operator("softsign", 1, "x / (1.0f + fabsf(x))", numpy=lambda x: x / (1 + abs(x)))
        SymbolicRegressor(operators=["add", "sub", "mul", softsign])

    Every route computes it: the compiled ones call it as a `__device__` function, the
    interpreter, the PTX route and the CPU evaluator inline it. A call counts one node of a
    model's size. Bad names, arities and bodies raise ValueError at construction."""

    name: str
    arity: int
    cuda: str
    numpy: Optional[Callable[..., Any]] = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _IDENT.match(self.name):
            raise ValueError(f"Operator name {self.name!r} must be a C identifier")
        if self.name in _BUILTIN_OPERATORS or self.name in _RESERVED:
            raise ValueError(f"Operator name `{self.name}` is taken: built-in operators and C words are reserved")
        if not isinstance(self.arity, int) or not 1 <= self.arity <= len(_PARAMS):
            raise ValueError(f"Operator `{self.name}`: arity must be 1 to {len(_PARAMS)}, not {self.arity!r}")
        if not isinstance(self.cuda, str) or not self.cuda.strip():
            raise ValueError(f"Operator `{self.name}`: cuda must be a C expression over {', '.join(self.params)}")
        try:
            _gpfarm.check_functions(["gpfarm_check"], [self.declaration()])
        except ValueError as e:
            raise ValueError(f"Operator `{self.name}`: {e}") from None
        if self.numpy is not None:
            self._check_numpy()

    @property
    def params(self) -> Tuple[str, ...]:
        return _PARAMS[: self.arity]

    def declaration(self) -> Tuple[str, List[str], str]:
        """As `problem.toml`'s `[[functions]]` takes it: name, parameters, body."""
        return (self.name, list(self.params), self.cuda)

    def _check_numpy(self) -> None:
        names = [f"a{k}" for k in range(self.arity)]
        rng = numpy.random.default_rng(0)
        data = rng.uniform(-3, 3, size=(64, self.arity)).astype(numpy.float32)
        steps = _gpfarm.postfix(names, f"{self.name}({', '.join(names)})", [self.declaration()])
        ours = compute(steps, data).astype(numpy.float64) if steps is not None else None
        with numpy.errstate(all="ignore"):
            theirs = numpy.asarray(self.numpy(*[data[:, k].astype(numpy.float64) for k in range(self.arity)]), dtype=float)
        if ours is None or theirs.shape != ours.shape:
            raise ValueError(f"Operator `{self.name}`: its numpy function must map {self.arity} array(s) to one of the same length")
        same = numpy.isclose(ours, theirs, rtol=1e-4, atol=1e-5) | (numpy.isnan(ours) & numpy.isnan(theirs))
        if not same.all():
            k = int(numpy.argmin(same))
            args = ", ".join(f"{v:.4g}" for v in data[k])
            raise ValueError(
                f"Operator `{self.name}`: its numpy function gives {theirs[k]:.6g} at ({args}) where its cuda body gives {ours[k]:.6g}"
            )


_PARAMS = ("x", "y", "z", "w")

#: Built-in operators by name: arity and how the grammar writes them (`{0}`, `{1}` the operands).
_BUILTIN_OPERATORS: Dict[str, Tuple[int, str]] = {
    "add": (2, "{0} + {1}"),
    "sub": (2, "{0} - {1}"),
    "mul": (2, "{0} * {1}"),
    "div": (2, "{0} / {1}"),
    "sin": (1, "sinf({0})"),
    "cos": (1, "cosf({0})"),
    "tanh": (1, "tanhf({0})"),
    "exp": (1, "expf({0})"),
    "log": (1, "logf({0})"),
    "plog": (1, "logf(fabsf({0})+1.0f)"),
    "sqrt": (1, "sqrtf({0})"),
    "psqrt": (1, "sqrtf(fabsf({0}))"),
    "abs": (1, "fabsf({0})"),
    "pow": (2, "powf({0}, {1})"),
    "min": (2, "fminf({0}, {1})"),
    "max": (2, "fmaxf({0}, {1})"),
    "pdiv": (2, "pdivf({0}, {1})"),
}

#: Operator sets by name.
OPERATOR_SETS: Dict[str, Tuple[str, ...]] = {
    "polynomial": ("add", "sub", "mul"),
    "arithmetic": ("add", "sub", "mul", "div"),
    "standard": ("add", "sub", "mul", "div", "sin", "cos", "tanh", "exp", "plog", "psqrt"),
    "full": ("add", "sub", "mul", "div", "sin", "cos", "tanh", "exp", "plog", "psqrt", "abs", "min", "max", "pow"),
}


def operators(spec: Any = "standard") -> List[Any]:
    """`spec` as a list of operators: a set's name (`OPERATOR_SETS`: "polynomial",
    "arithmetic", "standard", "full"), or a list of built-in operator names and `Operator`s.
    ValueError names what is unknown."""
    if isinstance(spec, str):
        if spec not in OPERATOR_SETS:
            raise ValueError(f"unknown operator set {spec!r}: use one of {', '.join(OPERATOR_SETS)} or a list")
        return list(OPERATOR_SETS[spec])
    try:
        items = list(spec)
    except TypeError:
        raise ValueError(f"operators must be a set's name or a list, not {spec!r}") from None
    if not items:
        raise ValueError("operators must not be empty")
    out = []
    for op in items:
        if isinstance(op, Operator):
            out.append(op)
        elif isinstance(op, str) and op in OPERATOR_SETS:
            out.extend(OPERATOR_SETS[op])
        elif isinstance(op, str) and op in _BUILTIN_OPERATORS:
            out.append(op)
        else:
            raise ValueError(
                f"unknown operator {op!r}: built-in are {', '.join(_BUILTIN_OPERATORS)}; others are gpfarm.Operator(...)"
            )
    names = [o.name if isinstance(o, Operator) else o for o in out]
    repeated = {n for n in names if names.count(n) > 1}
    if repeated:
        raise ValueError(f"operators repeat: {sorted(repeated)}")
    return out


# `default_grammar` takes a keyword of the same name.
_operators = operators


def default_grammar(names: Sequence[str], constants: str = "fitted", operators: Any = "standard",
                    linear_scaling: bool = False, layered: bool = True) -> str:
    """A grammar over the variables `names` in float with `operators` (a set's name or a list,
    see `operators()`; default "standard": + - * /, sin, cos, tanh, exp, protected log
    log(|x|+1) and sqrt sqrt(|x|)), and constants: free parameters fitted to the data
    (`constants="fitted"`, the grammar's `#param#`) or digit strings d.dd that only evolution
    changes (`"digits"`; float literals, so the arithmetic stays in float). Operators of your
    own (`Operator`) must also be declared in the problem: `regression_problem` does it.

    `linear_scaling` (fitted constants only) makes every model `a + b * (f)`: an offset and a
    scale, free parameters fitted with the others, around the evolved expression `f`, so that
    evolution looks for the shape of the data and not its units (Keijzer's linear scaling;
    the 4 nodes count in a model's size).

    `layered` (default, for GE) writes the expression rule three times, `<e>` over `<e2>` over
    `<e3>`, so that codons mapped at random reach operators near the root and leaves below;
    `layered=False` writes one recursive rule with `+ - * /` in parentheses, as derivation trees
    want: each subtree is a subexpression, and their size and depth are bounded when they are
    bred."""
    if constants not in ("fitted", "digits"):
        raise ValueError(f'constants must be "fitted" or "digits", not {constants!r}')
    if linear_scaling and constants != "fitted":
        raise ValueError("linear_scaling needs fitted constants: its offset and scale are free parameters")
    ops = _operators(operators)
    variables = " | ".join(names)

    def forms(operand: str) -> str:
        out = []
        for op in ops:
            if isinstance(op, Operator):
                out.append(f"{op.name}({', '.join([operand] * op.arity)})")
            else:
                arity, form = _BUILTIN_OPERATORS[op]
                if not layered and op in ("add", "sub", "mul", "div"):
                    form = f"({form})"  # a subtree is then a subexpression
                out.append(form.format(*([operand] * arity)))
        return " | ".join(out)

    leaves = "<v> | <v> | <v> | <v> | <c> | <c>"
    if constants == "fitted":
        # A fitted weight on a variable, or a fitted constant.
        c = "<c>  ::= #param# * <v> | #param#\n"
        tail = ""
    else:
        c = "<c>  ::= <d>.<d><d>f | <d>.<d><d>f | -<d>.<d><d>f\n"
        tail = "<d>  ::= 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9\n"
    top = "<e>"
    scaled = ""
    if linear_scaling:
        top = "<e1>"
        scaled = "<e>  ::= #param# + #param# * (<e1>)\n"
    pad = " " if linear_scaling else "  "
    if layered:
        body = (
            f"{top}{pad}::= {forms('<e2>')} | {leaves}\n"
            f"<e2> ::= {forms('<e3>')} | {leaves}\n"
            f"<e3> ::= {forms('<e3>')} | {leaves} | {leaves}\n"
        )
    else:
        body = f"{top}{pad}::= {forms(top)} | {leaves}\n"
    return "# Symbolic regression over " + ", ".join(names) + ".\n" + scaled + body + f"<v>  ::= {variables}\n" + c + tail


def _declared(ops: Any) -> List[Tuple[str, List[str], str]]:
    """The `Operator`s of `ops` as `[[functions]]` declarations."""
    if ops is None:
        return []
    return [o.declaration() for o in operators(ops) if isinstance(o, Operator)]


def _rows(X: Any) -> Tuple[Any, Optional[List[str]]]:
    """X as rows of floats (a float64 array where X is a numeric array or DataFrame, else
    lists), and its column names when it has them (a pandas DataFrame)."""
    names = None
    if hasattr(X, "columns"):
        names = [str(c) for c in X.columns]
    if hasattr(X, "to_numpy"):
        X = X.to_numpy()
    if isinstance(X, numpy.ndarray) and X.ndim == 2 and X.dtype.kind in "fiub" and X.size:
        # Checked as a whole: the same errors as row by row below, found at array speed.
        data = X.astype(numpy.float64, copy=False)
        bad = numpy.argwhere(~numpy.isfinite(data))
        if len(bad):
            raise ValueError(f"X has a NaN or infinite value at row {bad[0][0]}, column {bad[0][1]}")
        big = numpy.argwhere(numpy.abs(data) > FLOAT_MAX)
        if len(big):
            i, j = (int(v) for v in big[0])
            column = f"column {j}" + (f" (`{names[j]}`)" if names is not None and j < len(names) else "")
            raise ValueError(f"X at row {i}, {column} is {data[i, j]:g}: beyond the range of a float (about ±3.4e38)")
        return data, names
    if hasattr(X, "tolist"):
        X = X.tolist()
    try:
        rows = [list(r) for r in X]
    except TypeError:
        raise ValueError("X must be 2-D: one row per case, one column per variable") from None
    if not rows:
        raise ValueError("X has no rows: at least one case is needed")
    width = len(rows[0])
    if width == 0:
        raise ValueError("X has no columns: at least one variable is needed")
    out = []
    for i, r in enumerate(rows):
        if len(r) != width:
            raise ValueError(f"X must be 2-D: row {i} has {len(r)} values, row 0 has {width}")
        try:
            vals = [float(v) for v in r]
        except (TypeError, ValueError):
            raise ValueError(f"X must be 2-D and numeric: row {i} is {r!r}") from None
        bad = [j for j, v in enumerate(vals) if not math.isfinite(v)]
        if bad:
            raise ValueError(f"X has a NaN or infinite value at row {i}, column {bad[0]}")
        big = [j for j, v in enumerate(vals) if abs(v) > FLOAT_MAX]
        if big:
            j = big[0]
            column = f"column {j}" + (f" (`{names[j]}`)" if names is not None and j < len(names) else "")
            raise ValueError(f"X at row {i}, {column} is {vals[j]:g}: beyond the range of a float (about ±3.4e38)")
        out.append(vals)
    return out, names


#: The largest float (the models compute in float).
FLOAT_MAX = 3.4028234663852886e38


def _targets(y: Any, n: int) -> Any:
    """y as floats (a float64 array where y is a numeric array or Series, else a list), checked
    against `n` rows."""
    if hasattr(y, "to_numpy"):
        y = y.to_numpy()
    if isinstance(y, numpy.ndarray) and y.dtype.kind in "fiub" and (y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1)):
        values = y.reshape(-1).astype(numpy.float64, copy=False)
        if len(values) != n:
            raise ValueError(f"X has {n} rows but y has {len(values)} values")
        bad = numpy.flatnonzero(~numpy.isfinite(values))
        if len(bad):
            raise ValueError(f"y has a NaN or infinite value at {bad[0]}")
        big = numpy.flatnonzero(numpy.abs(values) > FLOAT_MAX)
        if len(big):
            raise ValueError(f"y at {big[0]} is {values[big[0]]:g}: beyond the range of a float (about ±3.4e38)")
        return values
    if hasattr(y, "tolist"):
        y = y.tolist()
    try:
        values = list(y)
    except TypeError:
        raise ValueError("y must be 1-D: one target per case") from None
    if values and isinstance(values[0], (list, tuple)):
        if all(len(v) == 1 for v in values):
            values = [v[0] for v in values]
        else:
            raise ValueError("y must be 1-D: one target per case (one output is supported)")
    if len(values) != n:
        raise ValueError(f"X has {n} rows but y has {len(values)} values")
    out = []
    for i, v in enumerate(values):
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"y must be numeric: value {i} is {v!r}") from None
        if not math.isfinite(f):
            raise ValueError(f"y has a NaN or infinite value at {i}")
        if abs(f) > FLOAT_MAX:
            raise ValueError(f"y at {i} is {f:g}: beyond the range of a float (about ±3.4e38)")
        out.append(f)
    return out


def _usable(names: Sequence[str], ops: Any) -> bool:
    """Whether `names` can be the default grammar's variables as they are: C identifiers, not
    reserved, not the formulas' function names or `ops`' own."""
    taken = {"sin", "cos", "tan", "exp", "log", "sqrt", "abs", "tanh", "min", "max", "pow", "pdiv"}
    try:
        taken |= {o.name for o in operators(ops) if isinstance(o, Operator)}
    except ValueError:
        pass  # the operators' own error comes later
    try:
        check_names(names)
        _gpfarm.readable(list(names), names[0], [])  # Rust's own rules (math functions, prefixes)
    except ValueError:
        return False
    return not taken & set(names)


def check_names(names: Sequence[str], hint: str = "rename the column, or pass names=...") -> List[str]:
    """`names` as variable names, or ValueError saying which one cannot be one and, by `hint`,
    what to do."""
    names = [str(n) for n in names]
    for n in names:
        if not _IDENT.match(n) or n in _RESERVED or keyword.iskeyword(n) or n.startswith("gp_") or n.startswith("in_"):
            raise ValueError(
                f"`{n}` cannot be a variable name: names must be C identifiers, not C keywords or the "
                f"math functions the grammar calls ({hint})"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"variable names repeat: {names}")
    return names


def regression_problem(
    X: Any,
    y: Optional[Any] = None,
    *,
    names: Optional[Sequence[str]] = None,
    grammar: Optional[str] = None,
    directory: Optional[Any] = None,
    name: str = "regression",
    operators: Any = None,
    cases: str = "npy",
) -> Path:
    """Writes a regression problem (problem.toml, grammar.bnf, the cases, template.cu) for
    `gpfarm.evolve(problem_dir=...)` or `gpfarm evolve --problem-dir`: one float input per
    column of `X` (named by `names`, a DataFrame's columns, or x0, x1, ...), the target `y`
    (zeros when None), fitness the root mean squared error, and `grammar` (default:
    `default_grammar(names, operators=operators)`); the `Operator`s of `operators` are declared
    as the problem's functions. The cases go to `cases.npy` (`cases="npy"`, default: NumPy's
    array of float64, the inputs' columns then the target, written and read at array speed) or
    to `cases.json` (`cases="json"`: one object per case, to read or edit); both give the run
    the same numbers. Returns the directory (a new temporary one unless `directory` is given).
    Bad shapes, NaN or infinite values and unusable names raise ValueError."""
    if cases not in ("npy", "json"):
        raise ValueError(f'cases must be "npy" or "json", not {cases!r}')
    names, toml, grammar, table = _problem_texts(X, y, names, grammar, name, operators)
    directory = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="gpfarm-regression-"))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "problem.toml").write_text(toml)
    (directory / "grammar.bnf").write_text(grammar)
    for stale in ("cases.json", "cases.npy"):
        (directory / stale).unlink(missing_ok=True)
    if cases == "npy":
        numpy.save(directory / "cases.npy", table)
    else:
        objects = [dict(zip(names, r[:-1]), target=r[-1]) for r in table.tolist()]
        (directory / "cases.json").write_text(json.dumps(objects))
    (directory / "template.cu").write_text(_gpfarm.standard_template(toml))
    _gpfarm.check_problem(directory)
    return directory


def memory_problem(
    X: Any,
    y: Optional[Any] = None,
    *,
    names: Optional[Sequence[str]] = None,
    grammar: Optional[str] = None,
    name: str = "regression",
    operators: Any = None,
) -> Any:
    """The problem `regression_problem` writes, held in memory instead (a
    `gpfarm._gpfarm.MemoryProblem`, the cases as NumPy's array of float64): for
    `gpfarm.evolve(None, memory_problem=...)`, on every route, the GPU's included. No file is
    written; what `fit` runs. Bad shapes, NaN or infinite values and unusable names raise
    ValueError."""
    _, toml, grammar, table = _problem_texts(X, y, names, grammar, name, operators)
    buffer = io.BytesIO()
    numpy.save(buffer, table)
    return _gpfarm.MemoryProblem(name, toml, grammar, _gpfarm.standard_template(toml), buffer.getvalue())


def _problem_texts(X: Any, y: Optional[Any], names: Optional[Sequence[str]], grammar: Optional[str], name: str,
                   operators: Any) -> Tuple[List[str], str, str, Any]:
    """A regression problem's variable names, `problem.toml` and `grammar.bnf` texts, and its
    cases as one C-contiguous float64 table (the inputs' columns, then the target)."""
    rows, frame_names = _rows(X)
    width = len(rows[0])
    names = check_names(names if names is not None else frame_names if frame_names is not None else [f"x{j}" for j in range(width)])
    if len(names) != width:
        raise ValueError(f"{len(names)} names for {width} columns of X")
    targets = _targets(y, len(rows)) if y is not None else [0.0] * len(rows)
    inputs = "".join(f'\n[[inputs]]\nname = "{n}"\ntype = "float"\n' for n in names)
    functions = "".join(
        f"\n[[functions]]\nname = {json.dumps(f)}\nparams = {json.dumps(p)}\nbody = {json.dumps(b)}\n"
        for f, p, b in _declared(operators)
    )
    toml = (
        f'name = "{name}"\n'
        f'description = "Symbolic regression of {len(rows)} cases over {", ".join(names)}; fitness: root mean squared error."\n'
        'start = "e"\nkind = "expression"\nfitness = "rmse"\n'
        f"{inputs}\n[[outputs]]\nname = \"y\"\ntype = \"float\"\n\n[target]\ntype = \"float\"\n{functions}"
    )
    if grammar is None:
        grammar = default_grammar(names, operators=operators if operators is not None else "standard")
    table = numpy.column_stack([numpy.asarray(rows, dtype=numpy.float64), numpy.asarray(targets, dtype=numpy.float64)])
    return list(names), toml, grammar, numpy.ascontiguousarray(table)


try:  # scikit-learn's conventions when it is installed; the same behaviour without it.
    from sklearn.base import BaseEstimator as _Base
    from sklearn.base import RegressorMixin as _Mixin
except ImportError:  # pragma: no cover - exercised where scikit-learn is absent
    import inspect

    class _Base:  # type: ignore[no-redef]
        def get_params(self, deep: bool = True) -> Dict[str, Any]:
            params = inspect.signature(type(self).__init__).parameters
            return {k: getattr(self, k) for k in params if k != "self"}

        def set_params(self, **params: Any) -> "_Base":
            valid = self.get_params()
            for k, v in params.items():
                if k not in valid:
                    raise ValueError(f"invalid parameter {k!r} for {type(self).__name__}: valid are {sorted(valid)}")
                setattr(self, k, v)
            return self

    class _Mixin:  # type: ignore[no-redef]
        def score(self, X: Any, y: Any) -> float:
            truth = _targets(y, len(_rows(X)[0]))
            guess = list(self.predict(X))
            mean = sum(truth) / len(truth)
            total = sum((t - mean) ** 2 for t in truth)
            residual = sum((t - g) ** 2 for t, g in zip(truth, guess))
            return 1.0 - residual / total if total > 0 else 0.0


MODEL_SELECTIONS = ("best", "aic", "bic")
"""What `SymbolicRegressor(model_selection=...)` takes."""


def choose_by_criterion(front: List[Dict[str, Any]], rows: int, criterion: str) -> Optional[Dict[str, Any]]:
    """The model of `front` (dicts of `size`, `fitness` as training RMSE, and `simplified_size`
    where it simplifies) with the lowest information criterion on `rows` training rows:
    n·ln(MSE) + 2k (`"aic"`, Akaike's) or n·ln(MSE) + k·ln(n) (`"bic"`, Schwarz's), where k
    counts each node of the model as shown (`simplified_size`, else `size`); None if no model
    has a finite error. An MSE below 1e-30 counts as 1e-30, so that among exact fits the
    smallest wins."""
    per_node = {"aic": 2.0, "bic": math.log(max(rows, 2))}[criterion]
    scored = []
    for m in front:
        error = m.get("fitness")
        if not isinstance(error, (int, float)) or not math.isfinite(error):
            continue
        size = m.get("simplified_size", m["size"])
        scored.append((rows * math.log(max(error * error, 1e-30)) + per_node * size, size, m))
    return min(scored, key=lambda t: (t[0], t[1]))[2] if scored else None


class SymbolicRegressor(_Mixin, _Base):
    """Symbolic regression by grammatical GP, evaluated by gpfarm (on the GPU when there is one):
    `fit(X, y)` evolves an expression over X's columns, `predict(X)` computes it.

    Parameters mirror `gpfarm evolve`: `population`, `generations` (default None: 30, or with
    `max_time` as many as the time allows), `tournament` (default 5,
    where the command line's is 3: on the comparison's sets it found better models in equal
    time), `elite`,
    `random_state` (the seed; None draws one), `eval` ("auto", "gpu", "cpu"), `route` ("auto",
    "interpreter", "ptx", "nvrtc", "cpu"), and `grammar` (BNF over the variable names; default
    `default_grammar`) or `operators` (for the default grammar: a set's name, "polynomial",
    "arithmetic", "standard" or "full", or a list of built-in names and `gpfarm.Operator`s).
    `representation` (default "tree") holds individuals as derivation trees of the grammar,
    bred by subtree crossover and mutation within `max_size`, over a default grammar of one
    recursive rule; "ge" is grammatical evolution's codons over a layered default grammar
    (docs/regression.md compares them). `optimize_constants` (default True) makes the default grammar's constants
    free parameters fitted by Levenberg-Marquardt, `optimizer_iterations` (default 10) times per
    individual, on at most 8,192 evenly spaced rows (`options={"fit_cases": 0}`: all; the error
    is always on every row); with it False constants are digit strings that only evolution
    changes. `linear_scaling` (default True; with fitted constants) makes the default grammar's
    models `a + b * (f)`, an offset and a scale fitted with the other constants around the
    evolved `f` (`default_grammar`). `prune` (default True) removes from the chosen model the
    terms of its sums that do not earn their place (a term goes when, the constants refitted,
    the training RMSE rises by at most 1e-4 of y's standard deviation; `gpfarm.prune`), in the
    last 5% of `max_time`. `options` passes any other `gpfarm evolve` option, as `gpfarm.evolve` takes it (e.g. `fit_restarts`,
    `fit_cases`, `no_lamarck`, `fit_kernels`). `max_size` (default 50, Operon's; 0: none) is the largest model (nodes of its syntax
    tree) evaluated and bred, `parsimony` a cost per node added to the error in tournaments, and
    `select_tolerance` the share of the best training error within which the smallest model of
    the run's size-error front is chosen (0: the best). `model_selection` (default "best": the
    lowest training error, within `select_tolerance`) can instead choose the front's model by an
    information criterion on the training rows, "aic" (n·ln(MSE) + 2·size) or "bic"
    (n·ln(MSE) + size·ln(n)), which trade error for size; on the comparison's sets neither
    was better than "best" on the sets defaults are chosen on, and both were far better on
    its smallest black-box sets (docs/regression.md, "Choosing the model from the front").
    `max_time` (seconds) is the wall time of
    `fit`, from call to return: the run ends after the generation that completes closest to it
    (within half a generation's time; `generations` stays the most it runs); `n_jobs` is the threads evaluating and fitting on
    the CPU (None or -1: one per core). `verbose` (1) prints a line per generation to stderr:
    its number, best training error, the best model's size and the time so far. `warm_start`
    (False): a fit after the first starts its first generation from the previous fit's
    size-error front (`front_`) instead of from nothing, as `gpfarm evolve --start` does; the
    data may change, its features may not.

    `sympy()` and `latex()` export the chosen model (or an entry of `front_`); `predict`
    computes in memory with NumPy, and a pickled model predicts without a GPU.

    Fitted attributes: `program_` (the chosen model as CUDA C, fitted constants written in:
    as it ran, or pruned), `formula_` (the same model simplified, in plain text over the feature
    names), `fitness_` (its training RMSE), `size_` (the simplified model's size, nodes of its syntax
    tree), `front_` (the run's size-error front by size: dicts of `size`, `fitness`,
    `expression`, `seed` (its codons and parameter values, what `warm_start` starts from), and
    where it simplifies, `formula`, `simplified` and `simplified_size`),
    `history_` (one dict per generation), `route_`, `n_features_in_`, `feature_names_in_` (when
    X had column names), `names_` (the variable names of the run), `shown_names_` (the names
    its formulas show: the columns' as given; where one is not a C identifier, is reserved or is
    a function's name, such as `my col`, `α` or `sin`, the run's variables are x0, x1, ... and
    the formulas and `sympy()` still show the columns' names).
    """

    def __init__(
        self,
        population: int = 300,
        generations: Optional[int] = None,
        tournament: int = 5,
        elite: int = 1,
        random_state: Optional[int] = None,
        eval: str = "auto",
        route: str = "auto",
        grammar: Optional[str] = None,
        operators: Any = "standard",
        representation: str = "tree",
        optimize_constants: bool = True,
        optimizer_iterations: int = 10,
        linear_scaling: bool = True,
        prune: bool = True,
        max_size: int = 50,
        parsimony: float = 0.0,
        select_tolerance: float = 0.0,
        model_selection: str = "best",
        max_time: Optional[float] = None,
        n_jobs: Optional[int] = None,
        verbose: int = 0,
        warm_start: bool = False,
        options: Optional[Dict[str, Any]] = None,
    ):
        self.population = population
        self.generations = generations
        self.tournament = tournament
        self.elite = elite
        self.random_state = random_state
        self.eval = eval
        self.route = route
        self.grammar = grammar
        self.operators = operators
        self.representation = representation
        self.optimize_constants = optimize_constants
        self.optimizer_iterations = optimizer_iterations
        self.linear_scaling = linear_scaling
        self.prune = prune
        self.max_size = max_size
        self.parsimony = parsimony
        self.select_tolerance = select_tolerance
        self.model_selection = model_selection
        self.max_time = max_time
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.warm_start = warm_start
        self.options = options

    def _seed(self) -> int:
        rs = self.random_state
        if rs is None:
            import random

            return random.SystemRandom().randrange(1, 2**63)
        if isinstance(rs, numbers.Integral) and not isinstance(rs, bool):
            rs = int(rs)
            if not 0 <= rs < 2**64:
                raise ValueError(f"random_state must be an int from 0 to 2**64 - 1, None or a random generator, not {rs!r}")
            return rs
        if hasattr(rs, "randint"):
            return int(rs.randint(1, 2**31 - 1))
        raise ValueError(f"random_state must be an int, None or a random generator, not {rs!r}")

    def _max_time(self) -> Optional[float]:
        """`max_time`, or the one `options` give."""
        return self.max_time if self.max_time is not None else (self.options or {}).get("max_time")

    def _generations(self) -> int:
        """`generations`, where None is 30, or with `max_time` as many as it allows."""
        if self.generations is not None:
            return self.generations
        return UNTIL_MAX_TIME if self._max_time() is not None else 30

    def _evaluator(self, rows: int) -> str:
        """`eval` for the run: "auto" becomes "cpu" where the CPU is expected to finish first
        (`small_on_cpu`)."""
        if self.eval != "auto" or self.route not in ("auto", None):
            return self.eval
        iterations = self.optimizer_iterations if self.optimize_constants else 0
        threads = _threads(self.n_jobs) or (os.cpu_count() or 1)
        if small_on_cpu(rows, self.population, self._generations(), iterations, threads, self.max_time):
            return "cpu"
        return "auto"

    def _validate(self, X: Any, y: Any = None, reset: bool = True) -> Tuple[Any, Any]:
        """scikit-learn's validation (its messages, `n_features_in_`, `feature_names_in_`) when
        it is installed; gpfarm's own checks run after it either way."""
        try:
            from sklearn.utils.validation import validate_data
        except ImportError:  # pragma: no cover - exercised where scikit-learn is absent
            return X, y
        if y is None:
            return validate_data(self, X, reset=reset), None
        return validate_data(self, X, y, reset=reset, y_numeric=True)

    def fit(self, X: Any, y: Any) -> "SymbolicRegressor":
        import time

        from . import evolve

        began = time.monotonic()

        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        # Column names name the variables when they are all strings (as scikit-learn takes them).
        columns = list(getattr(X, "columns", []))
        frame_names = [str(c) for c in columns] if columns and all(isinstance(c, str) for c in columns) else None
        previous = getattr(self, "shown_names_", getattr(self, "names_", None)) if self.warm_start else None
        start = [(m["seed"]["genome"], m["seed"].get("params", [])) for m in getattr(self, "front_", []) if m.get("seed")]
        X, y = self._validate(X, y, reset=True)
        rows, _ = _rows(X)
        _targets(y, len(rows))
        shown = frame_names if frame_names is not None else [f"x{j}" for j in range(len(rows[0]))]
        if self.grammar is None and not _usable(shown, self.operators):
            # Columns named `my col`, `α` or `sin`: the run's variables are x0, x1, ...; the
            # formulas show the names as given.
            names = [f"x{j}" for j in range(len(rows[0]))]
        else:
            names = check_names(shown, "rename the DataFrame's column, or fit a NumPy array, whose columns are x0, x1, ...")
        if len(set(shown)) != len(shown):
            raise ValueError(f"the columns' names repeat: {shown}")
        if previous is not None and list(previous) != list(shown):
            raise ValueError(
                f"warm_start: the features {shown} are not the previous fit's {list(previous)}; "
                "set warm_start=False to start afresh"
            )
        for name, least, most in [("population", 1, 10**8), ("generations", 0, UNTIL_MAX_TIME), ("tournament", 1, 10**8),
                                  ("elite", 0, 10**8), ("optimizer_iterations", 0, 10**6), ("max_size", 0, 10**9)]:
            value = getattr(self, name)
            if name == "generations" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
                raise ValueError(f"{name} must be an int from {least} to {most:,}, not {value!r}")
        declared = _declared(self.operators)
        grammar = self.grammar
        if grammar is None:
            grammar = default_grammar(names, "fitted" if self.optimize_constants else "digits", self.operators,
                                      linear_scaling=bool(self.linear_scaling) and bool(self.optimize_constants),
                                      layered=self.representation == "ge")
        if self.model_selection not in MODEL_SELECTIONS:
            raise ValueError(f"model_selection must be one of {', '.join(map(repr, MODEL_SELECTIONS))}, not {self.model_selection!r}")
        if self.representation not in ("tree", "ge"):
            raise ValueError(f'representation must be "tree" or "ge", not {self.representation!r}')
        fitting = {
            "representation": self.representation,
            "fit_iterations": self.optimizer_iterations if self.optimize_constants else 0,
            "max_size": self.max_size,
            "parsimony": self.parsimony,
            "select_tolerance": self.select_tolerance,
            "threads": _threads(self.n_jobs),
            # The next fit in this process takes the GPU worker over instead of starting one.
            "keep_gpu_worker": True,
        }
        if previous is not None and start:
            fitting["start"] = start
        if self.max_time is not None:
            if (not isinstance(self.max_time, numbers.Real) or isinstance(self.max_time, bool)
                    or not 0 < self.max_time < 1e9):
                raise ValueError(f"max_time must be a number of seconds above 0 and below 1e9, not {self.max_time!r}")
            fitting["max_time"] = float(self.max_time)  # less what is spent before the run, below
        known = set(_gpfarm.EvolveConfig.OPTIONS)
        unknown = sorted(set(self.options or {}) - known)
        if unknown:
            raise ValueError(
                f"options: {', '.join(map(repr, unknown))} not known; options are gpfarm evolve's: {', '.join(sorted(known))}"
            )
        fitting.update(self.options or {})
        # X and y reach the run in memory, on every route: no file is written.
        problem = memory_problem(rows, y, names=names, grammar=grammar, operators=self.operators)
        if "max_time" in fitting:  # `max_time` is the wall time of `fit`, from call to return
            # and pruning the chosen model takes its last 5%
            left = fitting["max_time"] - (time.monotonic() - began)
            fitting["max_time"] = max(1e-3, left * (0.95 if self.prune else 1.0))
        result = evolve(
            None,
            memory_problem=problem,
            population=self.population,
            generations=self._generations(),
            tournament=self.tournament,
            elite=self.elite,
            seed=self._seed(),
            eval=self._evaluator(len(rows)),
            route=self.route,
            on_generation=_progress(self._generations() if self._generations() != UNTIL_MAX_TIME else None)
            if self.verbose else None,
            **fitting,
        )
        if result.best_phenotype is None:
            raise RuntimeError("no individual of the run mapped to a program: try more generations or another grammar")
        chosen = result.summary.get("chosen")
        self.front_ = list(result.summary.get("front", []))
        if self.model_selection != "best" and self.front_:
            chosen = choose_by_criterion(self.front_, len(rows), self.model_selection) or chosen
        self.program_ = chosen["expression"] if chosen else result.best_phenotype
        self.fitness_ = chosen["fitness"] if chosen else result.best_fitness
        self.formula_ = chosen.get("formula", self.program_) if chosen else self.program_
        self.size_ = chosen.get("simplified_size", chosen["size"]) if chosen else None
        self.history_ = result.history
        self.route_ = result.route
        self.names_ = names
        self.shown_names_ = list(shown)
        self.functions_ = declared
        self.n_features_in_ = len(rows[0])
        if frame_names is not None:
            self.feature_names_in_ = np_array(frame_names)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        if self.prune:
            # Within max_time; without one, at most a tenth of the fit's time so far (1 s at least).
            limit = self._max_time()
            self._prune(rows, y, began + float(limit) if limit is not None
                        else time.monotonic() + max(1.0, 0.1 * (time.monotonic() - began)))
        # Formulas over the names as given; `_formulas` keeps them over the run's variables.
        self._formulas = {"chosen": self.formula_, "front": {m["expression"]: m.get("formula") for m in self.front_}}
        self.formula_ = self._show(self.formula_)
        for m in self.front_:
            if "formula" in m:
                m["formula"] = self._show(m["formula"])
        return self

    def _show(self, formula: str) -> str:
        """`formula` over the run's variables, written over the names as given."""
        shown = getattr(self, "shown_names_", self.names_)
        if list(shown) == list(self.names_):
            return formula
        lookup = dict(zip(self.names_, shown))
        return re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*\b", lambda t: lookup.get(t.group(0), t.group(0)), formula)

    def _prune(self, rows: Any, y: Any, deadline: Optional[float]) -> None:
        """The chosen model with the terms of its sums that do not earn their place removed and
        its constants refitted (`gpfarm.prune`); `program_`, `formula_`, `size_` and
        `fitness_` then describe the pruned model, and `front_` stays the run's."""
        from . import prune

        functions = getattr(self, "functions_", [])
        if functions:
            return  # the steps inline operators of the user's own: the pruned model would too
        steps = _gpfarm.postfix(list(self.names_), self.program_, functions)
        if steps is None:
            return
        try:
            pruned = prune.prune(steps, self.names_, numpy.asarray(rows, dtype=numpy.float64),
                                 numpy.asarray(_targets(y, len(rows)), dtype=numpy.float64), deadline=deadline)
        except RecursionError:  # a model nested deeper than Python recurses: kept as it is
            return
        if pruned is None:
            return
        code, error = pruned
        readable = _gpfarm.readable(list(self.names_), code, functions)
        if readable is None:
            return
        formula, _, size = readable
        if self.size_ is not None and size > self.size_:
            return  # refitting made a larger formula (constants no longer fold): keep the run's
        self.program_, self.formula_, self.size_, self.fitness_ = code, formula, size, error

    def predict(self, X: Any) -> Any:
        """The chosen model's values on the rows of `X`, as float64 (of float32 values: the model
        computes in float, as it did in the run). Computed in memory with NumPy, in the model's
        own order of operations and C's types: `+ - * /`, `sqrt` and `abs` give the CPU
        evaluator's bits; NumPy's float32 `sin`, `exp`, `log`, ... may differ from the C
        library's in the last bits. Needs no GPU (a pickled model predicts anywhere gpfarm is
        installed)."""
        if not hasattr(self, "program_"):
            raise _not_fitted(self)
        X, _ = self._validate(X, reset=False)
        if X.__class__.__module__.startswith("pandas"):
            X = X.to_numpy()
        try:
            data = numpy.asarray(X, dtype=numpy.float64)
        except (TypeError, ValueError):
            rows, _ = _rows(X)
            data = numpy.asarray(rows, dtype=numpy.float64)
        if data.ndim != 2 or data.shape[0] == 0:
            _rows(X)  # its error says what is wrong
        if data.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {data.shape[1]} columns, the regressor was fitted on {self.n_features_in_}")
        if not numpy.isfinite(data).all():
            _rows(data.tolist())
        functions = getattr(self, "functions_", [])
        steps = _gpfarm.postfix(list(self.names_), self.program_, functions)
        if steps is None:
            # A grammar of the user's own with ints, comparisons or statements: the CPU evaluator.
            problem = memory_problem(data, None, names=self.names_, grammar=self.grammar, operators=self.operators)
            return numpy.asarray(_gpfarm.outputs(problem, self.program_), dtype=float)
        return compute(steps, data.astype(numpy.float32)).astype(numpy.float64)

    def sympy(self, model: Optional[Dict[str, Any]] = None) -> Any:
        """The chosen model (or `model`, an entry of `front_`) as a SymPy expression over
        symbols named as the variables, from its simplified formula. Needs SymPy
        (`pip install sympy`)."""
        if not hasattr(self, "program_"):
            raise _not_fitted(self)
        kept = getattr(self, "_formulas", None)
        if model is None:
            formula = kept["chosen"] if kept else self.formula_
        else:
            own = kept["front"].get(model.get("expression")) if kept and isinstance(kept.get("front"), dict) else None
            formula = own or model.get("formula", model["expression"])
        expr = to_sympy(formula, self.names_, [f for f, _, _ in getattr(self, "functions_", [])])
        shown = getattr(self, "shown_names_", self.names_)
        if list(shown) != list(self.names_):
            import sympy

            expr = expr.xreplace({sympy.Symbol(a): sympy.Symbol(b) for a, b in zip(self.names_, shown)})
        return expr

    def latex(self, model: Optional[Dict[str, Any]] = None) -> str:
        """The chosen model (or `model`, an entry of `front_`) in LaTeX, by SymPy."""
        import sympy

        return sympy.latex(self.sympy(model))


#: NumPy's types for C's.
_TYPES = {"float": numpy.float32, "double": numpy.float64, "int": numpy.int32}


def _pdiv(a: Any, b: Any) -> Any:
    """Protected division in the operands' type: a / b where |b| > 0.001 (0.001f in float32),
    else 1 (NaN b gives 1)."""
    t = numpy.result_type(a, b).type
    return numpy.where(numpy.abs(b) > t(0.001), a / b, t(1))


_FUNCTIONS = {
    "sin": numpy.sin, "cos": numpy.cos, "exp": numpy.exp, "log": numpy.log, "sqrt": numpy.sqrt,
    "fabs": numpy.abs, "tanh": numpy.tanh, "pow": numpy.power, "fmin": numpy.fmin, "fmax": numpy.fmax,
    "pdiv": _pdiv,
}
_BINARY = {"+": numpy.add, "-": numpy.subtract, "*": numpy.multiply, "/": numpy.divide}


def _as(value: Any, ty: Any) -> Any:
    if isinstance(value, numpy.ndarray):
        return value.astype(ty, copy=False)
    return ty(value)


def compute(steps: Sequence[Tuple[str, str, float]], data: Any, params: Optional[Sequence[float]] = None) -> Any:
    """The values of a model given as `_gpfarm.postfix` steps on the columns of `data` (a 2-D
    float32 array), one per row, as float32: each step in the C type it names."""
    stack: List[Any] = []
    with numpy.errstate(all="ignore"):
        for op, ty, value in steps:
            t = _TYPES[ty]
            if op == "const":
                stack.append(t(value))
            elif op == "input":
                stack.append(data[:, int(value)])
            elif op == "param":
                stack.append(numpy.float32(params[int(value)]) if params is not None else numpy.float32(0.0))
            elif op == "convert":
                stack.append(_as(stack.pop(), t))
            elif op == "neg":
                stack.append(-_as(stack.pop(), t))
            elif op in _BINARY:
                b = _as(stack.pop(), t)
                a = _as(stack.pop(), t)
                stack.append(_BINARY[op](a, b))
            elif op in ("pow", "fmin", "fmax", "pdiv"):
                b = _as(stack.pop(), t)
                a = _as(stack.pop(), t)
                stack.append(_as(_FUNCTIONS[op](a, b), t))
            else:
                stack.append(_as(_FUNCTIONS[op](_as(stack.pop(), t)), t))
        (result,) = stack
        return numpy.broadcast_to(_as(result, numpy.float32), (data.shape[0],)).copy()


def to_sympy(formula: str, names: Sequence[str], functions: Sequence[str] = ()) -> Any:
    """`formula` (a model's plain-text formula) as a SymPy expression over symbols `names`;
    calls of `functions` (operators of your own) are SymPy functions of those names. Protected
    division `pdiv(a, b)` becomes `Piecewise((a/b, Abs(b) > 1/1000), (1, True))`."""
    try:
        import sympy
        from sympy.parsing.sympy_parser import parse_expr, standard_transformations
    except ImportError:
        raise ImportError("SymPy is needed to export models: pip install sympy") from None

    def pdiv(a: Any, b: Any) -> Any:
        return sympy.Piecewise((a / b, sympy.Abs(b) > sympy.Rational(1, 1000)), (1, True))

    local = {n: sympy.Symbol(n) for n in names}
    local.update(
        sin=sympy.sin, cos=sympy.cos, tan=sympy.tan, exp=sympy.exp, log=sympy.log, sqrt=sympy.sqrt,
        abs=sympy.Abs, tanh=sympy.tanh, min=sympy.Min, max=sympy.Max, pow=sympy.Pow, pdiv=pdiv,
    )
    local.update({f: sympy.Function(f) for f in functions})
    return parse_expr(formula.replace("^", "**"), local_dict=local, transformations=standard_transformations)


#: The generations of a fit under `max_time` when `generations` is None: the time ends it.
UNTIL_MAX_TIME = 1_000_000_000

#: Measured on an H200 host (16 cores; results/2026-11-26-h200/estimator-keep): a GPU fit after
#: the first in a process (its kernels cached, the GPU worker kept) starts in about 0.2 s and then
#: takes about 70 ms a generation at any size up to 10^4 rows (100 ms at 10^5); the CPU takes
#: about 26 ns a row, individual and evaluation on one core (25-37 ns measured), where a
#: generation that fits constants evaluates each individual 1 + 2 x iterations times.
GPU_START_S = 0.2
GPU_GENERATION_S = 0.07
CPU_EVALUATION_S = 26e-9


def small_on_cpu(rows: int, population: int, generations: int, iterations: int, threads: int,
                 max_time: Optional[float] = None) -> bool:
    """Whether the CPU is expected to finish a fit before the GPU would: the estimator's
    `eval="auto"` then stays on the CPU. The estimate: the CPU spends `CPU_EVALUATION_S` per row,
    individual and evaluation over `threads`; the GPU `GPU_START_S` once and `GPU_GENERATION_S`
    per generation. Under `max_time` the generations are those the faster side would run."""
    cpu = rows * population * (1 + 2 * iterations) * CPU_EVALUATION_S / max(1, threads)
    runs = generations + 1
    if max_time is not None:
        runs = min(runs, max(1.0, max_time / max(min(cpu, GPU_GENERATION_S), 1e-9)))
    return runs * cpu < GPU_START_S + runs * GPU_GENERATION_S


def _progress(generations: Optional[int]) -> Callable[[Dict[str, Any]], None]:
    """A line per generation on stderr, as `verbose` asks."""
    import sys
    import time

    start = time.monotonic()

    def show(record: Dict[str, Any]) -> None:
        size = record.get("best_size")
        print(
            f"generation {record['generation']}{'' if generations is None else f'/{generations}'}: best {record['best']:.6g}"
            f"{'' if size is None else f', size {size}'}, {time.monotonic() - start:.1f} s",
            file=sys.stderr,
            flush=True,
        )

    return show


def _threads(n_jobs: Any) -> Optional[int]:
    """`n_jobs` as scikit-learn means it, as a thread count (None: one per core)."""
    if n_jobs is None or n_jobs == -1:
        return None
    if isinstance(n_jobs, int) and not isinstance(n_jobs, bool) and n_jobs >= 1:
        return n_jobs
    if isinstance(n_jobs, int) and n_jobs < -1:  # scikit-learn's -2: all cores but one, ...
        import os

        return max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    raise ValueError(f"n_jobs must be None, -1 or an int of at least 1, not {n_jobs!r}")


def _not_fitted(estimator: Any) -> Exception:
    message = f"This {type(estimator).__name__} instance is not fitted yet: call fit first."
    try:
        from sklearn.exceptions import NotFittedError

        return NotFittedError(message)
    except ImportError:  # pragma: no cover
        return AttributeError(message)


def np_array(values: List[str]) -> Any:
    """`values` as a numpy array of objects (scikit-learn's type for feature names), or the list."""
    try:
        import numpy

        return numpy.asarray(values, dtype=object)
    except ImportError:  # pragma: no cover
        return values
