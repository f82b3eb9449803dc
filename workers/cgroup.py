"""Resource limits for one sandboxed harness, by the kernel's control groups (cgroups).

Each harness process tree (the ``unshare`` that starts the sandbox, and everything in it)
runs in a cgroup of its own, made beside nothing else under the cgroup kopt itself runs
in, with

- a task limit (the ``pids`` controller, ``pids.max``): a fork bomb, or a thread bomb,
  stops at the limit instead of taking every process slot of the host (``pid_max``);
- a memory limit (the ``memory`` controller: ``memory.max``, cgroup v1
  ``memory.limit_in_bytes``): a candidate that allocates without end is killed by the
  kernel's OOM killer inside its cgroup (its job a crash), not the driver or the host.

Where the host has them, the cgroup is also counted for CPU time (v1 ``cpuacct``; v2 counts
every cgroup) and can be frozen (v1 ``freezer``; v2 ``cgroup.freeze``): the outside clock
reads the first (:meth:`Cgroup.cpu_ns`) and holds the sandbox still by the second
(:meth:`Cgroup.freeze`, workers.hold).

The limits come from ``$KOPT_HARNESS_PIDS`` (default :data:`DEFAULT_PIDS` tasks: torch and
OpenMP start a thread per core) and ``$KOPT_HARNESS_MEM_GB`` (default: half the host's
memory, ``MemTotal`` of ``/proc/meminfo``). Both cgroup v1 (a hierarchy per controller)
and v2 (one, with the controllers enabled in kopt's own cgroup's ``subtree_control``) are
used as the host has them; where kopt cannot make a cgroup (not root and nothing delegated,
cgroupfs read-only in a container) the harness runs without limits and
:func:`describe` says why. The cgroup's processes cannot leave it: the sandbox mounts the
cgroup file system read-only and leaves the harness no capability.

Made by the process that starts the harness (``preexec_fn``: :meth:`Cgroup.join`, checked
with :meth:`Cgroup.holds` once it started), removed by it once the harness has exited
(:meth:`Cgroup.remove`); a cgroup whose maker was killed first is removed by the next
:func:`make` (its name holds the maker's pid; ``rmdir`` of a cgroup that still has
processes fails, so a live one is never touched).

Stdlib only: the harness's starters import it.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

PIDS_ENV, MEM_ENV = "KOPT_HARNESS_PIDS", "KOPT_HARNESS_MEM_GB"
DEFAULT_PIDS = 2048
PREFIX = "kopt-sandbox-"
DIRS_ENV = "KOPT_CGROUP_DIRS"  # a prestarted harness's cgroup, for its reaper (":"-joined)
CONTROLLERS = ("pids", "memory")
# v1: the hierarchy that counts CPU time (no limit set; v2 counts it in every cgroup's
# cpu.stat): the outside clock's CPU time of a sandbox (:meth:`Cgroup.cpu_ns`)
ACCOUNTING = "cpuacct"
# v1: the hierarchy that freezes a cgroup's processes (v2: every cgroup's cgroup.freeze):
# workers.hold holds a sandbox still by it (:meth:`Cgroup.freeze`)
FREEZER = "freezer"
BEST_EFFORT = (ACCOUNTING, FREEZER)  # joined where the host has them: no limit needs them
FREEZE_WAIT_S = 1.0  # for the kernel to report every process of a cgroup frozen
_V1_LIMIT = {"pids": "pids.max", "memory": "memory.limit_in_bytes"}
_V2_LIMIT = {"pids": "pids.max", "memory": "memory.max"}


@dataclass(frozen=True)
class Cgroup:
    """One harness's cgroup: ``dirs`` (one folder per hierarchy: v1 has one per controller,
    v2 one for both) and the limits set, in words (``tasks 2048, memory 11.8 GiB``)."""

    dirs: tuple[str, ...]
    limits: str

    def join(self) -> None:
        """Move the calling process into the cgroup (a ``preexec_fn``: everything it starts
        is in it too). Raises OSError when a hierarchy refuses."""
        for d in self.dirs:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write("0")  # 0: the writer itself

    def leave(self) -> None:
        """Move the calling process back to the parent cgroup in every hierarchy (a
        process that joined to start the harness, before it removes the cgroup). Never
        raises: one it cannot leave stays, and :meth:`remove` reports it."""
        for d in self.dirs:
            try:
                with open(os.path.join(os.path.dirname(d), "cgroup.procs"), "w") as f:
                    f.write("0")
            except OSError:
                pass

    def holds(self, pid: int) -> bool:
        """Whether process ``pid`` is in the cgroup in every hierarchy (checked once it
        started: :func:`preexec` does not fail a start when joining fails)."""
        try:
            for d in self.dirs:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    if str(pid) not in f.read().split():
                        return False
        except OSError:
            return False
        return True

    def cpu_ns(self) -> int | None:
        """CPU time used by every process that ran in the cgroup so far (ns; those that
        exited too): v1 ``cpuacct.usage``, v2 ``cpu.stat``'s ``usage_usec``. None where
        no hierarchy of it counts CPU time (a v1 host without the cpuacct controller)."""
        for d in self.dirs:
            try:
                with open(os.path.join(d, "cpuacct.usage")) as f:
                    return int(f.read())
            except (OSError, ValueError):
                pass
            try:
                with open(os.path.join(d, "cpu.stat")) as f:
                    for line in f:
                        k, _, v = line.partition(" ")
                        if k == "usage_usec":
                            return int(v) * 1000
            except (OSError, ValueError):
                pass
        return None

    def freeze(self, wait_s: float = FREEZE_WAIT_S) -> bool:
        """Freeze every process in the cgroup, those it starts meanwhile too (v1
        ``freezer.state`` ``FROZEN``, v2 ``cgroup.freeze`` 1): a frozen process runs no
        instruction until thawed, whatever signal it gets (a ``SIGCONT`` from another of
        its processes included; v1 delays even ``SIGKILL`` until the thaw). Waits up to
        ``wait_s`` s for the kernel to report them all frozen (v1 ``FREEZING`` until
        then, v2 ``cgroup.events`` ``frozen 1``).

        Returns:
            True once frozen; False where the cgroup has no freezer or the kernel refuses
            (then thawed again), or not all froze in time: then it is left freezing
            (:meth:`freezing`), those frozen stay so and the rest freeze as they leave the
            kernel (a thread in a long system call), until :meth:`thaw`. Never raises.

        Source: the kernel's Documentation/admin-guide/cgroup-v1/freezer-subsystem.rst
        and cgroup-v2.rst ("cgroup.freeze")."""
        files = self._freezer()
        if not files:
            return False
        try:
            for path, (frozen, _) in files:
                with open(path, "w") as f:
                    f.write(frozen)
        except OSError:
            self.thaw()
            return False
        deadline = time.monotonic() + wait_s
        while not all(_reads(done, want) for done, want in self._frozen_checks(files)):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def freezing(self) -> bool:
        """Whether :meth:`freeze` was asked of the cgroup and not undone (v1
        ``freezer.state`` ``FREEZING`` or ``FROZEN``, v2 ``cgroup.freeze`` 1), frozen yet
        or not. Never raises."""
        return any(_reads(path, frozen) or _reads(path, "FREEZING")
                   for path, (frozen, _) in self._freezer())

    def can_freeze(self) -> bool:
        """Whether a folder of this cgroup has a freezer (:meth:`freeze` can work)."""
        return bool(self._freezer())

    def thaw(self) -> None:
        """Let the cgroup's processes run again (:meth:`freeze` undone; a no-op where it is
        not frozen or has no freezer). Never raises."""
        for path, (_, thawed) in self._freezer():
            try:
                with open(path, "w") as f:
                    f.write(thawed)
            except OSError:
                pass

    def _freezer(self) -> list[tuple[str, tuple[str, str]]]:
        """(the file that freezes, (its frozen value, its thawed value)) per folder of this
        cgroup that has one."""
        out = []
        for d in self.dirs:
            for name, values in (("freezer.state", ("FROZEN", "THAWED")),
                                 ("cgroup.freeze", ("1", "0"))):
                if os.path.exists(os.path.join(d, name)):
                    out.append((os.path.join(d, name), values))
        return out

    @staticmethod
    def _frozen_checks(files: list[tuple[str, tuple[str, str]]]) -> list[tuple[str, str]]:
        """(file, what it reads once frozen) for each of ``files``."""
        return [(p, "FROZEN") if p.endswith("freezer.state")
                else (os.path.join(os.path.dirname(p), "cgroup.events"), "frozen 1")
                for p, _ in files]

    def remove(self, wait_s: float = 2.0) -> bool:
        """Remove the cgroup once its processes are gone (thawed first: a v1 frozen process
        cannot die), waiting up to ``wait_s`` for the kernel to let their exit through;
        True when every folder is gone."""
        self.thaw()
        deadline = time.monotonic() + wait_s
        left = list(self.dirs)
        while left:
            for d in list(left):
                try:
                    os.rmdir(d)
                    left.remove(d)
                except FileNotFoundError:
                    left.remove(d)
                except OSError:  # EBUSY: a process is still in it
                    pass
            if left and time.monotonic() > deadline:
                return False
            if left:
                time.sleep(0.05)
        return True


def _reads(path: str, want: str) -> bool:
    """Whether file ``path`` holds line ``want`` (False when it cannot be read)."""
    try:
        with open(path) as f:
            return want in f.read().splitlines()
    except OSError:
        return False


def limits_wanted() -> tuple[int, int]:
    """(tasks, memory bytes) for a harness: ``$KOPT_HARNESS_PIDS`` and
    ``$KOPT_HARNESS_MEM_GB`` (GiB), or the defaults. Raises ValueError naming the variable
    for a value that is not a positive number."""
    pids_raw = os.environ.get(PIDS_ENV) or str(DEFAULT_PIDS)
    try:
        pids = int(pids_raw)
        if pids < 64:
            raise ValueError
    except ValueError:
        raise ValueError(f"{PIDS_ENV}={pids_raw!r}: give a whole number of tasks, 64 or more "
                         f"(default {DEFAULT_PIDS})") from None
    gb = env_gib(MEM_ENV, 0.25, "the harness's memory limit", "default: half the host's memory")
    return pids, (_mem_total() // 2 if gb is None else int(gb * 2**30))


def env_gib(name: str, floor: float, what: str, default: str) -> float | None:
    """The GiB figure in environment variable ``name``, None when it is unset or empty.
    Raises ValueError (``NAME='x': give WHAT in GiB, more than FLOOR (DEFAULT)``) for a
    value that is not a number above ``floor``."""
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        gb = float(raw)
        if not gb > floor:
            raise ValueError
    except ValueError:
        raise ValueError(f"{name}={raw!r}: give {what} in GiB, more than {floor:g} "
                         f"({default})") from None
    return gb


def _mem_total() -> int:
    """The host's memory in bytes (``MemTotal``)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise OSError("no MemTotal in /proc/meminfo")


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount root in its hierarchy, mount point, fs type, super options) of every cgroup
    and cgroup2 mount (``/proc/self/mountinfo``)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
                out.append((fields[3], fields[4].replace("\\040", " "), rest[0],
                            set(rest[2].split(","))))
    return out


