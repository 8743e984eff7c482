"""`tuimon inject` and `attach --inject`: the probe loaded into a job started plainly (real ptrace
through pyinjector, a real CPython loop with real DataLoader workers), and every refusal leaving the
process as it was."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, tuimon_cmd, wait_for
from tuimon.inject import NotLoaded, loader_path, target
from tuimon.inject import inject as do_inject

LOOP = str(ROOT / "tests" / "workloads" / "plain_loop.py")
pytestmark = pytest.mark.skipif(loader_path() is None, reason="tuimon's loader library was not built (no C compiler)")


def plain_env():
    """The job's environment: nothing of tuimon's (no TUIMON_* variable, no PYTHONPATH)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TUIMON_") and k != "PYTHONPATH"}


def start(*cmd, **kw):
    return subprocess.Popen(list(map(str, cmd)), env=plain_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def wait_torch(p):
    wait_for(lambda: b"libtorch_python" in open(f"/proc/{p.pid}/maps", "rb").read(), timeout=60, what="torch imported")


def inject(pid, *extra):
    return subprocess.run(tuimon_cmd("inject", pid, *extra), capture_output=True, text=True, timeout=60)


def test_a_plain_loop_injected_mid_run_shows_its_anatomy_and_its_steps(tmp_path):
    truth, ready = tmp_path / "truth.json", tmp_path / "ready"
    job = start(sys.executable, LOOP, "--seconds", 22, "--truth", truth, "--ready", ready)
    try:
        wait_for(ready.exists, timeout=90, what="50 steps")  # (a job still importing torch is put off: a test below)
        r = inject(job.pid)
        loaded_at = time.monotonic()
        assert r.returncode == 0, r.stderr
        assert f"probe loaded into {job.pid}" in r.stderr
        time.sleep(6)
        snap = json.loads(subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--json", "--window", 3),
                                         capture_output=True, text=True, timeout=60).stdout)
        out, err = job.communicate(timeout=60)
        last = json.loads(subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--json"), capture_output=True,
                                         text=True, timeout=60).stdout)  # (the channel it left: a last look)
    finally:
        job.kill()
    # the job as without tuimon: its exit code, its output, nothing of tuimon's on either stream
    assert job.returncode == 0 and out.startswith("done ") and "tuimon" not in out + err, (out, err)
    t = json.loads(truth.read_text())
    phases = {p["name"]: p["share"] for p in snap["phases"]}
    print("tuimon:", phases, "the loop's own:", t["shares"])
    for name in ("data", "forward", "backward", "optimizer"):
        assert phases.get(name, 0) == pytest.approx(t["shares"][name], abs=0.05), (name, phases, t["shares"])
    # steps from the first whole step after the load: the loop's own count of the steps that ended after
    # the load returned (the load itself ran at most one step earlier, and that step is not whole)
    own = sum(1 for e in t["step_ends"] if e > loaded_at)
    print("steps: tuimon", last["steps"], "the loop's own since the load", own)
    assert abs(last["steps"] - own) <= max(2, 0.02 * own), (last["steps"], own)
    assert snap["verdict"]["code"] != "outside"


def test_attach_inject_on_a_launcher_loads_the_loop_below_it(tmp_path):
    """A shell that started the loop: the loop (not the shell, not its DataLoader workers) gets the probe."""
    truth, ready = tmp_path / "truth.json", tmp_path / "ready"
    job = start("bash", "-c", f'"{sys.executable}" "{LOOP}" --seconds 40 --truth "{truth}" --ready "{ready}"; true')
    try:
        loop = wait_for(lambda: next((c for c in _children(job.pid)), None), timeout=30, what="the loop")
        wait_for(ready.exists, timeout=90, what="50 steps")
        snap = subprocess.run(tuimon_cmd("attach", job.pid, "--inject", "--once", "--json", "--window", 3),
                              capture_output=True, text=True, timeout=90)
        assert snap.returncode == 0, snap.stderr
        doc = json.loads(snap.stdout)
        assert f"probe loaded into {loop}" in snap.stderr and doc["steps"] > 0 and doc["phases"], snap.stderr
    finally:
        subprocess.run(["pkill", "-P", str(job.pid)])
        job.kill()
        job.wait()


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


