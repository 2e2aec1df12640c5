"""The package's commands `gpfarmd` and `gpfarm-gpu-worker`: the compile daemon and the GPU
worker that runs and farms started from Python start. pip installs them beside the interpreter,
where gpfarm looks for them (after `GPFARMD` / `GPFARM_GPU_WORKER`), so a run needs no build of
the checkout."""

import sys

from . import _gpfarm


def gpfarmd() -> None:
    sys.exit(_gpfarm.daemon_main(sys.argv[1:]))


def gpu_worker() -> None:
    sys.exit(_gpfarm.gpu_worker_main(sys.argv[1:]))
