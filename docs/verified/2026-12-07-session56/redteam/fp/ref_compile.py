# ruff: noqa
import sys, threading, time; from pathlib import Path; sys.path.insert(0, str(Path(__file__).parent)); from _base import inputs, _ref
import torch
_c = torch.compile(_ref, backend="eager")
def reference(x, buf, N):
    return _c(x, buf)