@pytest.mark.parametrize("case", ["no torch", "not python", "no such process"])
def test_refusals_exit_2_and_leave_the_process_running(case):
    if case == "no torch":
        p = start(sys.executable, "-c", "import time; time.sleep(60)")
        want = "has not imported torch"
    elif case == "not python":
        p = start("bash", "-c", "sleep 60")
        want = "not a Python interpreter"
    else:
        p = None
        want = "no process"
    try:
        if p is not None:
            time.sleep(1)
        pid = p.pid if p is not None else 4_000_000
        r = inject(pid)
        assert r.returncode == 2 and want in r.stderr, r.stderr
        if p is not None:
            time.sleep(0.5)
            assert p.poll() is None  # still running, untouched
    finally:
        if p is not None:
            p.kill()
            p.wait()


def test_the_probe_already_there_and_another_users_process_are_refused(tmp_path):
    ready = tmp_path / "ready"
    job = start(sys.executable, LOOP, "--seconds", 40, "--truth", tmp_path / "t.json", "--ready", ready)
    try:
        wait_for(ready.exists, timeout=90, what="50 steps")  # (a job still importing torch is put off: below)
        assert inject(job.pid).returncode == 0
        again = inject(job.pid)
        assert again.returncode == 2 and "already runs tuimon's probe" in again.stderr, again.stderr
        if os.geteuid() == 0:  # another user's process: the check made as nobody (a fork of this test), the job root's
            r, w = os.pipe()
            child = os.fork()
            if child == 0:
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    target.check(job.pid)
                    os.write(w, b"not refused")
                except target.Refused as e:
                    os.write(w, str(e).encode())
                finally:
                    os._exit(0)
            os.close(w)
            said = os.read(r, 4096).decode()
            os.waitpid(child, 0)
            assert "belongs to uid 0" in said, said
        assert job.poll() is None
    finally:
        job.kill()
        job.wait()


@pytest.mark.parametrize(("scope", "root", "child", "words"), [
    (3, True, False, "ptrace is disabled on this machine"),
    (2, False, False, "needs CAP_SYS_PTRACE"),
    (1, False, False, "limited to your own child processes"),
    (1, False, True, None),
    (1, True, False, None),
    (0, False, False, None),
])
def test_yama_ptrace_scope_is_read_as_the_kernel_does(monkeypatch, scope, root, child, words):
    """Yama's ptrace_scope, whatever this machine's is (CI has no Yama): the kernel's rule for each value."""
    monkeypatch.setattr(target.procinfo, "read_file", lambda path: f"{scope}\n".encode())
    monkeypatch.setattr(target, "_ancestors", lambda pid: {os.getpid()} if child else set())
    if words is None:
        target._ptrace_allowed(1234, 0 if root else 1000)
    else:
        with pytest.raises(target.Refused, match=words):
            target._ptrace_allowed(1234, 0 if root else 1000)


def test_the_bootstrap_binds_nothing_in_the_jobs_main_module(tmp_path):
    """The code run at the job's safe point is one expression: the job's __main__ gains no name."""
    code = __import__("tuimon.inject", fromlist=["bootstrap"]).bootstrap(str(tmp_path / "r"), str(tmp_path))
    import builtins
    from types import SimpleNamespace

    started = []
    fake = SimpleNamespace(Thread=lambda **k: SimpleNamespace(start=lambda: started.append(k["name"])))
    real_import = builtins.__import__
    b = dict(vars(builtins), __import__=lambda name, *a, **k: fake if name == "threading" else real_import(name, *a, **k))
    ns = {"__builtins__": b}
    assert code.startswith("exec(") and code.count("\n") == 1
    exec(code, ns)  # (its thread not started: the fake threading records it)
    assert set(ns) == {"__builtins__"} and started == ["tuimon-load"]
    # it says at once that it ran, and whether the frame it stopped (here, this test's) is inside an import
    assert (tmp_path / "r.progress").read_text() == "loading"
    code = __import__("tuimon.inject", fromlist=["bootstrap"]).bootstrap(str(tmp_path / "i"), str(tmp_path))
    exec(compile("exec(code, ns)", "half_imported.py", "exec"),
         {"__name__": "half_imported", "code": code, "ns": {"__builtins__": b}})
    assert (tmp_path / "i.progress").read_text() == "loading importing"


