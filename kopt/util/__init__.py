"""Floor 1 of the driver: small helpers with no kopt imports above the package root (paths a
user hands kopt, counted words, JSON record files, the phase recorder)."""
