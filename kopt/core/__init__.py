"""Floor 2: the pure rules -- the sweep spec (schema, loader, checks), names, the C contract,
restrictions, expansion into candidates, the catalog, claims, the noise model and winner
naming, bottleneck scores. No Ray, no store, no device."""
