"""The process sampler against real processes: a parent with busy and idle children."""

import os
import subprocess
import sys
import threading
import time

from tests.conftest import wait_for
from tuimon.sources.process import ProcessSampler

TREE = """
import subprocess, sys, time
busy = subprocess.Popen([sys.executable, "-c", "import time\\nend = time.time() + 60\\nwhile time.time() < end: pass"])
idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
data = bytearray(200 * 2**20)  # 200 MiB in the parent
print(busy.pid, idle.pid, flush=True)
time.sleep(60)
"""


def test_target_and_children_with_cpu_rss_threads_state():
    p = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    busy = idle = None
    try:
        busy, idle = map(int, p.stdout.readline().split())
        time.sleep(1.0)  # (the busy child spins for a second before tuimon first looks)
        s = ProcessSampler(p.pid, popen=p)
        first = {r.pid: r for r in s.sample().procs}  # (its CPU since it started, as top's first screen; 0 before)
        assert first[busy].cpu_percent > 20 and first[idle].cpu_percent < 10  # (a loaded machine shares the core)
        ran = [(time.monotonic(), _ran_s(busy))]
        time.sleep(1.0)
        x = s.sample()
        ran.append((time.monotonic(), _ran_s(busy)))
        rows = {r.pid: r for r in x.procs}
        assert x.alive and set(rows) == {p.pid, busy, idle}
        assert rows[p.pid].role == "target" and rows[busy].role == "child"
        # the busy child's CPU over the interval is what the kernel says it ran then (its schedstat), however
        # loaded the machine (beside burners it gets less than a core)
        own = 100 * (ran[1][1] - ran[0][1]) / (ran[1][0] - ran[0][0])
        assert abs(rows[busy].cpu_percent - own) < 15 and own > 20 and rows[idle].cpu_percent < 10, (rows[busy], own)
        assert rows[p.pid].rss > 200 * 2**20 and x.rss >= rows[p.pid].rss
        assert rows[p.pid].threads >= 1 and rows[idle].state == "sleeping"
        assert isinstance(rows[p.pid].io_read, int)
        p.kill()
        p.wait()
        gone = wait_for(lambda: (y := s.sample()) and not y.alive and y, what="exit")
        assert gone.exit_code == -9 and gone.exited_at is not None and gone.procs == []
    finally:
        for pid in filter(None, (busy, idle)):  # (orphans by now: pkill -P would miss them, the busy one spinning on)
            subprocess.run(["kill", "-9", str(pid)], capture_output=True)
        p.kill()
        p.wait()


LEADER_ENDS_FIRST = """
import ctypes, os, threading, time
threading.Thread(target=lambda: (time.sleep(0.5), os._exit(7))).start()
ctypes.CDLL(None).pthread_exit(None)  # the main thread ends: a zombie until the other thread ends the process
"""


def test_the_exit_code_of_a_job_whose_main_thread_ends_before_its_other_threads():
    """Its main thread shows as a zombie while the process still runs: the sample that sees it
    gone waits for the code (poll() answers None then)."""
    p = subprocess.Popen([sys.executable, "-c", LEADER_ENDS_FIRST])
    try:
        s = ProcessSampler(p.pid, popen=p)
        wait_for(lambda: open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z", timeout=10,
                 what="the main thread a zombie")
        assert p.poll() is None  # (what the sampler asked before)
        x = s.sample()
        assert x.alive is False and x.exit_code == 7
    finally:
        p.kill()
        p.wait()


def test_unknown_pid():
    x = ProcessSampler(4194304).sample()
    assert x.alive is False and x.exit_code is None and x.exited_at


def test_pss_is_read_one_process_a_cycle_and_then_kept(monkeypatch):
    """smaps_rollup walks a process's address space under its mmap lock: the sampler reads it for
    one process a cycle (the stalest), and each at most every PSS_EVERY_S."""
    import tuimon.sources.process as sp

    reads = []
    real = sp._read_pss
    monkeypatch.setattr(sp, "_read_pss", lambda proc: reads.append(proc.pid) or real(proc))
    p = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        busy, idle = map(int, p.stdout.readline().split())
        s = ProcessSampler(p.pid, popen=p)
        per_cycle = []
        for _ in range(5):
            before = len(reads)
            rows = {r.pid: r for r in s.sample().procs}
            per_cycle.append(len(reads) - before)
        assert per_cycle == [1, 1, 1, 0, 0] and sorted(reads) == sorted([p.pid, busy, idle])
        assert rows[p.pid].pss > 150 * 2**20 and rows[p.pid].pss <= rows[p.pid].rss  # its own 200 MiB
        assert all(isinstance(r.pss, int) for r in rows.values())
        monkeypatch.setattr(sp, "PSS_EVERY_S", 0.0)  # (now every one is due: still one a cycle)
        before = len(reads)
        s.sample()
        assert len(reads) - before == 1
    finally:
        subprocess.run(["pkill", "-9", "-P", str(p.pid)])  # before the parent dies: then they are orphans
        p.kill()
        p.wait()


