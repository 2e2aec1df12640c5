"""gpfarm.Farm: daemons from Python, a compile round trip, and cleanup however the block ends.

Needs NVRTC (the checkout's `.toolchain/`, which the test command installs, or a CUDA 13 toolkit)
and `gpfarmd` (the checkout's `target/release`, which the test command builds first).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpfarm
from procs import gpfarmd_children, segments

ROOT = Path(__file__).resolve().parents[2]
DAEMON = ROOT / "target" / "release" / "gpfarmd"
WHEELS = ROOT / ".toolchain" / "site" / "nvidia" / "cu13"
CUDA = str(WHEELS) if WHEELS.is_dir() else None

pytestmark = pytest.mark.skipif(not DAEMON.is_file(), reason="needs gpfarmd built: cargo build --release")

GOOD = 'extern "C" __global__ void twice(float* a) { a[threadIdx.x] *= 2.0f; }'
BAD = "this is not C"


@pytest.fixture(autouse=True)
def daemon_binary(monkeypatch):
    monkeypatch.setenv("GPFARMD", str(DAEMON))


def daemons():
    """This process's gpfarmd children."""
    return gpfarmd_children(os.getpid())


def test_a_compile_round_trip_gives_cubin_or_the_compiler_s_log_and_ends_the_daemons():
    before = segments()
    with gpfarm.Farm(workers=2, cuda=CUDA) as farm:
        assert farm.name == "farm:2" and not farm.closed
        assert len(daemons()) == 2
        results = farm.compile({"good": GOOD, "bad": BAD, "also_good": GOOD.replace("twice", "thrice")})
        again = farm.compile([GOOD])
    assert [r["name"] for r in results] == ["good", "bad", "also_good"]
    good, bad, also = results
    assert good["ok"] and good["cubin"][:4] == b"\x7fELF" and good["failure"] is None
    assert b"twice" in good["cubin"] and b"thrice" in also["cubin"]
    assert good["compile_us"] > 0
    assert not bad["ok"] and bad["cubin"] is None and bad["failure"] == "compilation"
    assert "error" in bad["log"]
    assert again[0]["name"] == "unit0" and again[0]["ok"]
    assert farm.closed and daemons() == [] and segments() == before
    with pytest.raises(RuntimeError, match="closed"):
        farm.compile([GOOD])


def test_an_exception_in_the_block_still_ends_the_daemons():
    before = segments()
    with pytest.raises(KeyError):
        with gpfarm.Farm(workers=2, cuda=CUDA) as farm:
            assert len(daemons()) == 2
            raise KeyError("out")
    assert farm.closed and daemons() == [] and segments() == before


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="compiler"):
        gpfarm.Farm(compiler="teleporter")
    with pytest.raises(ValueError, match="arch"):
        gpfarm.Farm(arch="sm_9000x")
    with gpfarm.Farm(compiler="inprocess", cuda=CUDA) as farm:
        with pytest.raises(TypeError, match="list of CUDA C sources or a dict"):
            farm.compile(42)
        assert farm.compile([GOOD])[0]["ok"]


def test_without_a_build_the_package_s_own_daemon_command_serves(monkeypatch):
    # pip put `gpfarmd` beside the interpreter, where gpfarm looks when GPFARMD is not set.
    monkeypatch.delenv("GPFARMD")
    command = Path(sys.executable).parent / "gpfarmd"
    assert command.is_file(), command
    before = segments()
    with gpfarm.Farm(workers=2, cuda=CUDA) as farm:
        pids = daemons()
        assert len(pids) == 2
        for pid in pids:
            assert str(command) in Path(f"/proc/{pid}/cmdline").read_bytes().decode().replace("\0", " ")
        result = farm.compile([GOOD, BAD])
    assert result[0]["ok"] and result[0]["cubin"][:4] == b"\x7fELF"
    assert result[1]["failure"] == "compilation"
    assert daemons() == [] and segments() == before


