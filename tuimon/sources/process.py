"""The target process and its descendants (DataLoader workers, torchrun ranks), the host's CPU and memory,
and the names of a GPU's processes: from psutil (Linux).

psutil is imported at the first sample, not with this module: its import (15-30 ms on the dev
machine, more under load) then runs on the sampler's thread while the UI loads (monitor.session's
EarlyStart), not before the first frame on the main thread. Four things are still read from /proc
by hand (procinfo), each where psutil has no call for it, said again where each is read:
- the tree's listing, /proc/PID/task/TID/children (_descendants): psutil's children() reads every
  process's stat on the machine instead;
- /proc/loadavg's last PID (ProcessSampler._tree): whether any process was made since that listing;
- one thread's /proc/PID/task/TID/stat (ProcessSampler._loop_thread_cpu): psutil's threads() reads
  every thread's (a CUDA job has dozens), and has no read of one thread;
- /proc/PID/task/TID/schedstat (the same): the time a thread waited for a core, which psutil does
  not read at all."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..channel import procinfo
from ..model import NA, HostSample, ProcessSample, ProcRow
from ..model.process import Num

if TYPE_CHECKING:
    import psutil

_CLK_TCK = os.sysconf("SC_CLK_TCK")
EXIT_CODE_WAIT_S = 2.0  # the most a sample waits for the exit code of a job that looks gone
TREE_EVERY_S = 10.0  # the process tree is listed again at least this often (see ProcessSampler._tree)


class ProcessSampler:
    """One sample per cycle: the target and each live descendant, with CPU % since the previous
    cycle. `popen`: the subprocess.Popen when tuimon launched the target (gives the exit code).
    Each process is one psutil.Process kept from sample to sample (its cpu_percent() is since the
    last call on that object), read under oneshot() (stat and status read once for all its fields);
    its PSS is read now and then (PSS_EVERY_S)."""

    def __init__(self, pid: int, popen: subprocess.Popen[Any] | None = None) -> None:
        self.pid = pid
        self.popen = popen
        self._procs: dict[int, psutil.Process] = {}  # pid -> the Process read last (the same object each sample)
        self._first: set[int] = set()  # pids whose cpu_percent() has not been asked before: since they started
        self._target: psutil.Process | None = None  # made at the first sample (psutil's import: see above)
        self.exited_at: float | None = None  # wall-clock time we first saw it gone
        self.exit_code: int | None = None
        self.loop_tid: int | None = None  # the target's thread that steps, when the channel says
        self._loop_cpu: tuple | None = None  # (tid, ticks, run delay ns, monotonic s) at the last sample
        self._pss: dict[int, tuple[float, int | None, int]] = {}  # pid -> (monotonic s when read, PSS, RSS then)
        self._tree_pids: list[int] = []  # the target and its descendants at the last listing
        self._tree_at: tuple[int | None, float] = (None, 0.0)  # (the machine's last PID before that listing, when: monotonic s)
        self._zombies: set[int] = set()  # descendants that were zombies at the last sample

    def _exit_code(self) -> int | None:
        """The exit code of the job tuimon started, once it looks gone. Not poll(): its main thread
        shows as a zombie while the kernel still ends its other threads (a window that widens on a
        busy machine), and poll() answers None then; a `tuimon run --plain` that ended on that
        sample said "exited" without the code. A short wait takes the code as the process ends."""
        assert self.popen is not None
        try:
            return self.popen.wait(timeout=EXIT_CODE_WAIT_S)
        except subprocess.TimeoutExpired:  # (still ending: the next sample asks again)
            return None

    def _alive_target(self, reading: contextlib.ExitStack) -> psutil.Process | None:
        """The target's Process while it runs (in oneshot() on `reading`): not gone, not a zombie,
        its PID not reused (psutil's is_running() compares the creation time); None from the first
        time it is not."""
        import psutil

        if self.exited_at is not None:
            return None
        try:
            if self._target is None:
                self._target = psutil.Process(self.pid)
                self._first.add(self.pid)
            reading.enter_context(self._target.oneshot())
            if self._target.is_running() and self._target.status() != psutil.STATUS_ZOMBIE:
                return self._target
        except psutil.Error:  # (NoSuchProcess; AccessDenied where its stat is hidden: hidepid)
            pass
        return None

    def sample(self) -> ProcessSample:
        t = time.monotonic_ns()
        with contextlib.ExitStack() as reading:  # (each process's oneshot() open while its fields are read)
            target = self._alive_target(reading)
            if target is not None:
                tree = self._tree(target, reading)
                read = [self._row(p, "target" if p.pid == self.pid else "child") for p in tree]
                rows = [row for row in read if row is not None]
        if target is None:
            if self.exited_at is None:
                self.exited_at = time.time()
            if self.popen is not None and self.exit_code is None:
                self.exit_code = self._exit_code()
            return ProcessSample(pid=self.pid, t=t, alive=False, exited_at=self.exited_at,
                                 exit_code=self.exit_code)
        for gone in set(self._procs) - {p.pid for p in tree}:
            del self._procs[gone]
            self._first.discard(gone)
        self._zombies = {r.pid for r in rows if r.state == "zombie"}
        rows = self._with_pss(rows)
        loop_cpu, loop_cpu_wait = self._loop_thread_cpu()
        return ProcessSample(
            pid=self.pid, t=t, procs=rows,
            cpu_percent=round(sum(r.cpu_percent for r in rows if isinstance(r.cpu_percent, float)), 1),
            rss=sum(r.rss for r in rows if isinstance(r.rss, int)),
            loop_cpu=loop_cpu,
            loop_cpu_wait=loop_cpu_wait,
        )

    def _with_pss(self, rows: list[ProcRow]) -> list[ProcRow]:
        """The rows with their PSS: the stalest one (older than PSS_EVERY_S) read again, the others
        the last read moved by their RSS since (pages a process gained or freed are its own: they
        count in its PSS as in its RSS; the shares of pages it shares change slowly)."""
        now, live = time.monotonic(), {r.pid: r for r in rows}
        for gone in set(self._pss) - set(live):
            del self._pss[gone]
        stale = [pid for pid in live if now - self._pss.get(pid, (-PSS_EVERY_S, None, 0))[0] >= PSS_EVERY_S]
        if stale:
            pid = min(stale, key=lambda q: self._pss.get(q, (-PSS_EVERY_S, None, 0))[0])
            rss = live[pid].rss
            self._pss[pid] = (now, _read_pss(self._procs[pid]), rss if isinstance(rss, int) else 0)
        return [replace(r, pss=_moved(self._pss[r.pid], r.rss)) if r.pid in self._pss else r for r in rows]

    def follow_loop(self, tid: int | None) -> None:
        """The loop's thread (from the channel): its first CPU reading is taken now."""
        if tid != self.loop_tid:
            self.loop_tid = tid
            self._loop_thread_cpu()

    def _loop_thread_cpu(self) -> tuple[float | None, float | None]:
        """% of one core the loop's thread used since the last sample, and % of the time it was
        runnable but waiting for a core (a busy machine: it would have used that too). Read by hand
        from /proc: psutil reads a thread's CPU only in threads(), every thread's stat at once (a CUDA
        job has dozens; 41 threads: 538 us a call against 5.5 us for this one read, dev machine), and
        has no call for the run delay (schedstat)."""
        tid = self.loop_tid
        if tid is None:
            return None, None
        ticks, now = procinfo.thread_cpu_ticks(self.pid, tid), time.monotonic()
        waited = procinfo.thread_run_delay_ns(self.pid, tid)
        last, self._loop_cpu = self._loop_cpu, (tid, ticks, waited, now) if ticks is not None else None
        if ticks is None or last is None or last[0] != tid or now <= last[3]:
            return None, None
        span = now - last[3]
        cpu = round(100.0 * (ticks - last[1]) / _CLK_TCK / span, 1)
        wait = None if waited is None or last[2] is None else round(100.0 * (waited - last[2]) / 1e9 / span, 1)
        return cpu, wait

    def _tree(self, target: psutil.Process, reading: contextlib.ExitStack) -> list[psutil.Process]:
        """The target and its descendants, each kept from the last sample where it is the same
        process (psutil's == compares PID and creation time), each in oneshot() on `reading`.
        psutil's children(recursive=True) reads every process's stat on the machine (its ppid map),
        so the last list is kept while no PID was handed out on the machine since it was made (a fork
        anywhere moves /proc/loadavg's last PID: read by hand, psutil has no call for it), no process
        in it ended since the last sample (an ending hands its children to another parent: a zombie
        or gone; status() is read from the row's stat, where ppid() would check the PID again each
        call), and it is younger than TREE_EVERY_S (where /proc and /proc/loadavg see different PID
        namespaces)."""

        last, now = procinfo.last_pid(), time.monotonic()
        fresh = last is None or last != self._tree_at[0] or now - self._tree_at[1] >= TREE_EVERY_S
        if not fresh and self._tree_pids:
            kept = [target] + [self._procs[pid] for pid in self._tree_pids[1:] if pid in self._procs]
            if len(kept) == len(self._tree_pids) and not any(self._ended(p, reading) for p in kept[1:]):
                return kept
        tree = [target]
        for p in _descendants(target):
            old = self._procs.get(p.pid)
            if old is None or old != p:  # (new, or its PID went to another process)
                self._procs[p.pid] = old = p
                self._first.add(p.pid)
                self._pss.pop(p.pid, None)
            tree.append(old)
            reading.enter_context(old.oneshot())
        self._procs[self.pid] = target
        self._tree_pids, self._tree_at = [p.pid for p in tree], (last, now)
        return tree

    def _ended(self, p: psutil.Process, reading: contextlib.ExitStack) -> bool:
        """Whether a kept process ended since the last sample: gone, or a zombie that was not one
        (its oneshot() entered here, for its row's reads)."""
        import psutil

        try:
            reading.enter_context(p.oneshot())
            return p.status() == psutil.STATUS_ZOMBIE and p.pid not in self._zombies
        except psutil.Error:
            return True

    def _row(self, p: psutil.Process, role: str) -> ProcRow | None:
        """The process's row; its CPU % since the last sample read it (at the first, since the
        process started, as top's first screen shows it). None where it exited meanwhile."""
        import psutil

        try:
            name, state = p.name(), p.status()
            cpu = p.cpu_percent()  # (since the last call on this object: psutil keeps the last reading in it)
            if p.pid in self._first:  # (psutil's first call answers 0.0: since it started instead)
                self._first.discard(p.pid)
                times, age = p.cpu_times(), _age_s(p)
                cpu = 100.0 * (times.user + times.system) / age if age > 0 else 0.0
            rss, threads = p.memory_info().rss, p.num_threads()
        except psutil.ZombieProcess:  # (ended, not yet waited for: its stat still says so)
            why = NA("zombie")
            return ProcRow(pid=p.pid, role=role, name=why, cpu_percent=0.0, rss=why, threads=why, state="zombie",
                           io_read=why, io_write=why)
        except psutil.NoSuchProcess:
            return None  # it exited between listing and reading
        except psutil.AccessDenied:
            denied = NA("access denied")
            return ProcRow(pid=p.pid, role=role, name=denied, cpu_percent=denied, rss=denied, threads=denied,
                           state=denied, io_read=denied, io_write=denied)
        io_read, io_write = _read_io(p)
        return ProcRow(pid=p.pid, role=role, name=name, cpu_percent=round(cpu, 1), rss=rss,
                       threads=threads, state=state, io_read=io_read, io_write=io_write)


def _age_s(p: psutil.Process) -> float:
    """Seconds since a process started. Not time.time() - create_time(): psutil adds the boot time
    of /proc/stat, whole seconds, so that is up to 1 s off (a job launched a moment ago would show a
    tenth of its CPU); its creation less the same boot time is the kernel's start (ticks since boot)."""
    import psutil

    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - (p.create_time() - psutil.boot_time()))