def _ran_s(pid: int) -> float:
    """The seconds a process's main thread has run on a CPU (the kernel's schedstat)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


SPIN = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"


def _on_one_core():
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # the lowest core this test may use


def test_the_loop_threads_wait_for_a_core_is_read():
    """Two spinners pinned to one core: each runs about half the time and waits for the core the
    other half (the kernel's run delay); the loop thread's CPU alone would say 'blocked elsewhere'."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=_on_one_core) for _ in range(2)]
    try:
        s = ProcessSampler(spinners[0].pid)
        s.follow_loop(spinners[0].pid)  # a process's main thread has its PID as its TID
        s.sample()
        time.sleep(1.5)
        x = s.sample()
        assert x.loop_cpu is not None and x.loop_cpu_wait is not None, x
        assert 20 < x.loop_cpu < 80 and 20 < x.loop_cpu_wait < 80, x  # the core shared, roughly in halves
        assert x.loop_cpu + x.loop_cpu_wait > 85, x  # it wanted the core all the time
    finally:
        for p in spinners:
            p.kill()
            p.wait()


GROWS = """
import sys
held = []
for line in sys.stdin:  # each line: 100 MiB more, touched (its own pages)
    held.append(bytearray(100 * 2**20))
    print("grown", flush=True)
"""


def test_between_reads_a_processs_pss_follows_its_rss():
    """PSS is read one process at a time, each every PSS_EVERY_S; in between, pages the process
    gains are its own and count in its PSS as in its RSS."""
    p = subprocess.Popen([sys.executable, "-c", GROWS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        s = ProcessSampler(p.pid, popen=p)
        first = s.sample().procs[0]
        p.stdin.write("x\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "grown"
        after = s.sample().procs[0]  # (not read again: PSS_EVERY_S has not passed)
        grew = after.rss - first.rss
        assert grew > 90 * 2**20 and after.pss - first.pss == grew and after.pss <= after.rss
    finally:
        p.kill()
        p.wait()


def test_a_process_that_execs_is_named_for_what_it_runs_now():
    p = subprocess.Popen(["sh", "-c", "read line; exec sleep 30"], stdin=subprocess.PIPE, text=True)
    try:
        s = ProcessSampler(p.pid, popen=p)
        assert s.sample().procs[0].name == "sh"
        p.stdin.write("go\n")
        p.stdin.flush()
        wait_for(lambda: s.sample().procs[0].name == "sleep", timeout=10, what="the name after exec")
    finally:
        p.kill()
        p.wait()


def test_a_threads_state_is_read_from_its_own_stat():
    """procinfo.thread_state: a thread blocked on a lock sleeps ('S'), the thread asking runs ('R'), a thread
    that ended has no state (None); a command name with parens and spaces does not shift the fields."""
    import threading

    from tuimon.channel import procinfo

    lock = threading.Lock()
    lock.acquire()
    ready = threading.Event()

    def blocked():
        ready.set()
        lock.acquire()

    t = threading.Thread(target=blocked, name="blocked")
    t.start()
    ready.wait()
    try:
        assert wait_for(lambda: procinfo.thread_state(os.getpid(), t.native_id) == "S", what="the thread asleep")
        asking = procinfo.thread_state(os.getpid(), threading.get_native_id())
        assert asking == "R", asking
    finally:
        lock.release()
        t.join()
    # (join() returns once the thread's Python code ended; the kernel's task may run its exit a moment longer)
    wait_for(lambda: procinfo.thread_state(os.getpid(), t.native_id) is None, what="the thread's task gone")
    rename = "open('/proc/self/comm', 'w').write('a) (b c'); print(flush=True); import time; time.sleep(30)"
    odd = subprocess.Popen([sys.executable, "-c", rename], stdout=subprocess.PIPE)  # (as prctl PR_SET_NAME does)
    try:
        odd.stdout.readline()
        name, fields = procinfo.read_stat(odd.pid, odd.pid)
        assert name == b"a) (b c" and fields[0] in (b"S", b"R") and int(fields[1]) == os.getpid(), (name, fields[:2])
    finally:
        odd.kill()
        odd.wait()


def test_host_names_and_pss_say_what_psutil_says(tmp_path, monkeypatch):
    """The host's memory (used: total less available), a process's PSS, and a GPU process's name,
    user and command (a program whose name the kernel cuts at 15 bytes: its command's program)."""
    import psutil

    from tuimon.sources import process as sp

    monkeypatch.setattr(sp, "_host_threads", set())  # (this thread's first call, whatever ran before)
    h = sp.host_sample()
    vm = psutil.virtual_memory()
    assert h.mem_total == vm.total and abs(h.mem_used - (vm.total - vm.available)) < 64 * 2**20
    assert h.cpus == psutil.cpu_count() and 0.0 < h.cpu_percent <= 100.0  # (the first: since boot, not psutil's 0.0)
    long = tmp_path / "a_program_named_long"
    long.symlink_to("/bin/sleep")
    p = subprocess.Popen([str(long), "30"])
    try:
        wait_for(lambda: psutil.Process(p.pid).name() == "a_program_named_long", timeout=10)
        ps = psutil.Process(p.pid)
        names = sp.ProcessNames()
        assert names.describe(p.pid) == ("a_program_named_long", ps.username(), f"{long} 30")
        pss = sp._read_pss(ps)
        assert pss is not None and 0 < pss <= ps.memory_info().rss
    finally:
        p.kill()
        p.wait()
    assert names.describe(p.pid) == (None, None, None) and sp._read_pss(ps) is None
    assert sp.ProcessNames().describe(p.pid) == (None, None, None)


def test_proc_files_are_read_whole_however_many_reads_they_take(monkeypatch, tmp_path):
    """procinfo.read_file (os.read, not a file object) returns what open().read() returns, where a
    file takes several reads: a process's children (a line per child), a sleeping process's status,
    a regular file; read with a 64-byte chunk here so that each takes several."""
    import psutil

    from tuimon.channel import procinfo

    kids = [subprocess.Popen(["sleep", "30"]) for _ in range(40)]
    try:
        big = tmp_path / "big"
        big.write_bytes(bytes(range(256)) * 40)
        paths = [f"/proc/{kids[0].pid}/status", f"/proc/{os.getpid()}/task/{threading.get_native_id()}/children",
                 str(big)]
        whole = [procinfo.read_file(p) for p in paths]
        monkeypatch.setattr(procinfo, "_CHUNK", 64)
        monkeypatch.setattr(procinfo, "_WHOLE", 32)
        for path, want in zip(paths, whole, strict=True):
            with open(path, "rb") as f:
                assert procinfo.read_file(path) == f.read() == want, path
        assert len(whole[1].split()) >= len(kids) and len(whole[1]) > 64
        assert procinfo.children(os.getpid()) == sorted(c.pid for c in psutil.Process().children())
        assert procinfo.read_file("/proc/stat", head=True).startswith(b"cpu ")
        assert len(procinfo.read_file("/proc/stat", head=True)) <= 64
        assert procinfo.process_state(kids[0].pid, procinfo.start_ticks(kids[0].pid)) == "alive"
        assert procinfo.process_state(kids[0].pid, procinfo.start_ticks(kids[0].pid) + 1) == "reused"
        zombie = kids[1]
        zombie.kill()  # (not waited for yet: a zombie, which has exited)
        wait_for(lambda: procinfo.is_zombie(zombie.pid), what="the zombie")
        assert procinfo.process_state(zombie.pid, procinfo.start_ticks(zombie.pid)) == "exited"
    finally:
        for k in kids:
            k.kill()
            k.wait()
    assert procinfo.process_state(kids[0].pid, 0) == "exited"


def test_tree_kept_while_no_pid_is_handed_out_and_listed_again_when_a_parent_exits(monkeypatch):
    from tuimon.channel import procinfo
    from tuimon.sources import process as sp

    listings = []
    real = procinfo.descendants
    monkeypatch.setattr(procinfo, "descendants", lambda pid: listings.append(pid) or real(pid))
    monkeypatch.setattr(procinfo, "last_pid", time.monotonic_ns)  # (a new PID at every look: listed each time)
    p = subprocess.Popen([sys.executable, "-c", "import subprocess, time\n"
                          "subprocess.Popen(['sh', '-c', 'sleep 60 & wait'])\ntime.sleep(60)"])
    try:
        s = sp.ProcessSampler(p.pid)
        tree = wait_for(lambda: s.sample() and len(s._tree_pids) == 3 and s._tree_pids,
                        what="the job, its child and grandchild")
        middle, leaf = tree[1], tree[2]
        monkeypatch.setattr(procinfo, "last_pid", lambda: 12345)  # (the machine forks all the time: held still)
        s.sample()  # (listed, then kept from here on)
        n = len(listings)
        assert {r.pid for r in s.sample().procs} == {p.pid, middle, leaf} and len(listings) == n  # (kept: not listed)
        os.kill(middle, 9)  # its child goes to another parent: the kept list no longer holds
        wait_for(lambda: procinfo.parent(leaf) != middle, what="the leaf's new parent")
        assert {r.pid for r in s.sample().procs} == {p.pid, middle} and len(listings) == n + 1  # (middle: a zombie)
        assert {r.pid for r in s.sample().procs} == {p.pid, middle} and len(listings) == n + 1  # (still one: kept)
        monkeypatch.setattr(procinfo, "last_pid", lambda: 12346)  # (a PID handed out: listed again)
        s.sample()
        assert len(listings) == n + 2
    finally:
        subprocess.run(["pkill", "-9", "-P", str(p.pid)], capture_output=True)
        p.kill()
        p.wait()
        if "leaf" in locals():
            subprocess.run(["kill", "-9", str(leaf)], capture_output=True)