def _pythons():
    """CPython 3.10 to 3.13 interpreters on this machine (pyenv's), beside the suite's own."""
    found = {}
    for root in (os.path.expanduser("~/.pyenv/versions"),):
        for v in sorted(os.listdir(root)) if os.path.isdir(root) else ():
            exe = os.path.join(root, v, "bin", "python3")
            parts = v.split(".")
            if os.access(exe, os.X_OK) and len(parts) >= 2 and parts[0] == "3" and parts[1].isdigit() \
                    and 10 <= int(parts[1]) <= 13:
                found.setdefault(f"3.{parts[1]}", exe)
    return sorted(found.items())


@pytest.mark.parametrize(("version", "exe"), _pythons() or [pytest.param("none", "", marks=pytest.mark.skip(
    reason="no other CPython 3.10-3.13 here"))])
def test_the_loader_runs_the_bootstrap_in_each_python(version, exe):
    """The whole path into an interpreter of each version (none of them has torch: the probe, loaded by
    path from tuimon's own install into that interpreter, answers that from inside the process). The
    job's main thread never gives the GIL up, and a second thread waits (as torch's pool does), so the
    loader lands on that one: on 3.10-3.12 its pending call reaches the main thread only because the
    loader asks for the GIL (python/cpython#95820; without that, none of 3.10-3.12 answered in 15 s)."""
    job = start(exe, "-c", "import threading, time\nthreading.Thread(target=threading.Event().wait, daemon=True).start()\n"
                "end = time.time() + 30\nwhile time.time() < end: sum(range(20000))")
    try:
        time.sleep(0.5)
        with pytest.raises(NotLoaded, match="the process has not imported torch"):
            do_inject(job.pid, need_torch=False)
        time.sleep(0.3)
        assert job.poll() is None  # running on, untouched
    finally:
        job.kill()
        _, err = job.communicate()
    assert "tuimon" not in err, err  # nothing of tuimon's in the job's output


DDP = str(ROOT / "tests" / "workloads" / "ddp.py")


def test_a_torchrun_job_injected_through_its_launcher_shows_both_ranks_and_the_straggler(tmp_path):
    """torchrun started plainly (two gloo ranks, rank 1 sleeps 60 ms a step): `attach LAUNCHER --inject`
    loads the probe into both ranks (not into torchrun, not into workers), shows both and names rank 1."""
    job = start(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", DDP,
                "--truth", tmp_path, "--seconds", 60, "--min-steps", 200, "--slow-rank", "1", "--slow-ms", "60",
                "--slow-how", "sleep", start_new_session=True)
    try:
        def ready():
            try:
                return all(json.loads((tmp_path / f"rank{r}.json").read_text())["steps"] >= 20 for r in (0, 1))
            except (OSError, ValueError, KeyError):
                return False
        wait_for(ready, timeout=120, what="20 steps on both ranks")
        r = subprocess.run(tuimon_cmd("inject", job.pid), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stderr.count("probe loaded into") == 2, r.stderr
        ranks = {json.loads((tmp_path / f"rank{k}.json").read_text())["pid"] for k in (0, 1)}
        assert {int(w) for w in re.findall(r"probe loaded into (\d+)", r.stderr)} == ranks, (r.stderr, ranks)

        def straggler():
            p = subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--json", "--window", 2), capture_output=True,
                               text=True, timeout=60)
            snap = json.loads(p.stdout)
            return snap if snap["verdict"]["code"] == "straggler" else None
        snap = wait_for(straggler, timeout=90, what="the straggler verdict")
        assert sorted(row["rank"] for row in snap["ranks"]) == [0, 1] and snap["straggler"]["rank"] == 1, snap["ranks"]
    finally:
        os.killpg(job.pid, 9)
        job.communicate()


