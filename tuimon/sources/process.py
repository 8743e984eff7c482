"""The target process and its descendants (DataLoader workers, torchrun ranks), the host's CPU and memory,
and the names of a GPU's processes: read from /proc (Linux). psutil read the same files; its import was
~12 ms of the monitor's start (dev machine), so it is not imported."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from dataclasses import replace
from typing import Any, NamedTuple

from ..channel import procinfo
from ..model import NA, HostSample, ProcessSample, ProcRow
from ..model.process import Num

_CLK_TCK = os.sysconf("SC_CLK_TCK")
EXIT_CODE_WAIT_S = 2.0  # the most a sample waits for the exit code of a job that looks gone
TREE_EVERY_S = 10.0  # the process tree is listed again at least this often (see ProcessSampler._tree)


class ProcessSampler:
    """One sample per cycle: the target and each live descendant, with CPU % since the previous
    cycle. `popen`: the subprocess.Popen when tuimon launched the target (gives the exit code).
    A row is one read of /proc/PID/stat and one of /proc/PID/io (psutil read four files for it, and
    stat twice more to check the PID: ~0.13 ms a process, a cycle); a process is named once, and its
    PSS read now and then (PSS_EVERY_S)."""

    def __init__(self, pid: int, popen: subprocess.Popen[Any] | None = None) -> None:
        self.pid = pid
        self.popen = popen
        self._seen: dict[int, _Seen] = {}  # pid -> what the last sample read of it
        self.exited_at: float | None = None  # wall-clock time we first saw it gone
        self.exit_code: int | None = None
        self.loop_tid: int | None = None  # the target's thread that steps, when the channel says
        self._loop_cpu: tuple | None = None  # (tid, ticks, run delay ns, monotonic s) at the last sample
        self._pss: dict[int, tuple[float, int | None, int]] = {}  # pid -> (monotonic s when read, PSS, RSS then)
        self._start = procinfo.start_ticks(pid)  # (the PID's process: one reusing it later is another)
        self._tree_pids: list[int] = []  # the target and its descendants at the last listing
        self._tree_at: tuple[int | None, float] = (None, 0.0)  # (the machine's last PID before that listing, when: monotonic s)
        if self._start is None:
            self.exited_at = time.time()


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

    def sample(self) -> ProcessSample:
        t = time.monotonic_ns()
        target = _try_stat(self.pid)  # (read once: whether it lives, and its row)
        if self._start is None or not isinstance(target, _Stat) or target.start != self._start or target.state == "Z":
            if self.exited_at is None:
                self.exited_at = time.time()
            if self.popen is not None and self.exit_code is None:
                self.exit_code = self._exit_code()
            return ProcessSample(pid=self.pid, t=t, alive=False, exited_at=self.exited_at,
                                 exit_code=self.exit_code)
        rows = []
        tree = self._tree(target)
        pids = [pid for pid, _ in tree]
        for pid, st in tree:
            row = self._row(pid, "target" if pid == self.pid else "child", st)
            if row is not None:
                rows.append(row)
        for gone in set(self._seen) - set(pids):
            del self._seen[gone]
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
            self._pss[pid] = (now, _read_pss(pid), rss if isinstance(rss, int) else 0)
        return [replace(r, pss=_moved(self._pss[r.pid], r.rss)) if r.pid in self._pss else r for r in rows]

    def follow_loop(self, tid: int | None) -> None:
        """The loop's thread (from the channel): its first CPU reading is taken now."""
        if tid != self.loop_tid:
            self.loop_tid = tid
            self._loop_thread_cpu()

    def _loop_thread_cpu(self) -> tuple[float | None, float | None]:
        """% of one core the loop's thread used since the last sample, and % of the time it was
        runnable but waiting for a core (a busy machine: it would have used that too)."""
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

    def _tree(self, target: _Stat) -> list[tuple[int, _Stat | OSError]]:
        """The target and its descendants (children first), each with its stat read (or why not).
        Listing them reads every thread's /proc children file (a CUDA job has dozens of threads:
        ~6 us a file), so the last list is kept while no PID was handed out on the machine since it
        was made (a fork anywhere moves /proc/loadavg's last PID), each process in it still has
        its parent in it (one that exited handed its children to another), and it is younger than
        TREE_EVERY_S (where /proc and /proc/loadavg see different PID namespaces)."""
        last, now = procinfo.last_pid(), time.monotonic()
        fresh = last is None or last != self._tree_at[0] or now - self._tree_at[1] >= TREE_EVERY_S
        if not fresh and self._tree_pids:
            listed = set(self._tree_pids)
            kept = [(self.pid, target)] + [(pid, _try_stat(pid)) for pid in self._tree_pids[1:]]
            if all(isinstance(st, _Stat) and st.ppid in listed for _, st in kept[1:]):
                return kept
        self._tree_pids, self._tree_at = [self.pid, *procinfo.descendants(self.pid)], (last, now)
        return [(self.pid, target)] + [(pid, _try_stat(pid)) for pid in self._tree_pids[1:]]

    def _row(self, pid: int, role: str, st: _Stat | OSError) -> ProcRow | None:
        """The process's row from its stat read (or why not); its CPU % over the time since the
        last sample read it (at the first, since the process started, as top's first screen shows
        it; a PID that went to another process since is a new one)."""
        now = time.monotonic()
        if isinstance(st, PermissionError):
            denied = NA("access denied")
            return ProcRow(pid=pid, role=role, name=denied, cpu_percent=denied, rss=denied, threads=denied,
                           state=denied, io_read=denied, io_write=denied)
        if isinstance(st, OSError):
            return None  # it exited between listing and reading
        seen = self._seen.get(pid)
        if seen is None or seen.start != st.start:  # (new, or its PID went to another process)
            self._pss.pop(pid, None)
            seen = _Seen(st.start, 0, now - _age_s(st.start), st.comm, _name(pid, st.comm))
        elif seen.comm != st.comm:  # (it exec'd: `env python ...`, a shell script's exec)
            seen = seen._replace(comm=st.comm, name=_name(pid, st.comm))
        cpu = 100.0 * (st.ticks - seen.ticks) / _CLK_TCK / (now - seen.at) if now > seen.at else 0.0
        self._seen[pid] = seen._replace(ticks=st.ticks, at=now)
        io_read, io_write = _read_io(pid)
        return ProcRow(pid=pid, role=role, name=seen.name, cpu_percent=round(cpu, 1), rss=st.rss_pages * _PAGE,
                       threads=st.threads, state=_STATES.get(st.state, st.state), io_read=io_read, io_write=io_write)


