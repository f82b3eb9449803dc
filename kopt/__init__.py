"""kopt: a distributed job queue for CUDA kernel candidate sweeps (driver side)."""

import os
import time

# when kopt started in this process (epoch seconds): the first import of the package, the
# `kopt` command's first step; kopt.util.phases counts a run's phases from it
STARTED_AT: float = time.time()
__version__ = "0.1.0"
# this process's environment as it started, before Ray's import and connect set variables
# of their own (RAY_CLIENT_MODE, PYTHONBREAKPOINT): what kopt.cli.launchpad's drivers get
START_ENV: dict[str, str] = dict(os.environ)
