"""Node side of kopt: builds (nvcc / c++), the per-device actor and its sandbox process."""