def _descendants(target: psutil.Process) -> list[psutil.Process]:
    """The target's descendants, children first. Listed from /proc/PID/task/TID/children by hand
    (procinfo.descendants: the files of the tree's own threads), not by psutil's children(), which
    reads the stat of every process on the machine for its ppid map: ~3.5x the CPU for a job of 5
    processes on a machine of 130 (benchmarks/process_cost.py), more on a machine of thousands
    (kernel threads count). Each is then psutil's; one older than the target is not its
    descendant but a reused PID (psutil's children() has the same check)."""
    import psutil

    out = []
    for pid in procinfo.descendants(target.pid):
        try:
            p = psutil.Process(pid)
            if p.create_time() >= target.create_time():
                out.append(p)
        except psutil.Error:  # (gone meanwhile)
            continue
    return out


def _read_io(p: psutil.Process) -> tuple[int | NA, int | NA]:
    """(read_bytes, write_bytes) of /proc/PID/io: readable by its owner (ptrace's rule) only."""
    import psutil

    try:
        io = p.io_counters()
        return io.read_bytes, io.write_bytes
    except (psutil.Error, OSError, NotImplementedError) as e:
        why = NA(f"I/O counters not readable: {type(e).__name__}")
        return why, why


# PSS from /proc/PID/smaps_rollup (psutil's memory_full_info()): the kernel walks the process's whole
# address space under its mmap lock for it (8 ms for a 330 MB process on a 2-core VM, 12-16 ms for the
# demo's processes there, 11.8 ms for a 1.26 GB CUDA job on an H100), so each process is read at most
# every PSS_EVERY_S, one process a cycle: never a burst, never the job's lock held for long. In between,
# a process's PSS follows its RSS (_moved: shared pages it maps meanwhile count whole until the next read,
# so the sum leans toward RSS for up to PSS_EVERY_S while workers fault in their parent's pages). At 30 s
# the reads of the demo's three processes were ~1 ms of CPU a second, ~8% of the monitor's.
PSS_EVERY_S = 120.0