def _age_s(start_ticks: int) -> float:
    """Seconds since a process started (stat's start time: clock ticks after boot)."""
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / _CLK_TCK)


class _Seen(NamedTuple):
    start: int  # the process's start (clock ticks since boot): a PID reused is another process
    ticks: int  # its CPU time (user + system, clock ticks) when last read
    at: float  # when (monotonic s)
    comm: str  # stat's name when its name was read (an exec changes it)
    name: str | NA


class _Stat(NamedTuple):
    comm: str
    state: str
    ppid: int
    ticks: int
    threads: int
    start: int
    rss_pages: int


def _read_stat(pid: int) -> _Stat:
    """/proc/PID/stat (proc(5)); raises OSError where the process is gone or not readable."""
    comm, fields = procinfo.read_stat(pid)
    if len(fields) < 22:
        raise FileNotFoundError(f"/proc/{pid}/stat: cut short")
    return _Stat(comm.decode("utf-8", "replace"), fields[0].decode(), int(fields[1]), int(fields[11]) + int(fields[12]),
                 int(fields[17]), int(fields[19]), int(fields[21]))


def _try_stat(pid: int) -> _Stat | OSError:
    """_read_stat's answer, or the OSError it raised (the process is gone, or not readable)."""
    try:
        return _read_stat(pid)
    except OSError as e:
        return e


def _read_io(pid: int) -> tuple[int | NA, int | NA]:
    """(read_bytes, write_bytes) of /proc/PID/io: readable by its owner (ptrace's rule) only."""
    try:
        got = dict(line.split(b": ") for line in procinfo.read_file(f"/proc/{pid}/io").splitlines() if b": " in line)
        return int(got[b"read_bytes"]), int(got[b"write_bytes"])
    except (OSError, KeyError, ValueError) as e:
        why = NA(f"I/O counters not readable: {'AccessDenied' if isinstance(e, PermissionError) else type(e).__name__}")
        return why, why


def _name(pid: int, comm: str) -> str:
    """The process's name: stat's, which the kernel cuts at 15 bytes; a cut one is the command's
    program where that starts with it (psutil's rule)."""
    if len(comm.encode()) < 15:  # (the kernel's limit is 15 bytes, not characters)
        return comm
    argv = procinfo.cmdline(pid)
    program = os.path.basename(argv[0]) if argv else ""
    return program if program.startswith(comm) else comm


