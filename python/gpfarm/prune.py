"""Term pruning of a fitted model: the terms of its sums that do not earn their place removed,
its constants refitted.

Evolution keeps terms that change the error by almost nothing (`5e-9*x0^3`, `sin(x1 - 2e-8*x0)`):
they cost a model nodes and a reader attention and lower no error a user can see. `prune` takes a
model as `_gpfarm.postfix` steps (float arithmetic, constants written in), and for each operand of
a `+` or `-` anywhere in it, tries the model without that operand, its constants refitted by least
squares (in double, from their current values); a removal is kept when the training RMSE of the
result, computed in float as `predict` does, is at most the original's plus `tolerance` times the
target's standard deviation. It repeats until no removal is kept or `deadline` passes, and returns
the model as CUDA C over the variable names with its training RMSE, or None when nothing was
removed (or the model is not plain float arithmetic).
"""

from __future__ import annotations

import time
from typing import Any, List, Optional, Sequence, Tuple

import numpy

#: A removal may raise the training RMSE by this share of the target's standard deviation.
TOLERANCE = 1e-4

_UNARY = {"sin", "cos", "exp", "log", "sqrt", "fabs", "tanh"}
_BINARY = {"+", "-", "*", "/", "pow", "fmin", "fmax", "pdiv"}
_C_NAMES = {
    "sin": "sinf", "cos": "cosf", "exp": "expf", "log": "logf", "sqrt": "sqrtf", "fabs": "fabsf",
    "tanh": "tanhf", "pow": "powf", "fmin": "fminf", "fmax": "fmaxf", "pdiv": "pdivf",
}

# A node: ("const", value) | ("input", column) | ("neg", child) | (op, child) | (op, left, right).
Node = Tuple[Any, ...]


def tree(steps: Sequence[Tuple[str, str, float]]) -> Optional[Node]:
    """The expression tree of postfix `steps`, or None when they are not all float arithmetic."""
    stack: List[Node] = []
    for op, ty, value in steps:
        if ty != "float":
            return None
        if op == "const":
            stack.append(("const", float(value)))
        elif op == "input":
            stack.append(("input", int(value)))
        elif op == "neg" or op in _UNARY:
            if not stack:
                return None
            stack.append((op, stack.pop()))
        elif op in _BINARY:
            if len(stack) < 2:
                return None
            b = stack.pop()
            a = stack.pop()
            stack.append((op, a, b))
        else:  # parameters, conversions, calls: not pruned
            return None
    return stack[0] if len(stack) == 1 else None


def constants(node: Node) -> List[float]:
    """The constants of `node`, depth first, left to right."""
    if node[0] == "const":
        return [node[1]]
    if node[0] == "input":
        return []
    return [c for child in node[1:] for c in constants(child)]


def with_constants(node: Node, values: Sequence[float]) -> Node:
    """`node` with its constants replaced by `values` (in `constants`' order)."""
    it = iter(values)

    def go(n: Node) -> Node:
        if n[0] == "const":
            return ("const", float(next(it)))
        if n[0] == "input":
            return n
        return (n[0],) + tuple(go(c) for c in n[1:])

    return go(node)


def size(node: Node) -> int:
    if node[0] in ("const", "input"):
        return 1
    return 1 + sum(size(c) for c in node[1:])


def evaluate(node: Node, data: Any, ty: Any = numpy.float64) -> Any:
    """The values of `node` on the columns of `data` in type `ty` (float32 as the model runs,
    float64 to fit), one per row."""
    from .regression import _pdiv

    f = {"sin": numpy.sin, "cos": numpy.cos, "exp": numpy.exp, "log": numpy.log, "sqrt": numpy.sqrt,
         "fabs": numpy.abs, "tanh": numpy.tanh, "pow": numpy.power, "fmin": numpy.fmin, "fmax": numpy.fmax,
         "pdiv": _pdiv, "+": numpy.add, "-": numpy.subtract, "*": numpy.multiply, "/": numpy.divide}

    def go(n: Node) -> Any:
        op = n[0]
        if op == "const":
            return ty(n[1])
        if op == "input":
            return data[:, n[1]].astype(ty, copy=False)
        if op == "neg":
            return -go(n[1])
        args = [numpy.asarray(go(c), dtype=ty) for c in n[1:]]
        return numpy.asarray(f[op](*args), dtype=ty)

    with numpy.errstate(all="ignore"):
        return numpy.broadcast_to(numpy.asarray(go(node), dtype=ty), (data.shape[0],)).copy()


