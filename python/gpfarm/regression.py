"""Symbolic regression from arrays: a problem directory built from X and y, and a
scikit-learn style estimator over it."""

from __future__ import annotations

import json
import keyword
import math
import re
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

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


def default_grammar(names: Sequence[str], constants: str = "fitted") -> str:
    """An arithmetic grammar over `names` in float: + - * /, protected log and sqrt, sin, cos,
    exp, tanh, and constants: free parameters fitted to the data (`constants="fitted"`, the
    grammar's `#param#`) or digit strings d.dd that only evolution changes (`"digits"`; float
    literals, so the arithmetic stays in float)."""
    if constants not in ("fitted", "digits"):
        raise ValueError(f'constants must be "fitted" or "digits", not {constants!r}')
    variables = " | ".join(names)
    ops = "<e> + <e> | <e> - <e> | <e> * <e> | <e> / <e>"
    calls = "sinf(<e>) | cosf(<e>) | tanhf(<e>) | expf(<e>) | logf(fabsf(<e>)+1.0f) | sqrtf(fabsf(<e>))"
    top = ops.replace("<e>", "<e2>")
    mid = ops.replace("<e>", "<e3>")
    leaves = "<v> | <v> | <v> | <v> | <c> | <c>"
    if constants == "fitted":
        # A fitted weight on a variable, or a fitted constant.
        c = "<c>  ::= #param# * <v> | #param#\n"
        tail = ""
    else:
        c = "<c>  ::= <d>.<d><d>f | <d>.<d><d>f | -<d>.<d><d>f\n"
        tail = "<d>  ::= 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9\n"
    return (
        "# Symbolic regression over " + ", ".join(names) + ".\n"
        f"<e>  ::= {top} | {calls.replace('<e>', '<e2>')} | {leaves}\n"
        f"<e2> ::= {mid} | {calls.replace('<e>', '<e3>')} | {leaves}\n"
        f"<e3> ::= {ops.replace('<e>', '<e3>')} | {calls.replace('<e>', '<e3>')} | {leaves} | {leaves}\n"
        f"<v>  ::= {variables}\n" + c + tail
    )


def _rows(X: Any) -> Tuple[List[List[float]], Optional[List[str]]]:
    """X as rows of floats, and its column names when it has them (a pandas DataFrame)."""
    names = None
    if hasattr(X, "columns"):
        names = [str(c) for c in X.columns]
    if hasattr(X, "to_numpy"):
        X = X.to_numpy()
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
        out.append(vals)
    return out, names


def _targets(y: Any, n: int) -> List[float]:
    if hasattr(y, "to_numpy"):
        y = y.to_numpy()
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
        out.append(f)
    return out


def check_names(names: Sequence[str]) -> List[str]:
    """`names` as variable names, or ValueError saying which one cannot be one."""
    names = [str(n) for n in names]
    for n in names:
        if not _IDENT.match(n) or n in _RESERVED or keyword.iskeyword(n) or n.startswith("gp_") or n.startswith("in_"):
            raise ValueError(
                f"`{n}` cannot be a variable name: names must be C identifiers, not C keywords or the "
                "math functions the grammar calls (rename the column, or pass names=...)"
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
) -> Path:
    """Writes a regression problem (problem.toml, grammar.bnf, cases.json, template.cu) for
    `gpfarm.evolve(problem_dir=...)`: one float input per column of `X` (named by `names`, a
    DataFrame's columns, or x0, x1, ...), the target `y` (zeros when None), fitness the root
    mean squared error, and `grammar` (default: `default_grammar(names)`). Returns the
    directory (a new temporary one unless `directory` is given). Bad shapes, NaN or infinite
    values and unusable names raise ValueError."""
    rows, frame_names = _rows(X)
    width = len(rows[0])
    names = check_names(names if names is not None else frame_names if frame_names is not None else [f"x{j}" for j in range(width)])
    if len(names) != width:
        raise ValueError(f"{len(names)} names for {width} columns of X")
    targets = _targets(y, len(rows)) if y is not None else [0.0] * len(rows)
    directory = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="gpfarm-regression-"))
    directory.mkdir(parents=True, exist_ok=True)
    inputs = "".join(f'\n[[inputs]]\nname = "{n}"\ntype = "float"\n' for n in names)
    toml = (
        f'name = "{name}"\n'
        f'description = "Symbolic regression of {len(rows)} cases over {", ".join(names)}; fitness: root mean squared error."\n'
        'start = "e"\nkind = "expression"\nfitness = "rmse"\n'
        f"{inputs}\n[[outputs]]\nname = \"y\"\ntype = \"float\"\n\n[target]\ntype = \"float\"\n"
    )
    (directory / "problem.toml").write_text(toml)
    (directory / "grammar.bnf").write_text(grammar if grammar is not None else default_grammar(names))
    cases = [dict(zip(names, r), target=t) for r, t in zip(rows, targets)]
    (directory / "cases.json").write_text(json.dumps(cases))
    (directory / "template.cu").write_text(_gpfarm.standard_template(toml))
    _gpfarm.check_problem(directory)
    return directory


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


