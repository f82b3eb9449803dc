"""workers.audit: candidate code that enters the harness's interpreter is seen (Python's
audit hooks), and no other audit hook is taken."""

import ctypes
import sys
import threading

from test_clock import PACK, PACK_ARGS, _pack_with, _then_honest, artifact, job

from conftest import faults_running_python
from workers import audit


def test_python_run_from_a_candidate_s_call_is_taken_and_the_harness_s_own_is_not():
    """Inside :func:`workers.audit.call` (a candidate library's call), a string the C API
    runs raises ``compile`` and ``exec`` and a ``gc.get_objects`` raises its own event:
    each is taken once, in order; the same outside a call, and the harness's own ctypes
    calls, are not."""
    assert audit.install()
    audit.taken()
    run = ctypes.pythonapi.PyRun_SimpleString  # its symbol looked up outside the window
    run.argtypes = [ctypes.c_char_p]
    assert run(b"import gc\ngc.get_objects()\n") == 0
    assert audit.taken() == []
    assert audit.call(run, b"import gc\n_x = len(gc.get_objects())\n") == 0
    assert audit.taken() == ["compile (<string>)", "exec", "gc.get_objects"]
    assert audit.bound(ctypes.pythonapi.Py_IsInitialized)() == 1
    assert audit.taken() == []


def test_an_event_of_another_thread_during_a_call_is_named_so_and_ref_py_s_are_left_out():
    """An event raised by another thread while a candidate's call runs is taken with
    " on another thread"; one of a thread in ``skip`` (those ref.py started) is not."""
    audit.install()
    audit.taken()
    ran = threading.Event()
    t = threading.Thread(target=lambda: (sys.audit("kopt.test.other"), ran.set()))

    def start_and_wait() -> None:
        t.start()
        ran.wait(30)

    audit.call(start_and_wait)
    t.join()
    taken = audit.taken()
    assert "kopt.test.other on another thread" in taken, taken
    t2 = threading.Thread(target=lambda: sys.audit("kopt.test.other"))
    audit.call(lambda: (t2.start(), t2.join()))
    assert "kopt.test.other on another thread" not in audit.taken(skip={t2.ident})


def test_no_audit_hook_is_added_after_the_harness_s():
    """``sys.addaudithook`` after :func:`workers.audit.install` adds nothing (the hook is
    never called) and raises nothing (CPython suppresses a ``RuntimeError`` of an earlier
    hook); made inside a candidate's call, it is taken."""
    assert audit.install()
    calls = []
    sys.addaudithook(lambda event, args: calls.append(event))
    sys.audit("kopt.test.after")
    assert calls == []
    audit.taken()
    audit.call(sys.addaudithook, lambda event, args: calls.append(event))
    sys.audit("kopt.test.after")
    assert calls == [] and audit.taken() == ["sys.addaudithook"]


def test_a_candidate_that_runs_python_ends_its_harness_and_its_row_says_so(tmp_path):
    """A candidate whose ``solve`` runs Python through the C API (here, a harmless
    assignment: what it changes need not be one the harness knows to check) keeps its
    status and figures; its row says its code entered the interpreter and which events,
    the harness ends after the job, and the next job runs in a fresh one, unblamed."""
    from workers.sandbox import ENTERED

    src = faults_running_python(tmp_path / "enter", "_kopt_test = 1\n")
    res, ended, alive, later, again = _then_honest(tmp_path, job(
        artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096}, PACK_ARGS))
    assert res["status"] == "ok" and res["error"].startswith(ENTERED), res
    assert res["entered"] == ["compile (<string>)", "exec"], res
    assert "compile (<string>), exec)" in res["error"], res
    assert ended == 1 and not alive, (ended, alive)
    assert later["status"] == "ok" and not later["error"] and again == 1, later


