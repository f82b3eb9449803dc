# ruff: noqa
import json, os
import pytest
from test_turns import against_honest

@pytest.mark.parametrize("mode,n", [(int(m), int(n)) for m, n in
                         [x.split(":") for x in os.environ.get("RT_CASES", "20:4096").split(",")]])
def test_rt(tmp_path, mode, n):
    src = os.environ.get("RT_SRC", "untimed.cpp")
    defs = {"MODE": mode, **json.loads(os.environ.get("RT_DEFS", "{}"))}
    res = against_honest(tmp_path, src, defs, "attacker", n)
    open("/tmp/rt59x/rt.log","a").write(json.dumps({"src":src,"mode":mode,"n":n,"defs":defs,"res":res}, default=str)[:6000]+"\n")
    out = {"status": res.get("status"), "error": res.get("error"),
           "witness": res.get("witness"),
           "results": [{k: r.get(k) for k in ("key", "job_key", "median_ms", "iqr_ms", "samples_ms", "unseen_ms")}
                       for r in res.get("results", [])]}
    print("RT", src, mode, n, json.dumps(out, default=str))