_PAGE = os.sysconf("SC_PAGE_SIZE")
_STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop", "Z": "zombie",
           "X": "dead", "x": "dead", "K": "wake-kill", "W": "waking", "I": "idle", "P": "parked"}  # (psutil's words)


# PSS from /proc/PID/smaps_rollup: the kernel walks the process's whole address space under its
# mmap lock for it (8 ms for a 330 MB process on a 2-core VM, 12-16 ms for the demo's processes there,
# 11.8 ms for a 1.26 GB CUDA job on an H100), so each process is read at most every PSS_EVERY_S, one
# process a cycle: never a burst, never the job's lock held for long. In between, a process's PSS
# follows its RSS (_moved: shared pages it maps meanwhile count whole until the next read, so the
# sum leans toward RSS for up to PSS_EVERY_S while workers fault in their parent's pages). At 30 s
# the reads of the demo's three processes were ~1 ms of CPU a second, ~8% of the monitor's.
PSS_EVERY_S = 120.0


def _moved(read: tuple[float, int | None, int], rss: Num) -> int | None:
    """A PSS read (when, PSS, RSS then) moved by the RSS since, within 0..RSS."""
    _, pss, rss_then = read
    if pss is None or not isinstance(rss, int):
        return pss
    return max(0, min(rss, pss + rss - rss_then))


def _read_pss(pid: int) -> int | None:
    """PSS (shared pages split among their sharers) from smaps_rollup (Linux 4.14+); None where not readable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all cores since boot, as psutil counts them: guest time is in
    user time already; idle and iowait are not busy."""
    try:
        ticks = [int(x) for x in procinfo.read_file("/proc/stat", head=True).split(b"\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    total = sum(ticks[:8])  # user nice system idle iowait irq softirq steal (not guest, guest_nice)
    return total - sum(ticks[3:5]), total


_last_cpu = _cpu_times()  # (the first sample's CPU % is since this import, as psutil's was since its own)


def _memory() -> tuple[int, int]:
    """(used, total) bytes: total less what is available (MemAvailable, or free + buffers + cache)."""
    got: dict[bytes, int] = {}
    for line in procinfo.read_file("/proc/meminfo").splitlines():
        key, _, rest = line.partition(b":")
        if key in (b"MemTotal", b"MemAvailable", b"MemFree", b"Buffers", b"Cached"):
            got[key] = int(rest.split()[0]) * 1024
    total = got[b"MemTotal"]
    available = got.get(b"MemAvailable", got.get(b"MemFree", 0) + got.get(b"Buffers", 0) + got.get(b"Cached", 0))
    return total - available, total


def host_sample() -> HostSample:
    """The machine's CPU (all cores, since the last call) and memory."""
    global _last_cpu
    now, last = _cpu_times(), _last_cpu
    _last_cpu = now
    cpu = 0.0
    if now is not None and last is not None and now[1] > last[1]:
        cpu = round(min(100.0, max(0.0, 100.0 * (now[0] - last[0]) / (now[1] - last[1]))), 1)
    used, total = _memory()
    return HostSample(cpu_percent=cpu, cpus=os.cpu_count() or 1, mem_used=used, mem_total=total)


class ProcessNames:
    """Name, user and command of any PID (a GPU's processes), cached per process."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[int, tuple]] = {}  # pid -> (start ticks, what describe says)

    def describe(self, pid: int) -> tuple[str | None, str | None, str | None]:
        created = procinfo.start_ticks(pid)
        if created is None:
            return None, None, None
        hit = self._known.get(pid)
        if hit is not None and hit[0] == created:
            return hit[1]
        try:
            comm, _ = procinfo.read_stat(pid)
            with open(f"/proc/{pid}/status", "rb") as f:
                uid = next(int(line.split()[1]) for line in f if line.startswith(b"Uid:"))
        except (OSError, StopIteration, ValueError, IndexError):
            return None, None, None
        name = _name(pid, comm.decode("utf-8", "replace"))
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = str(uid)  # (psutil's answer for a uid without a name)
        command = " ".join(procinfo.cmdline(pid) or []) or None
        if len(self._known) > 1024:
            self._known.clear()
        self._known[pid] = (created, (name, user, command))
        return name, user, command
