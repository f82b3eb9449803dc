"""Fresh harnesses kept started for a device's contests.

Every contender of a contest runs in a harness of its own that has loaded no other code
(workers.device_actor ``contest``), and on a GPU each harness's start is torch's import
and a CUDA context: 1.4-1.8 s of each contest of a cold 140-candidate sweep on an H100,
and the 3.5 s of the outside clock's first block, whose candidate harness a contest had
ended (docs/verified/2026-12-06-session47.md, section 2). :class:`Spares` starts such
harnesses in the background, at moments where no timing runs on the device but a job's,
and hands each out once: a spare runs one contender's job (or becomes the device's own
harness, once a contest ended that) and is never put back.

A spare is the same sandbox a contest would start on demand (workers.sandbox: its own
scratch folder, cgroup, namespaces and seccomp filter; a child of the device actor, whose
witness turns reach it as they reach one started on demand); starting it earlier changes
what the contenders' processes are only in when they began. Each holds a CUDA context
(about 0.5 GiB of device memory) while it waits: ``KOPT_SPARES=0`` for a problem that
needs the whole device.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait

from workers.sandbox import Sandbox


class Spares:
    """Up to ``n`` started harnesses of ``backend`` with environment ``env`` (as
    workers.sandbox ``Sandbox(backend, env)``), each set up in a background thread.

    Args:
        backend: ``"cuda"`` or ``"cpu"``.
        env: the harnesses' extra environment (the device actor's).
        n: how many to keep started (0: none; :meth:`take` then returns new, unstarted
            sandboxes, which their user starts).
    """

    def __init__(self, backend: str, env: dict[str, str], n: int):
        self.backend, self.env, self.n = backend, env, max(0, int(n))
        self._pool: ThreadPoolExecutor | None = None
        self._starting: list[Future[Sandbox]] = []
        self.taken = 0  # spares handed out started (a start the device did not wait for)
        # a spare did not set up in its sandbox: none is started again (on a host where
        # the sandbox never works, each would import torch beside the jobs for nothing)
        self.broken = False

    def fill(self) -> None:
        """Start as many harnesses as make :attr:`n` started or starting: each process is
        started here, in the calling thread (the device actor's: a harness started from a
        pool thread would not die with the actor, workers.reap ``tie_to_parent``), and its
        setting up (torch's import, the device) waited for in the background; returns
        without waiting (but for a CPU device's first, which starts its zygote). Never
        raises: a spare that cannot start, or starts only outside the sandbox
        (workers.sandbox ``start`` falls back so; a spare never does: a candidate that took
        the device's memory while it started must not make the next contender's harness an
        unsandboxed one), is not handed out (:meth:`take`), and once one did not set up,
        none is started again (:attr:`broken`)."""
        if self.broken:
            return
        while len(self._starting) < self.n:
            box = None
            try:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.n, thread_name_prefix="kopt-spare")
                box = Sandbox(self.backend, self.env)
                box.launch()
                self._starting.append(self._pool.submit(self._ready, box))
            except Exception:  # noqa: BLE001 -- none now; the contest starts its own
                if box is not None:
                    box.close()
                return

    @staticmethod
    def _ready(box: Sandbox) -> Sandbox:
        try:
            box.ready()
        except BaseException:
            box.close()
            raise
        return box

    def ready(self) -> bool:
        """Whether a spare is started or starting (:meth:`take` then waits for no new
        start)."""
        return bool(self._starting)

    def settle(self) -> None:
        """Wait until no spare is starting (a contest's timing, or the outside clock's,
        must not share the host and the device with harnesses that import torch and make
        CUDA contexts)."""
        wait(self._starting)

    def take(self) -> Sandbox:
        """A harness that has loaded nothing: the oldest spare, waited for when it is still
        starting and live when its start succeeded, else a new sandbox, not started.
        Never raises."""
        while self._starting:
            f = self._starting.pop(0)
            try:
                box = f.result()
            except Exception:  # noqa: BLE001 -- its user's own start says why
                self.broken = True
                continue
            if box.served == 0 and box.running:
                self.taken += 1
                return box
            box.close()
        return Sandbox(self.backend, self.env)

    def close(self) -> None:
        """Close every spare (each waited for first) and the threads that start them."""
        self.settle()
        for f in self._starting:
            if f.exception() is None:
                f.result().close()
        self._starting = []
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
