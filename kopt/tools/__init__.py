"""Floor 8: products built on runs -- submit, wait, report, export, port, triage, preflight,
the Nsight Systems reader."""
