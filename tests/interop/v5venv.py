"""A virtual environment with the official RocketMQ 5.x Python client, made once per machine.

``rocketmq-python-client``'s top-level package is ``rocketmq``, the name of the C++ wrapper
(``rocketmq==0.4.4``) the 4.x interop tests import, so it lives in its own environment under
``$ROCKETPY_TEST_CACHE`` (default ``~/.cache/rocketpy-tests``). Parallel trial workers take a
file lock; a finished environment has a marker file, so a half-made one is made again.

The steps run without ``PYTHONPATH``: trial's ``-j`` workers inherit one naming the test
interpreter's site-packages, and pip would then count the packages found there (protobuf,
grpcio) as installed and leave them out of the venv.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys

CLIENT = "rocketmq-python-client==5.1.2"
INSTALL_TIMEOUT = 600
ISOLATING = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PIP_TARGET", "PIP_PREFIX", "PIP_USER")


def cache_dir() -> str:
    return os.environ.get("ROCKETPY_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "rocketpy-tests")


def v5_python() -> str:
    """The venv's interpreter, making the venv first if needed.

    :raises RuntimeError: with pip's output when the client cannot be installed (tests skip on it).
    """
    root = os.path.join(cache_dir(), "rocketmq5-venv")
    python = os.path.join(root, "bin", "python")
    marker = os.path.join(root, f".checked-{CLIENT}")
    if os.path.exists(marker):
        return python
    os.makedirs(cache_dir(), exist_ok=True)
    with open(os.path.join(cache_dir(), "rocketmq5-venv.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(marker):
            return python
        shutil.rmtree(root, ignore_errors=True)
        steps = ([sys.executable, "-m", "venv", root],
                 [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", CLIENT],
                 [python, "-m", "pip", "check"])
        env = {key: value for key, value in os.environ.items() if key not in ISOLATING}
        for step in steps:
            try:
                done = subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, env=env)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise RuntimeError(f"{' '.join(step)}: {e}") from None
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(step)} failed ({done.returncode}): {(done.stdout + done.stderr)[-1500:]}")
        open(marker, "w").close()
    return python
