"""kopt: a distributed job queue for CUDA kernel candidate sweeps (driver side)."""

__version__ = "0.1.0"
