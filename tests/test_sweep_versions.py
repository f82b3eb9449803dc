"""The hand-written versions shipped under sweeps/*/versions/ (vN.cu and its analysis vN.md,
whose first line is ``claim: <methods>``), as docs/verified/h200_decode_loop.sh submits them
with ``kopt submit``: each claim states every axis, obeys the catalog's hard rules at sm_90
and sm_87, claims no method its sweep's first iteration realizes (one it selected, or found
ineffective, is refused whatever the note says), and its note names every higher-priority
method on a claimed axis and the claimed methods themselves, so that no scan of the first
iteration's evidence can refuse it for priority order or admission. No compiler here: the
versions' sm_90 builds are checked on the GPU host by the loop itself."""

from __future__ import annotations

import pytest

from conftest import ROOT
from kopt.core.catalog import load_catalog
from kopt.core.claims import check_claim, parse_claim, unstated_axes
from kopt.core.contract import parse_signature_file
from kopt.core.spec import load_sweep

VERSIONS = sorted(ROOT.glob("sweeps/*/versions/v*.cu"))


def test_the_decode_sweeps_ship_versions():
    assert {v.parent.parent.name for v in VERSIONS} == {"rmsnorm_residual", "lm_head_top1",
                                                      "gate_up_silu", "rotary", "w4a16_gemv",
                                                      "decode_attention", "w8a8_gemm",
                                                      "gate_up_prefill"}


@pytest.mark.parametrize("src", VERSIONS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_a_shipped_versions_claim_passes_every_scan(src):
    cat = load_catalog()
    sweep = load_sweep(src.parent.parent)
    note = src.with_suffix(".md").read_text()
    first, _, analysis = note.partition("\n")
    assert first.startswith("claim: ")
    text = first.removeprefix("claim: ")
    assert unstated_axes(text) == []
    claim = parse_claim(text)
    assert claim, "a version claims at least one method"
    realized = set(sweep.spaces["cuda"].methods)
    assert not set(claim) & realized, "the first iteration may have selected it already"
    # the worst scan: every method of the catalog admitted except the claimed ones, which the
    # evidence did not trigger
    scan: dict[str, list[dict]] = {}
    for m in cat.methods.values():
        scan.setdefault(m.axis, []).append({"method": m.id, "axis": m.axis,
                                            "priority": m.priority,
                                            "admitted": m.id not in claim,
                                            "reason": "" if m.id not in claim
                                            else "no_trigger"})
    for sm in (90, 87):
        check = check_claim(claim, cat, sm=sm, scan=scan, reason=analysis)
        assert check.ok, check.lines()
    # the version keeps its sweep's solve() contract
    assert parse_signature_file(src) == sweep.spaces["cuda"].signature