@pytest.mark.parametrize("command", ["gpfarmd", "gpfarm-gpu-worker"])
def test_the_package_s_commands_parse_their_command_lines(command):
    path = Path(sys.executable).parent / command
    shown = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "Usage" in shown.stdout, shown.stderr
    wrong = subprocess.run([str(path), "--no-such-option"], capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "--no-such-option" in wrong.stderr


SYSTEM_CUDA = any(
    os.path.isfile(os.path.join(d, sub, "libnvrtc.so.13"))
    for d in [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    if d
    for sub in ("lib64", "lib")
)


@pytest.mark.skipif(CUDA is None, reason="needs the checkout's NVRTC wheels (.toolchain/)")
def test_nvrtc_wheels_in_the_python_environment_are_found_without_cuda(tmp_path):
    # `pip install 'gpfarm[cuda]'` leaves nvidia/cu13 in site-packages: stand one up on sys.path
    # (linked to the checkout's wheels) and compile from outside the checkout with nothing set.
    site = tmp_path / "site"
    (site / "nvidia").mkdir(parents=True)
    (site / "nvidia" / "cu13").symlink_to(WHEELS)
    env = {k: v for k, v in os.environ.items() if k not in ("GPFARM_CUDA", "GPFARM_PYTHON_CUDA")}
    script = (
        "import sys, gpfarm\n"
        "print(gpfarm._WHEELS)\n"
        "with gpfarm.Farm(workers=1) as farm:\n"
        f"    print(farm.compile([{GOOD!r}])[0]['ok'])\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.append({str(site)!r}); exec({script!r})"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(site / "nvidia" / "cu13"), "True"], run.stdout
    if SYSTEM_CUDA:
        return
    # Without them, the error says how to get NVRTC from Python.
    bare = subprocess.run(
        [sys.executable, "-c", "import gpfarm; gpfarm.Farm(workers=1)"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )
    assert bare.returncode == 1 and "gpfarm[cuda]" in bare.stderr and "no NVRTC" in bare.stderr, bare.stderr


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh virtual environment with the package installed from a wheel of this checkout."""
    base = tmp_path_factory.mktemp("venv")
    # The outer environment's packages are visible (NumPy, the package's one dependency, comes
    # from there: the install below uses no index); gpfarm itself goes into the new one.
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(base / "env")], capture_output=True)
    if made.returncode != 0:
        pytest.skip("this Python cannot make a virtual environment")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(base / "wheels"), str(ROOT / "python")],
        capture_output=True, text=True, timeout=900,
    )
    assert built.returncode == 0, built.stderr
    python = base / "env" / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--ignore-installed",
             "--find-links", str(base / "wheels"), "gpfarm"],
        capture_output=True, text=True, timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    return python


@pytest.mark.skipif(CUDA is None, reason="needs the checkout's NVRTC wheels (.toolchain/)")
def test_in_a_virtual_environment_the_environment_s_own_commands_serve(venv, tmp_path):
    # The venv's python is a link to the system's: gpfarm must look in the venv's bin/, where pip
    # put gpfarmd, not beside the interpreter the link leads to.
    env = {k: v for k, v in os.environ.items() if k not in ("GPFARMD", "GPFARM_GPU_WORKER", "GPFARM_PYTHON_BIN")}
    script = (
        "import os, gpfarm\n"
        f"with gpfarm.Farm(workers=1, cuda={CUDA!r}) as farm:\n"
        "    pid = [p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/stat').read().split()[3] == str(os.getpid())]\n"
        "    print([' '.join(open(f'/proc/{p}/cmdline').read().split(chr(0))[:2]) for p in pid])\n"
        f"    print(farm.compile([{GOOD!r}])[0]['ok'])\n"
    )
    run = subprocess.run([str(venv), "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert str(venv.parent / "gpfarmd") in lines[0] and lines[-1] == "True", run.stdout
