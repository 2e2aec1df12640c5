"""gpfarm.evolve from Python: the engine's typed configuration, the CLI's runs, errors,
callbacks, Ctrl-C.

Runs on the CPU evaluator (auto takes the cpu route without a GPU: no daemons, no GPU);
the Ctrl-C test starts a farm of daemons, so it needs NVRTC and `gpfarmd` (the checkout's
`target/release`, which the test command builds first).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gpfarm
from procs import gpfarmd_children, segments

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "target" / "release"


def small(**extra):
    options = dict(population=60, generations=5, seed=3, eval="cpu")
    options.update(extra)
    return options


def test_a_run_has_a_record_per_generation_and_its_best_never_worsens():
    seen = []
    result = gpfarm.evolve("keijzer6", on_generation=seen.append, **small())
    assert [r["generation"] for r in result.history] == list(range(6))
    assert seen == result.history
    bests = [r["best"] for r in result.history]
    assert all(b <= a for a, b in zip(bests, bests[1:])), bests
    assert result.best_fitness == min(bests)
    assert result.best_phenotype and "x" in result.best_phenotype
    # Without a GPU the interpreter's programs are evaluated by the CPU, and the record says so.
    assert result.route == "cpu" and result.route_reason.startswith("auto: ")
    assert "CPU reference evaluator" in result.route_reason
    assert result.summary["generations"] == 5


def test_a_seed_fixes_the_run_and_another_seed_changes_it():
    a = gpfarm.evolve("multiplier5", **small(seed=11))
    b = gpfarm.evolve("multiplier5", **small(seed=11))
    c = gpfarm.evolve("multiplier5", **small(seed=12))
    trajectory = lambda r: [(g["best"], g["mean"], g["median"]) for g in r.history]
    assert trajectory(a) == trajectory(b)
    assert trajectory(a) != trajectory(c)


@pytest.mark.skipif(not (RELEASE / "gpfarm").is_file(), reason="needs the CLI built: cargo build --release")
def test_the_same_options_give_the_cli_s_run():
    options = ["--problem=search", "--population=80", "--generations=4", "--seed=5", "--eval=cpu", "--tournament=4"]
    out = subprocess.run([str(RELEASE / "gpfarm"), "evolve", "--json", *options], capture_output=True, text=True, check=True)
    cli = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    py = gpfarm.evolve("search", population=80, generations=4, seed=5, eval="cpu", tournament=4)
    assert [(g["best"], g["mean"], g["median"]) for g in cli[:-1]] == [
        (g["best"], g["mean"], g["median"]) for g in py.history
    ]
    assert cli[-1]["best_fitness"] == py.best_fitness
    assert cli[-1]["best_phenotype"] == py.best_phenotype


def test_an_unknown_option_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="populaton"):
        gpfarm.evolve("keijzer6", populaton=10)


def test_a_bad_value_names_the_option():
    with pytest.raises(TypeError, match="population"):
        gpfarm.evolve("keijzer6", population="many")
    with pytest.raises(ValueError, match="route") as e:
        gpfarm.evolve("keijzer6", route="teleport")
    assert "interpreter" in str(e.value), "the message lists the routes there are"
    with pytest.raises(ValueError, match="attach"):
        gpfarm.evolve("keijzer6", route="cpu", attach=True)
    with pytest.raises(ValueError, match="gpu_deadline"):
        gpfarm.evolve("keijzer6", gpu_deadline=0)
    with pytest.raises(ValueError, match="max_steps"):
        gpfarm.evolve("keijzer6", max_steps=0)


def test_a_step_limit_of_one_s_own_fails_the_loops_that_pass_it():
    """With a limit of 2 steps per case, a Search loop over a list (up to 21 steps) fails."""
    kwargs = dict(population=60, generations=1, seed=3, route="cpu")
    default = gpfarm.evolve("search", **kwargs)
    strict = gpfarm.evolve("search", max_steps=2, **kwargs)
    assert gpfarm.EvolveConfig("search").max_steps is None
    invalid = lambda run: sum(g["invalid"] for g in run.history)
    assert invalid(strict) > invalid(default), (invalid(strict), invalid(default))


def test_the_configuration_is_a_typed_object_with_the_cli_s_defaults():
    config = gpfarm.EvolveConfig("search", population=80)
    assert (config.problem, config.population, config.generations, config.route) == ("search", 80, 30, "auto")
    config.seed = 9
    assert config.seed == 9
    with pytest.raises(TypeError):
        config.population = "many"


def test_every_option_of_the_command_line_is_a_keyword_with_its_default():
    names = set(gpfarm.EvolveConfig.OPTIONS)
    assert {"population", "max_depth", "fit_kernels", "island_farm", "keep_gpu_worker"} <= names
    config = gpfarm.EvolveConfig("keijzer6", max_depth=12)
    assert (config.max_depth, gpfarm.EvolveConfig("keijzer6").max_depth) == (12, 90)
    with pytest.raises(ValueError, match="max_depth"):
        gpfarm.evolve("keijzer6", route="cpu", max_depth=0)
    with pytest.raises(ValueError, match="max_size"):
        gpfarm.EvolveConfig("keijzer6", max_size=10**30)


def test_records_are_dicts_with_the_json_keys():
    result = gpfarm.evolve("keijzer6", **small(generations=1))
    record = result.history[0]
    assert isinstance(record, dict) and isinstance(result.summary, dict)
    for key in ["generation", "best", "mean", "median", "compile", "individuals", "eval_split"]:
        assert key in record, (key, sorted(record))
    assert isinstance(record["compile"], dict) and record["compile"]["units"] == 0
    assert record["eval_split"]["timeouts"] == 0
    assert result.summary["route"] == "cpu"


def test_an_unknown_problem_says_which_ones_exist():
    with pytest.raises(RuntimeError, match="keijzer7") as e:
        gpfarm.evolve("keijzer7", **small())
    assert "keijzer6" in str(e.value)


def test_an_exception_in_the_callback_ends_the_run_and_propagates():
    calls = []

    def stop(record):
        calls.append(record["generation"])
        if record["generation"] == 2:
            raise KeyError("enough")

    with pytest.raises(KeyError, match="enough"):
        gpfarm.evolve("keijzer6", on_generation=stop, **small(generations=50))
    assert calls == [0, 1, 2]


def test_the_built_in_problems_are_listed():
    assert set(gpfarm.builtin_problems()) == {"keijzer6", "search", "multiplier5"}
    assert gpfarm.__version__


@pytest.mark.skipif(not (RELEASE / "gpfarmd").is_file(), reason="needs gpfarmd built: cargo build --release")
@pytest.mark.parametrize("daemon", ["the checkout's gpfarmd", "the package's gpfarmd command"])
def test_ctrl_c_raises_keyboard_interrupt_and_leaves_no_daemon_or_segment(daemon):
    before = segments()
    script = (
        "import gpfarm, sys\n"
        "try:\n"
        "    gpfarm.evolve('keijzer6', route='ptx', eval='cpu', daemons=2, population=100, generations=100000,\n"
        "                  seed=1, on_generation=lambda r: print(r['generation'], flush=True))\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(7)\n"
    )
    env = dict(os.environ, GPFARMD=str(RELEASE / "gpfarmd"))
    if daemon.startswith("the package"):
        del env["GPFARMD"]
    # Ctrl-C's default action in the child, whatever the caller's (a shell's background job
    # ignores SIGINT, and Python then raises no KeyboardInterrupt).
    restore = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, preexec_fn=restore
    )
    # Wait for a few generations, so that the farm is up and compiling.
    for line in child.stdout:
        if line.strip() == "3":
            break
    daemons = gpfarmd_children(child.pid)
    assert len(daemons) == 2, daemons
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    rest = child.stdout.read()
    code = child.wait(timeout=30)
    took = time.monotonic() - sent
    assert code == 7 and "interrupted" in rest, (code, rest[-500:])
    assert took < 5, took
    for pid in daemons:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert segments() == before


def test_islands_from_python_give_every_island_s_records_and_a_fixed_run():
    a = gpfarm.evolve("keijzer6", **small(islands=3, migrate_every=2, migrants=2))
    b = gpfarm.evolve("keijzer6", **small(islands=3, migrate_every=2, migrants=2))
    assert a.summary["islands"] == 3 and len(a.summary["island_best"]) == 3
    assert sorted({r["island"] for r in a.history}) == [0, 1, 2]
    assert len(a.history) == 3 * 6
    key = lambda r: (r["island"], r["generation"])
    assert [(key(r), r["best"]) for r in sorted(a.history, key=key)] == [(key(r), r["best"]) for r in sorted(b.history, key=key)]
    assert a.best_fitness == min(a.summary["island_best"])
    with pytest.raises(RuntimeError, match="--migrants"):
        gpfarm.evolve("keijzer6", **small(islands=2, migrants=60))
