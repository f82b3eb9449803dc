"""``kopt propose``: the next iteration's method scan and triples, from the store's state."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kopt.catalog import load_catalog
from kopt.database import Database
from kopt.expand import admissible_triples, iter_candidates, scan_axes
from kopt.loop import IterState
from kopt.spec import Sweep


def _local_device(sweep: Sweep) -> tuple[str, str, int | None]:
    import torch

    if torch.cuda.is_available() and "cuda" in sweep.spaces:
        major, minor = torch.cuda.get_device_capability(0)
        return "cuda", f"local-sm{major}{minor}", major * 10 + minor
    return "cpu", "local-cpu", None


def propose(sweep: Sweep, store: Path | str | None = None) -> list[dict[str, Any]]:
    """Per device class: the state it continues from, every realized method's scan
    (admitted or skipped with the reason), the triples the next iteration will run and
    ``empty_triples``: admissible ones whose every launch config the restrictions exclude.

    Without a stored run of this sweep it answers for iteration 1 on this machine's
    device (no NCU evidence: every method counts as triggered).
    """
    cat = load_catalog()
    rows = Database(store).latest_states(sweep.name)
    plans = []
    if not rows:
        backend, dc, sm = _local_device(sweep)
        rows = [{"run_id": None, "backend": backend, "device_class": dc, "iteration": 0,
                 "state": IterState().to_json(), "sm": sm}]
    for r in rows:
        st = IterState.from_json(r["state"])
        sm = r.get("sm")
        if r.get("devices"):
            devs = [d for d in json.loads(r["devices"]) if d["device_class"] == r["device_class"]]
            sm = devs[0]["sm"] if devs else None
        space = sweep.space(r["backend"])
        ctx = st.context()
        scans = scan_axes(space, cat, sm, ctx=ctx)
        triples = [t for t in admissible_triples(space, cat, sm, ctx=ctx) if any(t)]
        # a triple whose every launch config the restrictions exclude runs nothing
        have: set[tuple] = set()  # streamed: a large space is never held
        for c in iter_candidates(space, cat, sm, ctx=ctx):
            have.add(c.triple)
            have.update(c.aliases)
        plans.append({
            "device_class": r["device_class"], "run_id": r["run_id"],
            "next_iteration": int(r["iteration"]) + 1, "selected": ctx.selected,
            "bottleneck": ctx.bottleneck, "evidence": ctx.triggered is not None,
            "stop": st.stop,
            "scan": {a: [asdict(s) for s in v] for a, v in scans.items()},
            "triples": [list(t) for t in triples if t in have],
            "empty_triples": [list(t) for t in triples if t not in have]})
    return plans
