"""gpfarm from Python: evolve CUDA C programs with grammatical GP, on the GPU when there is one.

    import gpfarm
    result = gpfarm.evolve("keijzer6", population=300, generations=30, seed=1)
    print(result.best_fitness, result.best_phenotype)

``evolve`` takes the options of ``gpfarm evolve`` as keyword arguments, named as the command
line names them with ``_`` for ``-`` (``route="ptx"``, ``eval="cpu"``, ``no_cache=True``,
``flag=["-O3"]``, ...). They fill an ``EvolveConfig``, the engine's own typed configuration, and
the engine runs exactly as ``gpfarm evolve`` runs it: both give the same runs.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from os import PathLike
from typing import Any, Callable, Dict, List, Optional, Union


def _environment_cuda(path: Optional[List[str]] = None) -> Optional[str]:
    """The ``nvidia/cu13`` directory of NVIDIA's NVRTC wheel in this environment (``pip install
    'gpfarm[cuda]'`` puts it there), or None."""
    for entry in sys.path if path is None else path:
        candidate = os.path.join(entry or ".", "nvidia", "cu13")
        if os.path.isfile(os.path.join(candidate, "lib", "libnvrtc.so.13")):
            return os.path.abspath(candidate)
    return None


# NVRTC is looked for as the command line looks for it (--cuda / ``cuda=``, GPFARM_CUDA, CUDA_HOME,
# /usr/local/cuda, a checkout's .toolchain/), and last in this environment's wheels: the variable
# names them for this process and the daemons it starts.
_WHEELS = _environment_cuda()
if _WHEELS is not None:
    os.environ.setdefault("GPFARM_PYTHON_CUDA", _WHEELS)
# pip puts the commands gpfarmd and gpfarm-gpu-worker beside the interpreter as it was started: in a
# virtual environment that is its bin/, not where the interpreter's links lead.
os.environ.setdefault("GPFARM_PYTHON_BIN", os.path.dirname(os.path.abspath(sys.executable)))

from ._gpfarm import EvolveConfig, Farm, __version__, builtin_problems, improve  # noqa: E402
from ._gpfarm import evolve as _evolve  # noqa: E402

__all__ = [
    "EvolveConfig",
    "Farm",
    "OPERATOR_SETS",
    "Operator",
    "Result",
    "SymbolicRegressor",
    "__version__",
    "builtin_problems",
    "default_grammar",
    "evolve",
    "improve",
    "memory_problem",
    "operators",
    "regression_problem",
]


@dataclass
class Result:
    """What a run found: the best program, its fitness, and one record per generation."""

    #: Best fitness of the run (lower is better for error measures, as the problem states).
    best_fitness: float
    #: Its phenotype, the CUDA C expression or statements (None if no individual mapped).
    best_phenotype: Optional[str]
    #: How fitness was computed: "interpreter", "ptx", "nvrtc" or "cpu"; and why.
    route: str
    route_reason: str
    #: One dict per generation (generation 0 first), as ``gpfarm evolve --json`` prints them;
    #: ``pandas.DataFrame(result.history)`` makes a table of it.
    history: List[Dict[str, Any]] = field(repr=False)
    #: The run's summary, as ``gpfarm evolve --json`` ends with it.
    summary: Dict[str, Any] = field(repr=False)


def evolve(
    problem: Optional[str] = "keijzer6",
    *,
    problem_dir: Optional[Union[str, PathLike]] = None,
    memory_problem: Any = None,
    on_generation: Optional[Callable[[Dict[str, Any]], Any]] = None,
    cuda: Optional[Union[str, PathLike]] = None,
    **options: Any,
) -> Result:
    """Evolves programs for a built-in ``problem`` (see ``builtin_problems()``), the problem in
    the directory ``problem_dir``, or a problem held in memory (``memory_problem``, made by
    ``gpfarm.memory_problem(X, y)`` or ``gpfarm._gpfarm.MemoryProblem``), with ``gpfarm evolve``'s options as keyword arguments
    (``population``, ``generations``, ``seed``, ``route``, ``eval``, ...; ``True`` for a flag,
    a list for a repeatable option). ``on_generation(record)`` is called with each generation's
    record (a dict) as soon as it is complete; an exception it raises ends the run and
    propagates. ``cuda`` is the CUDA toolkit or wheel directory (as ``gpfarm --cuda``).

    The run holds no interpreter lock while it works; Ctrl-C raises ``KeyboardInterrupt`` at the
    end of the current generation, and every daemon and shared-memory segment the run started is
    gone when ``evolve`` returns or raises. An unknown option or a value of the wrong type raises
    ``TypeError``, a value out of its set (``route="teleport"``) or settings that contradict each
    other ``ValueError``, a run that cannot start ``RuntimeError``.
    """
    config = EvolveConfig(problem, problem_dir=problem_dir, memory_problem=memory_problem, cuda=None if cuda is None else str(cuda), **options)
    records, summary = _evolve(config, on_generation)
    return Result(
        best_fitness=summary["best_fitness"],
        best_phenotype=summary.get("best_phenotype"),
        route=summary.get("route", ""),
        route_reason=summary.get("route_reason", ""),
        history=list(records),
        summary=summary,
    )


from .regression import (  # noqa: E402
    OPERATOR_SETS,
    Operator,
    SymbolicRegressor,
    default_grammar,
    memory_problem,
    operators,
    regression_problem,
)
