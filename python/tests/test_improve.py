"""gpfarm.improve: a kernel directory's rules are checked before anything runs, and without a GPU
the search says so in one line (on a GPU host, tests/improve.rs runs the whole loop)."""

import shutil
from pathlib import Path

import pytest

import gpfarm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kernels"


def test_a_broken_harness_is_a_value_error_naming_the_file_and_field(tmp_path):
    shutil.copytree(EXAMPLES / "nn", tmp_path / "nn")
    toml = tmp_path / "nn" / "kernel.toml"
    toml.write_text(toml.read_text().replace('measure = "max_rel"', 'measure = "close"'))
    with pytest.raises(ValueError, match="kernel.toml") as e:
        gpfarm.improve(tmp_path / "nn")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="population"):
        gpfarm.improve(EXAMPLES / "nn", population=1)


def test_without_a_gpu_the_search_refuses_in_one_line(tmp_path):
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has a GPU: tests/improve.rs runs the search there")
    with pytest.raises(RuntimeError) as e:
        gpfarm.improve(EXAMPLES / "nn", population=4, generations=1, out=tmp_path / "out", daemons=1)
    message = str(e.value)
    assert "\n" not in message
    assert "GPU" in message or "CUDA" in message or "NVRTC" in message, message