def test_the_loading_thread_leaves_nothing_for_the_main_thread_to_import():
    """mid_run.MODULES, imported off the main thread, are every module of tuimon's that installing the
    probe needs (what is left would be imported inside the main thread's pause)."""
    code = ("import sys, torch, sysconfig\n"
            "from tuimon.probe import mid_run\n"
            "mid_run._import_gently()\n"
            "before = set(sys.modules)\n"
            "from tuimon.probe import api\n"
            "st = api.instrument(mid_run=True)\n"
            "print(st.enabled, sorted(m for m in set(sys.modules) - before if m.startswith('tuimon') or 'sysconfigdata' in m))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "True []", (r.stdout, r.stderr)


def test_python_314_is_asked_through_its_own_sys_remote_exec(tmp_path, monkeypatch):
    """No 3.14 interpreter here: a stand-in for the job's interpreter records what tuimon asks of it, and
    runs the bootstrap it was handed in a process of its own (as remote_exec would in the job), so the
    whole path from the request to the result file is exercised but for PEP 768's own injection."""
    import tuimon.inject as inj

    asked = tmp_path / "asked.json"
    fake = tmp_path / "python3.14"
    fake.write_text(f"""#!{sys.executable}
import json, sys
json.dump(sys.argv[1:], open({str(asked)!r}, "w"))
code = sys.argv[-3]
assert code == "import sys; sys.remote_exec(int(sys.argv[1]), sys.argv[2])", code
src = open(sys.argv[-1]).read()
# what the job's interpreter would run at its safe point: the bootstrap, whose thread reports back
import threading
exec(src, {{"__name__": "__main__", "__builtins__": __builtins__}})
for t in threading.enumerate():
    if t.name == "tuimon-load":
        t.join(30)
""")
    fake.chmod(0o755)
    job = start(sys.executable, "-c", "import time; time.sleep(60)")
    try:
        time.sleep(0.5)
        monkeypatch.setattr(inj, "check", lambda pid, need_torch=True: target.Target(pid=pid, exe=str(fake),
                                                                                       version=(3, 14), uid=os.getuid()))
        with pytest.raises(NotLoaded, match="has not imported torch"):  # (the stand-in's own process has no torch)
            inj.inject(job.pid, wait_s=30)
        argv = json.loads(asked.read_text())
        assert argv[:3] == ["-I", "-S", "-c"] and argv[4] == str(job.pid) and argv[5].endswith("boot.py")
    finally:
        job.kill()
        job.wait()


def test_a_job_still_importing_is_put_off_and_the_wait_says_so(tmp_path):
    """The main thread inside an import (a module's top-level code: torch's own, half made) is never
    patched: the load is put off and asked again, and the injector, when it stops waiting, says that
    rather than 'blocked in a call'."""
    (tmp_path / "slow_module.py").write_text("import time\nend = time.monotonic() + 60\n"
                                             "while time.monotonic() < end:\n    sum(range(1000))\n")
    job = start(sys.executable, "-c", "import torch, slow_module", cwd=tmp_path)
    try:
        wait_torch(job)
        time.sleep(1)
        r = inject(job.pid, "--wait", 3)
        assert r.returncode == 2 and "has been importing modules since" in r.stderr, r.stderr
        assert "blocked in a call" not in r.stderr
        assert job.poll() is None
    finally:
        job.kill()
        job.wait()


@pytest.mark.parametrize(("stage", "words"), [
    (None, "has run no Python since"),  # the bootstrap never ran
    ("loading", "still being imported in the job"),
    ("loading importing", "has been importing modules since"),
    ("scheduled", "its install waits for the job's main thread, which has run no Python since"),
    ("importing 0.2 18", "asked again every 0.2 s, for 18 s more")])
def test_what_the_wait_says_follows_where_the_load_stands(tmp_path, stage, words):
    from tuimon.inject import _why_pending

    result = tmp_path / "result"
    if stage is not None:
        (tmp_path / "result.progress").write_text(stage)
    assert words in _why_pending(str(result))