# the Python C API functions both candidates below call (the harness's libpython is in the
# process: no header or library to link)
C_API = r"""
extern "C" {
void* PyImport_AddModule(const char*);
void* PyObject_GetAttrString(void*, const char*);
int PyList_SetItem(void*, long, void*);
int PyList_SetSlice(void*, long, long, void*);
void* PyBool_FromLong(long);
int PyGILState_Ensure(void);
void PyGILState_Release(int);
int PyRun_SimpleString(const char*);
}
"""
# a candidate that first sets workers.audit's WINDOW flag back through C API calls that
# raise no audit event, then runs Python (a red-team review's, CPU, 2026-12-07)
FLAG_OFF = C_API + r"""
static void kopt_test_off() {
  static bool done = false;
  if (done) return;
  done = true;
  int g = PyGILState_Ensure();
  void* m = PyImport_AddModule("workers.audit");
  void* w = m ? PyObject_GetAttrString(m, "WINDOW") : nullptr;
  if (w) PyList_SetItem(w, 0, PyBool_FromLong(0));
  PyRun_SimpleString("_kopt_test = 1\n");
  PyGILState_Release(g);
}
"""


def test_python_run_after_the_window_flag_was_turned_off_is_seen(tmp_path):
    """On the harness's main thread the hook takes an event for the candidate's when the
    stack holds workers.audit ``call``'s frame, not when a flag says so: a candidate that
    set the flag back through the C API first is still seen running Python."""
    from workers.sandbox import ENTERED

    src = _pack_with(tmp_path, "off", FLAG_OFF, "kopt_test_off();")
    res, ended, _, later, _ = _then_honest(tmp_path, job(
        artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096}, PACK_ARGS))
    assert res["error"].startswith(ENTERED) and "compile (<string>)" in res["entered"], res
    assert ended == 1 and later["status"] == "ok" and not later["error"], (ended, later)


# a candidate that points every pipe and socket of the harness it can write at /dev/null,
# runs Python, empties workers.audit's list of what it saw (C API calls that raise no
# event), and puts the descriptors back: what the hook wrote to the sandbox went nowhere (a
# red-team review's)
PIPE_AWAY = r"""
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
""" + C_API + r"""
static void kopt_test_away() {
  static bool done = false;
  if (done) return;
  done = true;
  int saved[256], null = open("/dev/null", O_WRONLY);
  for (int fd = 0; fd < 256; ++fd) {
    struct stat st;
    saved[fd] = -1;
    int fl = fcntl(fd, F_GETFL);
    if (fd != null && fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))
        && fl >= 0 && (fl & O_ACCMODE) != O_RDONLY) {
      saved[fd] = dup(fd);
      dup2(null, fd);
    }
  }
  int g = PyGILState_Ensure();
  PyRun_SimpleString("_kopt_test = 1\n");
  void* m = PyImport_AddModule("workers.audit");
  void* taken = m ? PyObject_GetAttrString(m, "_TAKEN") : nullptr;
  if (taken) PyList_SetSlice(taken, 0, 1 << 20, nullptr);
  PyGILState_Release(g);
  for (int fd = 0; fd < 256; ++fd)
    if (saved[fd] >= 0) { dup2(saved[fd], fd); close(saved[fd]); }
  close(null);
}
"""


def test_python_run_while_the_harness_s_pipes_point_elsewhere_ends_it(tmp_path):
    """The hook writes what it sees to the pipe it was given only while that descriptor is
    still the same file (its inode, taken when the hook was added): a candidate that
    pointed the harness's writable pipes at /dev/null while its Python ran, then emptied
    the list the answer is made from and put the pipes back, ends its harness
    (``crashed``) at its first event; the next job runs in a fresh one."""
    src = _pack_with(tmp_path, "away", PIPE_AWAY, "kopt_test_away();")
    res, ended, _, later, _ = _then_honest(tmp_path, job(
        artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096}, PACK_ARGS))
    assert res["status"] == "crashed" and "SIGKILL" in res["error"], res
    assert ended >= 1 and later["status"] == "ok" and not later["error"], (ended, later)
