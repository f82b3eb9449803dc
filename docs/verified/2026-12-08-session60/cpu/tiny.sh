# The 4 us vector add's loop (4096 floats, 4 candidates), 3 sweeps on the CPU backend, run
# beside `pytest -n 2 tests/test_pipeline.py`; per sweep: `kopt best`'s verdict line, and each
# closing (iteration 0) contender's own-job median against its median side by side with the
# own-figures rule's limit before (4x + 0.01 ms) and now (a CPU device: 4x + 0.05 ms).
# Usage (repo root): bash docs/verified/2026-12-08-session60/cpu/tiny.sh
for i in 1 2 3; do
  rm -rf /tmp/tiny$i; python docs/verified/2026-12-07-session59/probes/mk_sweep.py /tmp/tiny$i 4096 >/dev/null
  python -m kopt sweep /tmp/tiny$i/vm --backend cpu --store /tmp/tiny$i/st > /tmp/tiny$i.out 2>&1; echo "== sweep $i rc $?"
  python -m kopt best vm --store /tmp/tiny$i/st 2>&1 | grep "^cpu-"
  python -m kopt query --store /tmp/tiny$i/st --format csv "select c.iteration, c.candidate_id, c.label, c.winner, round(o.own, 4) own_ms, round(c.median_ms, 4) side_ms, round(4 * o.own + 0.01, 4) limit_before, round(4 * o.own + 0.05, 4) limit_now from contests c join (select candidate_id, min(median_ms) own from candidates where status = 'ok' group by 1) o using (candidate_id) order by c.iteration, c.candidate_id"
done