def removals(node: Node) -> List[Node]:
    """Every model that is `node` with one operand of one `+` or `-` removed (`a + b` becomes `a`
    or `b`, `a - b` becomes `a` or `-b`), the largest removals first."""
    out: List[Tuple[int, Node]] = []

    def go(n: Node, rebuild: Any) -> None:
        op = n[0]
        if op in ("const", "input"):
            return
        if op in ("+", "-"):
            a, b = n[1], n[2]
            out.append((size(b), rebuild(a)))
            out.append((size(a), rebuild(b if op == "+" else ("neg", b))))
        for k in range(1, len(n)):
            def sub(child: Node, k: int = k, n: Node = n) -> Node:
                return rebuild(n[:k] + (child,) + n[k + 1:])

            go(n[k], sub)

    go(node, lambda m: m)
    out.sort(key=lambda t: -t[0])
    return [m for _, m in out]


def _c_float(v: float) -> str:
    text = str(numpy.float32(v))  # the shortest text that reads back as this float
    if text in ("inf", "-inf", "nan"):
        text = {"inf": "INFINITY", "-inf": "-INFINITY", "nan": "NAN"}[text]
        return text if not text.startswith("-") else f"({text})"
    if "e" not in text and "." not in text:
        text += ".0"
    return f"({text}f)" if text.startswith("-") else f"{text}f"


def to_c(node: Node, names: Sequence[str]) -> str:
    """`node` as a CUDA C float expression over the variables `names`."""
    op = node[0]
    if op == "const":
        return _c_float(node[1])
    if op == "input":
        return names[node[1]]
    if op == "neg":
        return f"(-{to_c(node[1], names)})"
    if op in ("+", "-", "*", "/"):
        return f"({to_c(node[1], names)} {op} {to_c(node[2], names)})"
    return f"{_C_NAMES[op]}({', '.join(to_c(c, names) for c in node[1:])})"


def _rmse(node: Node, X32: Any, y: Any) -> float:
    p = evaluate(node, X32, numpy.float32).astype(numpy.float64)
    if not numpy.all(numpy.isfinite(p)):
        return float("inf")
    return float(numpy.sqrt(numpy.mean((y - p) ** 2)))


def refit(node: Node, X: Any, y: Any, evaluations: int = 20) -> Node:
    """`node` with its constants fitted to `y` by least squares in double (Levenberg-Marquardt
    from their values, at most `evaluations` x (constants + 1) evaluations)."""
    start = numpy.asarray(constants(node), dtype=numpy.float64)
    if start.size == 0 or start.size > len(y):
        return node
    try:
        from scipy.optimize import least_squares
    except ImportError:  # without SciPy only the terms that need no refit are removed
        return node

    def residuals(c: Any) -> Any:
        r = evaluate(with_constants(node, c), X) - y
        return numpy.where(numpy.isfinite(r), r, 1e30)

    try:
        fit = least_squares(residuals, start, method="lm", max_nfev=evaluations * (start.size + 1))
    except (ValueError, numpy.linalg.LinAlgError):
        return node
    with numpy.errstate(over="ignore"):
        finite = numpy.all(numpy.isfinite(fit.x.astype(numpy.float32)))
    return with_constants(node, fit.x) if finite else node


#: Constants are refitted on at most this many evenly spaced rows (the error is on every row).
FIT_ROWS = 1024


def prune(steps: Sequence[Tuple[str, str, float]], names: Sequence[str], X: Any, y: Any,
          tolerance: float = TOLERANCE, deadline: Optional[float] = None) -> Optional[Tuple[str, float]]:
    """The model of `steps` with the terms that do not earn their place removed (see the
    module's doc): `(CUDA C, training RMSE in float)`, or None when no term was removed.
    `deadline` is a `time.monotonic()` time after which no new removal is tried."""
    node = tree(steps)
    if node is None:
        return None
    X = numpy.asarray(X, dtype=numpy.float64)
    y = numpy.asarray(y, dtype=numpy.float64)
    X32 = X.astype(numpy.float32)
    base = _rmse(node, X32, y)
    if not numpy.isfinite(base):
        return None
    limit = base + tolerance * float(numpy.std(y))
    rows = numpy.linspace(0, len(y) - 1, min(len(y), FIT_ROWS)).astype(int)
    current, changed = node, False
    error = base
    # First removals that need no refit (terms near zero already), then removals with the
    # constants refitted; each pass until nothing more is removed.
    for refitting in (False, True):
        progress = True
        while progress:
            progress = False
            for candidate in removals(current):
                if deadline is not None and time.monotonic() > deadline:
                    break
                model = refit(candidate, X[rows], y[rows]) if refitting else candidate
                e = _rmse(model, X32, y)
                if e <= limit:
                    current, error, changed, progress = model, e, True, True
                    break
    if not changed:
        return None
    return to_c(current, names), error
