"""The steps fixture's three-iteration loop (tests/fixtures/steps: gains of 16x, 8x and 4x by
construction, the closing contest with the clock patcher of tests/test_closing_clock.py),
run once per value in argv[1] (comma-separated `true` / `false`: sweep.yaml's
timing.realtime), printing each iteration's stop reason, gain and noise threshold, every
candidate row and the closing's verdict. Run it beside docs/verified/cpu_load.sh.

    KOPT_CACHE=$(mktemp -d) python docs/verified/cpu_realtime_probe.py true,false,true,false
"""
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import ray  # noqa: E402
from test_pipeline import FlipAtClosing, _states  # noqa: E402

from kopt.core.spec import load_sweep  # noqa: E402
from kopt.driver.sweep import run_sweep  # noqa: E402
from kopt.store.database import query  # noqa: E402

ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING",
         log_to_driver=False)
for rep, rt in enumerate(sys.argv[1].split(",")):
    tmp = Path(tempfile.mkdtemp())
    d = tmp / "steps"
    shutil.copytree(ROOT / "tests" / "fixtures" / "steps", d)
    trigger = tmp / "closing-started"
    src = d / "steps.cpp"
    src.write_text(f'#define TRIGGER_FILE "{trigger}"\n#define CLOCK_TRICK 1\n'
                   + src.read_text())
    y = d / "sweep.yaml"
    y.write_text(y.read_text().replace("realtime: true", f"realtime: {rt}"))
    store = tmp / "store"
    run_sweep(load_sweep(d), store, backend="cpu", observers=[FlipAtClosing(trigger)])
    st = _states(store)
    print("run", rep, "realtime", rt, {k: (v.get("stop"), round(v.get("gain") or 0, 3),
                                         round(v.get("noise") or 0, 4))
                                     for k, v in st.items()}, flush=True)
    _, rows = query("select iteration, candidate_id, status, median_ms, iqr_ms, n_samples "
                    "from candidates order by iteration, median_ms", store)
    for r in rows:
        print("   ", r)
    _, rows = query("select json_extract_string(state, '$.closing.best.candidate_id'), "
                    "json_extract(state, '$.closing.dropped') from iterations "
                    "where json_type(json_extract(state, '$.closing')) = 'OBJECT' "
                    "order by created_at", store)
    print("    closing best, dropped:", rows[-1:], flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
