"""Floor 7: the one way into a run (checks before Ray, the Driver, run_sweep)."""
