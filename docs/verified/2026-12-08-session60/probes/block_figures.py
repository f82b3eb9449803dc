# ruff: noqa
"""MODE 10 (a 1/100 clock) judged by tests/test_clock.py's _judged at N 4096 and BLOCK_N: its
contest median and per block (ms a call, preparation ms a call), and whether suspect.
Usage (from tests/): python ../docs/verified/2026-12-08-session60/probes/block_figures.py"""
import sys, pathlib, tempfile
sys.path.insert(0, '.')
import pytest
import workers.witness; workers.witness.TURNS = 0
from test_clock import _judged, BLOCK_N, PACK
from test_attacks import attack_job
from conftest import *  # noqa
from test_faults import artifact, job
from kopt.core.clock import clock_suspect
tmp = pathlib.Path(tempfile.mkdtemp())
for n in (4096, BLOCK_N):
    for mode in (10,):
        med, blocks = _judged({**attack_job(tmp, mode, n=n), "job_key": f"m{mode}"})
        print(n, mode, med, [(round(b[0]/b[1],3), round(b[2]/b[1],3)) for b in blocks], bool(clock_suspect(med, blocks)))
