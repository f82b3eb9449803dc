"""Choose the methods a submitted layer-norm version claims, from `kopt propose --format json`
(the loop driver's step of docs/verified/h200_layernorm_loop.sh, as an agent would take it).

    python3 docs/verified/layernorm_claim.py PROPOSE_JSON RUN_ID VERSION NOTE_IN NOTE_OUT

VERSION is v2 or v3. Each version realizes a fixed set of catalog methods per axis (PLANS,
most preferred first: what the code does, nothing else). Per axis the claim is the first of
those the scan (`catalog_scan`) admits; when the planned method is not admitted the next
realized one that is admitted is claimed instead, and the note says so; when none is, the
planned method is claimed all the same and the note says why (a note lifts the catalog's
`not_admitted` and `priority_order` rules, never the hard ones). An axis a version inherits
from its predecessor (INHERITED: v3 holds v2's reduction) is claimed only when the parent does
not apply it already (the plan's ``selected``). NOTE_OUT is NOTE_IN plus a
generated section: the evidence the claim was made on (bottleneck, axis scores, top stalls,
each claimed method's trigger and its figures) and the higher-priority methods the scan
admitted on the claimed axes. Prints the claim (compute.X,latency.Y) as the last line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# what each version's code realizes, per axis, most preferred first (see notes/vN.md)
SHUFFLE = {"compute": ["compute.warp_reduction"],
           "latency": ["latency.warp_shuffle_sync", "latency.reduce_sync_count"]}
PLANS: dict[str, dict[str, list[str]]] = {
    "v2": SHUFFLE,
    "v3": {"memory": ["memory.vectorized_access", "memory.kernel_fusion"], **SHUFFLE},
}
# axes a version carries over from its predecessor: claimed only when the parent lacks them
# (v3 holds v2's reduction; when v2 did not win, v3's parent is v1 and the claim must cover it)
INHERITED = {"v3": {"compute", "latency"}}


def leaves(cond: dict[str, Any] | None) -> list[str]:
    """A trigger's condition tree (propose's ``trigger_evidence``) as one line per figure."""
    if not cond:
        return []
    for mode in ("all", "any"):
        if mode in cond:
            return [x for c in cond[mode] for x in leaves(c)]
    holds = {True: "holds", False: "fails", None: "unknown"}[cond.get("holds")]
    val = cond.get("value")
    shown = "missing" if val is None else f"{val:.4g}"
    if "stall" in cond:
        if "rank" in cond or "rank_top" in cond:
            return [f"stall {cond['stall']} rank {cond.get('rank')} (<= {cond['rank_top']}), "
                    f"{shown} warps per issue-active cycle: {holds}"]
        return [f"stall {cond['stall']} {shown} {cond['op']} {cond['threshold']}: {holds}"]
    if "ratio" in cond:
        return [f"{cond['ratio'][0]} / {cond['ratio'][1]} = {shown} {cond['op']} "
                f"{cond['threshold']}: {holds}"]
    return [f"{cond.get('metric')} = {shown} {cond.get('op')} {cond.get('threshold')}: {holds}"]


def trigger_lines(plan: dict[str, Any], mid: str) -> list[str]:
    """Method ``mid``'s trigger verdict and figures on the current best's NCU profile."""
    ev = plan.get("trigger_evidence")
    if not ev:
        return ["no NCU evidence (CPU device, or no profile): every trigger counts as held"]
    t = ev["triggers"].get(mid) or {}
    head = f"trigger ({t.get('text', '')}): verdict {t.get('verdict')}"
    return [head] + ["  " + x for x in leaves(t.get("conditions"))]


def choose(plan: dict[str, Any], version: str) -> tuple[list[str], list[str]]:
    """The claimed methods and the note's generated lines, for one device class's plan."""
    scan = {r["method"]: r for rows in plan["catalog_scan"].values() for r in rows}
    claim, lines = [], []
    for axis, wanted in PLANS[version].items():
        if axis in INHERITED.get(version, ()):
            if set(wanted) & set(plan["selected"]):
                continue  # the parent applies it already (selected by an earlier iteration)
            lines.append(f"- {axis}: this version also holds the previous version's edit "
                         f"({'/'.join(wanted)}), which the parent does not apply (it did not "
                         "win its iteration): claimed too, so that the claim covers every "
                         "edit over the parent.")
        admitted = [m for m in wanted if scan.get(m, {}).get("admitted")]
        pick = admitted[0] if admitted else wanted[0]
        claim.append(pick)
        row = scan.get(pick, {})
        if pick != wanted[0]:
            why = scan.get(wanted[0], {}).get("reason") or "not in the scan"
            lines.append(f"- {axis}: the planned {wanted[0]} is NOT admitted ({why}); this "
                         f"version realizes {pick} too, which the scan admits: claimed instead.")
        elif not row.get("admitted"):
            why = row.get("reason") or "not in the scan"
            lines.append(f"- {axis}: {pick} is NOT admitted ({why}) and no method this version "
                         "realizes is; claimed all the same, because the code applies it (the "
                         "analysis above says why it is tried).")
        else:
            lines.append(f"- {axis}: {pick} (priority {row.get('priority')}) admitted by the scan.")
        lines += ["  " + x for x in trigger_lines(plan, pick)]
        higher = [r for r in plan["catalog_scan"].get(axis, [])
                  if r["admitted"] and r["priority"] < row.get("priority", 99)]
        for r in higher:
            lines.append(f"  higher-priority {r['method']} (priority {r['priority']}) is admitted "
                         "too and not applied (the analysis above says why); its evidence:")
            lines += ["    " + x for x in trigger_lines(plan, r["method"])]
    return claim, lines


def evidence_head(plan: dict[str, Any], run_id: str) -> list[str]:
    """The plan's state in a few lines: iteration, current best, bottleneck, top stalls."""
    best = plan.get("best") or {}
    out = [f"Run {run_id}, iteration {plan['next_iteration']} on {plan['device_class']} "
           f"(sm {plan.get('sm')}); selected so far: {', '.join(plan['selected']) or 'none'}.",
           f"Current best (the parent): {best.get('candidate_id')} from iteration "
           f"{best.get('iteration')}, params {json.dumps(best.get('params'))}, "
           f"median {best.get('median_ms')} ms."]
    ev = plan.get("trigger_evidence")
    if ev:
        scores = ", ".join(f"{a} {v:.3f}" for a, v in sorted(ev["scores"].items()))
        stalls = sorted(ev["stalls"].items(), key=lambda kv: -kv[1])[:5]
        out += [f"NCU (candidate {ev['candidate_id']}, iteration {ev['iteration']}, dims "
                f"{json.dumps(ev['dims'])}): bottleneck {ev['bottleneck']}; scores {scores}.",
                "Top stalls (warps per issue-active cycle): "
                + ", ".join(f"{i + 1}. {r} {v:.3g}" for i, (r, v) in enumerate(stalls)) + "."]
    else:
        out.append("No NCU evidence in the plan (CPU device): every trigger counts as held.")
    return out


def main(argv: list[str]) -> int:
    """The command (module docstring); returns the exit status."""
    if len(argv) != 5 or argv[2] not in PLANS:
        print(__doc__, file=sys.stderr)
        return 2
    propose_json, run_id, version, note_in, note_out = argv
    plans = [p for p in json.loads(Path(propose_json).read_text()) if p["run_id"] == run_id]
    if not plans:
        print(f"{propose_json}: no plan for run {run_id}", file=sys.stderr)
        return 1
    claims = {}
    text = [Path(note_in).read_text().rstrip(), "",
            "## Evidence at submission (generated from `kopt propose --format json`)", ""]
    for plan in plans:
        claim, lines = choose(plan, version)
        claims[plan["device_class"]] = claim
        text += evidence_head(plan, run_id) + [""] + lines + [""]
    if len({tuple(c) for c in claims.values()}) > 1:
        print(f"device classes disagree on the claim: {claims}; taking the first",
              file=sys.stderr)
    claim = next(iter(claims.values()))
    text.append(f"Claimed: {','.join(claim)}")
    Path(note_out).write_text("\n".join(text) + "\n")
    print("\n".join(text[text.index("## Evidence at submission (generated from `kopt propose "
                                    "--format json`)"):]))
    print(",".join(claim))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