def _moved(read: tuple[float, int | None, int], rss: Num) -> int | None:
    """A PSS read (when, PSS, RSS then) moved by the RSS since, within 0..RSS."""
    _, pss, rss_then = read
    if pss is None or not isinstance(rss, int):
        return pss
    return max(0, min(rss, pss + rss - rss_then))


def _read_pss(p: psutil.Process) -> int | None:
    """PSS (shared pages split among their sharers): psutil's memory_full_info() (smaps_rollup,
    Linux 4.14+); None where not readable."""
    import psutil

    try:
        return int(p.memory_full_info().pss)
    except (psutil.Error, OSError, AttributeError):  # (AttributeError: a platform without pss)
        return None


_host_threads: set[int] = set()  # threads that asked host_sample() before (psutil keeps a CPU reading per thread)


def host_sample() -> HostSample:
    """The machine's CPU (all cores, since the last call on this thread; at the first, since boot,
    as top's first screen: psutil's first answer on a thread is 0.0) and memory (used: total less
    what is available)."""
    import psutil

    cpu = psutil.cpu_percent(interval=None)
    if threading.get_ident() not in _host_threads:
        _host_threads.add(threading.get_ident())
        t = psutil.cpu_times()  # (busy as psutil counts it: guest time is in user time already; idle and iowait are not)
        total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        cpu = round(100.0 * (total - t.idle - getattr(t, "iowait", 0.0)) / total, 1) if total > 0 else 0.0
    vm = psutil.virtual_memory()
    return HostSample(cpu_percent=cpu, cpus=psutil.cpu_count() or 1, mem_used=vm.total - vm.available,
                      mem_total=vm.total)


class ProcessNames:
    """Name, user and command of any PID (a GPU's processes), cached per process (psutil's
    is_running() tells a PID that went to another process)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[psutil.Process, tuple[str | None, str | None, str | None]]] = {}

    def describe(self, pid: int) -> tuple[str | None, str | None, str | None]:
        import psutil

        hit = self._known.get(pid)
        if hit is not None and hit[0].is_running():
            return hit[1]
        try:
            p = psutil.Process(pid)
            with p.oneshot():
                got = (p.name(), p.username(), " ".join(p.cmdline()) or None)
        except psutil.Error:
            self._known.pop(pid, None)
            return None, None, None
        if len(self._known) > 1024:
            self._known.clear()
        self._known[pid] = (p, got)
        return got