def _memberships() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and ``""`` -> its v2 path
    (``/proc/self/cgroup``)."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) == 3:
                for c in parts[1].split(",") if parts[1] else [""]:
                    out[c] = parts[2]
    return out


def _here(mount_root: str, mount_point: str, path: str) -> str:
    """The folder of cgroup ``path`` under a mount of its hierarchy."""
    rel = os.path.relpath(path, mount_root) if path.startswith(mount_root) else path
    return os.path.normpath(os.path.join(mount_point, rel.lstrip("/")))


def _places() -> dict[str, tuple[str, str]]:
    """Where a new cgroup would go: ``{controller: (parent folder, "v1" or "v2")}`` for each
    controller this process can use (v1 where the host mounts it so, else v2)."""
    mounts, member = _mounts(), _memberships()
    places: dict[str, tuple[str, str]] = {}
    for c in (*CONTROLLERS, *BEST_EFFORT):
        for root, point, fs, opts in mounts:
            if fs == "cgroup" and c in opts and c in member:
                places[c] = (_here(root, point, member[c]), "v1")
                break
        else:
            for root, point, fs, _opts in mounts:
                if c in BEST_EFFORT:  # v2 has no such controllers: cpu.stat, cgroup.freeze
                    break
                if fs == "cgroup2" and "" in member:
                    d = _here(root, point, member[""])
                    if _v2_enable(d, c):
                        places[c] = (d, "v2")
                    break
    return places