class SymbolicRegressor(_Mixin, _Base):
    """Symbolic regression by grammatical GP, evaluated by gpfarm (on the GPU when there is one):
    `fit(X, y)` evolves an expression over X's columns, `predict(X)` computes it.

    Parameters mirror `gpfarm evolve`: `population`, `generations`, `tournament`, `elite`,
    `random_state` (the seed; None draws one), `eval` ("auto", "gpu", "cpu"), `route` ("auto",
    "interpreter", "ptx", "nvrtc", "cpu"), and `grammar` (BNF over the variable names; default
    `default_grammar`). `optimize_constants` (default True) makes the default grammar's constants
    free parameters fitted by Levenberg-Marquardt, `optimizer_iterations` (default 10) times per
    individual; with it False constants are digit strings that only evolution changes. `options`
    passes any other `gpfarm evolve` option, as `gpfarm.evolve` takes it (e.g. `fit_restarts`,
    `fit_cases`, `no_lamarck`). `max_size` (0: none) is the largest model (nodes of its syntax
    tree) evaluated, `parsimony` a cost per node added to the error in tournaments, and
    `select_tolerance` the share of the best training error within which the smallest model of
    the run's size-error front is chosen (0: the best). `max_time` (seconds) ends the run after
    the first generation completed once that much time has passed since generation 0 began
    (`generations` stays the most it runs); `n_jobs` is the threads evaluating and fitting on
    the CPU (None or -1: one per core).

    `sympy()` and `latex()` export the chosen model (or an entry of `front_`); `predict`
    computes in memory with NumPy, and a pickled model predicts without a GPU.

    Fitted attributes: `program_` (the chosen model as it ran: CUDA C, fitted constants
    written in), `formula_` (the same model simplified, in plain text over the feature names),
    `fitness_` (its training RMSE), `size_` (the simplified model's size, nodes of its syntax
    tree), `front_` (the run's size-error front by size: dicts of `size`, `fitness`,
    `expression`, and where it simplifies, `formula`, `simplified` and `simplified_size`),
    `history_` (one dict per generation), `route_`, `n_features_in_`, `feature_names_in_` (when
    X had column names), `names_` (the variable names used).
    """

    def __init__(
        self,
        population: int = 300,
        generations: int = 30,
        tournament: int = 3,
        elite: int = 1,
        random_state: Optional[int] = None,
        eval: str = "auto",
        route: str = "auto",
        grammar: Optional[str] = None,
        optimize_constants: bool = True,
        optimizer_iterations: int = 10,
        max_size: int = 0,
        parsimony: float = 0.0,
        select_tolerance: float = 0.0,
        max_time: Optional[float] = None,
        n_jobs: Optional[int] = None,
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
        self.optimize_constants = optimize_constants
        self.optimizer_iterations = optimizer_iterations
        self.max_size = max_size
        self.parsimony = parsimony
        self.select_tolerance = select_tolerance
        self.max_time = max_time
        self.n_jobs = n_jobs
        self.options = options

    def _seed(self) -> int:
        rs = self.random_state
        if rs is None:
            import random

            return random.SystemRandom().randrange(1, 2**63)
        if isinstance(rs, int):
            return rs
        if hasattr(rs, "randint"):
            return int(rs.randint(1, 2**31 - 1))
        raise ValueError(f"random_state must be an int, None or a random generator, not {rs!r}")

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
        from . import evolve

        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        # Column names name the variables when they are all strings (as scikit-learn takes them).
        columns = list(getattr(X, "columns", []))
        frame_names = [str(c) for c in columns] if columns and all(isinstance(c, str) for c in columns) else None
        X, y = self._validate(X, y, reset=True)
        rows, _ = _rows(X)
        _targets(y, len(rows))
        names = check_names(frame_names if frame_names is not None else [f"x{j}" for j in range(len(rows[0]))])
        if not isinstance(self.optimizer_iterations, int) or self.optimizer_iterations < 0:
            raise ValueError(f"optimizer_iterations must be an int of at least 0, not {self.optimizer_iterations!r}")
        grammar = self.grammar
        if grammar is None:
            grammar = default_grammar(names, "fitted" if self.optimize_constants else "digits")
        fitting = {
            "fit_iterations": self.optimizer_iterations if self.optimize_constants else 0,
            "max_size": self.max_size,
            "parsimony": self.parsimony,
            "select_tolerance": self.select_tolerance,
            "threads": _threads(self.n_jobs),
        }
        if self.max_time is not None:
            if not isinstance(self.max_time, (int, float)) or not self.max_time > 0:
                raise ValueError(f"max_time must be a number of seconds above 0, not {self.max_time!r}")
            fitting["max_time"] = float(self.max_time)
        fitting.update(self.options or {})
        with tempfile.TemporaryDirectory(prefix="gpfarm-fit-") as tmp:
            directory = regression_problem(rows, y, names=names, grammar=grammar, directory=tmp)
            result = evolve(
                None,
                problem_dir=directory,
                population=self.population,
                generations=self.generations,
                tournament=self.tournament,
                elite=self.elite,
                seed=self._seed(),
                eval=self.eval,
                route=self.route,
                **fitting,
            )
        if result.best_phenotype is None:
            raise RuntimeError("no individual of the run mapped to a program: try more generations or another grammar")
        chosen = result.summary.get("chosen")
        self.front_ = list(result.summary.get("front", []))
        self.program_ = chosen["expression"] if chosen else result.best_phenotype
        self.fitness_ = chosen["fitness"] if chosen else result.best_fitness
        self.formula_ = chosen.get("formula", self.program_) if chosen else self.program_
        self.size_ = chosen.get("simplified_size", chosen["size"]) if chosen else None
        self.history_ = result.history
        self.route_ = result.route
        self.names_ = names
        self.n_features_in_ = len(rows[0])
        if frame_names is not None:
            self.feature_names_in_ = np_array(frame_names)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return self

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
        steps = _gpfarm.postfix(list(self.names_), self.program_)
        if steps is None:
            # A grammar of the user's own with ints, comparisons or statements: the CPU evaluator.
            with tempfile.TemporaryDirectory(prefix="gpfarm-predict-") as tmp:
                directory = regression_problem(data.tolist(), None, names=self.names_, grammar=self.grammar, directory=tmp)
                return numpy.asarray(_gpfarm.outputs(directory, self.program_), dtype=float)
        return compute(steps, data.astype(numpy.float32)).astype(numpy.float64)

    def sympy(self, model: Optional[Dict[str, Any]] = None) -> Any:
        """The chosen model (or `model`, an entry of `front_`) as a SymPy expression over
        symbols named as the variables, from its simplified formula. Needs SymPy
        (`pip install sympy`)."""
        if not hasattr(self, "program_"):
            raise _not_fitted(self)
        formula = self.formula_ if model is None else model.get("formula", model["expression"])
        return to_sympy(formula, self.names_)

    def latex(self, model: Optional[Dict[str, Any]] = None) -> str:
        """The chosen model (or `model`, an entry of `front_`) in LaTeX, by SymPy."""
        import sympy

        return sympy.latex(self.sympy(model))


#: NumPy's types for C's.
_TYPES = {"float": numpy.float32, "double": numpy.float64, "int": numpy.int32}
_FUNCTIONS = {
    "sin": numpy.sin, "cos": numpy.cos, "exp": numpy.exp, "log": numpy.log, "sqrt": numpy.sqrt,
    "fabs": numpy.abs, "tanh": numpy.tanh, "pow": numpy.power, "fmin": numpy.fmin, "fmax": numpy.fmax,
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
            elif op in ("pow", "fmin", "fmax"):
                b = _as(stack.pop(), t)
                a = _as(stack.pop(), t)
                stack.append(_as(_FUNCTIONS[op](a, b), t))
            else:
                stack.append(_as(_FUNCTIONS[op](_as(stack.pop(), t)), t))
        (result,) = stack
        return numpy.broadcast_to(_as(result, numpy.float32), (data.shape[0],)).copy()


def to_sympy(formula: str, names: Sequence[str]) -> Any:
    """`formula` (a model's plain-text formula) as a SymPy expression over symbols `names`."""
    try:
        import sympy
        from sympy.parsing.sympy_parser import parse_expr, standard_transformations
    except ImportError:
        raise ImportError("SymPy is needed to export models: pip install sympy") from None
    local = {n: sympy.Symbol(n) for n in names}
    local.update(
        sin=sympy.sin, cos=sympy.cos, tan=sympy.tan, exp=sympy.exp, log=sympy.log, sqrt=sympy.sqrt,
        abs=sympy.Abs, tanh=sympy.tanh, min=sympy.Min, max=sympy.Max,
    )
    return parse_expr(formula.replace("^", "**"), local_dict=local, transformations=standard_transformations)


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