def _v2_enable(parent: str, controller: str) -> bool:
    """Whether cgroup v2 folder ``parent`` passes ``controller`` to its children (enabling
    it in ``cgroup.subtree_control`` when it is available and not yet enabled)."""
    try:
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            if controller in f.read().split():
                return True
        with open(os.path.join(parent, "cgroup.controllers")) as f:
            if controller not in f.read().split():
                return False
        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
            f.write(f"+{controller}")
        return True
    except OSError:
        return False


def _no_swap(d: str, kind: str, mem: int) -> None:
    """No swap beyond the memory limit (v1: memory+swap = the limit; v2: ``memory.swap.max``
    0), so that a candidate past its limit is stopped, not swapped out at the host's cost;
    a host without swap accounting has neither file, and keeps its default."""
    name, value = (("memory.memsw.limit_in_bytes", mem) if kind == "v1"
                   else ("memory.swap.max", 0))
    try:
        with open(os.path.join(d, name), "w") as f:
            f.write(str(value))
    except OSError:
        pass


def _sweep(parent: str) -> None:
    """Remove the kopt cgroups under ``parent`` whose maker (the pid in the name) is gone:
    left by a starter that was killed. One of a live maker is never touched (it may be
    made and not yet joined: removing it failed another device's harness start), nor one
    that still holds processes (``rmdir`` refuses)."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return
    for n in names:
        maker = n[len(PREFIX):].split("-", 1)[0]
        if maker.isdigit() and _alive(int(maker)):
            continue
        Cgroup((os.path.join(parent, n),), "").thaw()  # its maker died while it was held
        try:
            os.rmdir(os.path.join(parent, n))
        except OSError:
            pass  # still has processes: a live harness's


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make() -> tuple[Cgroup | None, str]:
    """A new cgroup for one harness with the limits of :func:`limits_wanted`.

    Returns:
        (the cgroup, ""), or (None, why) when none can be made here (the harness then runs
        without limits). A controller the host lacks is left out and named in ``limits``.

    Raises:
        ValueError: ``$KOPT_HARNESS_PIDS`` or ``$KOPT_HARNESS_MEM_GB`` is not usable.
    """
    pids, mem = limits_wanted()
    try:
        places = _places()
    except OSError as e:
        return None, f"cannot read this process's cgroups ({e})"
    if not set(places) & set(CONTROLLERS):
        return None, "no cgroup pids or memory controller is usable here"
    name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"  # the maker's pid: see _sweep
    made: list[str] = []
    said = []
    try:
        for c in CONTROLLERS:
            if c not in places:
                said.append(f"no {c} limit (no {c} controller)")
                continue
            parent, kind = places[c]
            d = os.path.join(parent, name)
            if d not in made:
                _sweep(parent)
                os.mkdir(d)
                made.append(d)
            with open(os.path.join(d, (_V1_LIMIT if kind == "v1" else _V2_LIMIT)[c]), "w") as f:
                f.write(str(pids if c == "pids" else mem))
            if c == "memory":
                _no_swap(d, kind, mem)
            said.append(f"tasks {pids}" if c == "pids" else f"memory {mem / 2**30:.1f} GiB")
    except OSError as e:
        Cgroup(tuple(made), "").remove(0)
        return None, f"cannot make a cgroup ({e}); the harness runs without task or memory limits"
    made += [d for c in BEST_EFFORT if (d := _best_effort(places, c, name, made))]
    kinds = "+".join(sorted({k for _, k in places.values()}))
    return Cgroup(tuple(made), f"{', '.join(said)} (cgroup {kinds})"), ""


def _best_effort(places: dict[str, tuple[str, str]], c: str, name: str,
                 made: list[str]) -> str:
    """The folder ``name`` made in cgroup v1's hierarchy of controller ``c`` (one of
    :data:`BEST_EFFORT`) where the host has it apart from those in ``made``; "" where it
    has none or refuses (the limits stand without it: without CPU accounting the outside
    clock reads the wall clock, Cgroup.cpu_ns None; without a freezer, workers.hold stops
    processes by signal)."""
    if c not in places:
        return ""
    d = os.path.join(places[c][0], name)
    if d in made:
        return ""
    _sweep(places[c][0])
    try:
        os.mkdir(d)
    except OSError:
        return ""
    return d


def describe() -> str:
    """One line for ``kopt env``: the limits a harness started now would run under (a cgroup
    is made and removed to find out), or ``none`` and why."""
    try:
        cg, why = make()
    except ValueError as e:
        return f"none: {e}"
    if cg is None:
        return f"none: {why}"
    cg.remove(0)
    return cg.limits


def preexec(cg: Cgroup | None, then: Callable[[], None] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that moves the child into ``cg`` (when given) and then calls
    ``then`` (when given); None when there is nothing to do."""
    return then if cg is None else functools.partial(_join_then, cg, then)


def _join_then(cg: Cgroup, then: Callable[[], None] | None) -> None:
    try:  # a failed join must not fail the start: the starter checks (Cgroup.holds)
        cg.join()
    except OSError:
        pass
    if then is not None:
        then()


def from_env(env: dict[str, str] | os._Environ[str] = os.environ) -> Cgroup | None:
    """The cgroup named in ``env`` (:data:`DIRS_ENV`, set for workers.prestart_reaper), or
    None."""
    raw = env.get(DIRS_ENV, "")
    return Cgroup(tuple(raw.split(":")), "") if raw else None
