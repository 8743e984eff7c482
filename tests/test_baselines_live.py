"""Baselines on real training loops (torch, DataLoader workers, the probe via `tuimon run`): a
baseline saved from a running job; a copy of the loop that slows by 30% mid-run is flagged within
10 s, naming the phase that grew; the steady loop is not flagged over a minute; `attach --once
--json --baseline` exits 3 on the regression; the exporter serves the regression series."""

import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from tests.conftest import ROOT, tuimon_cmd, wait_for
from tests.test_export import free_port

LOOP = str(ROOT / "tests" / "workloads" / "regressing.py")
SLOW_AFTER_S = 25  # (the baseline is saved in the slowing loop's first seconds, ~10 s)
STEADY_WATCH_S = 62


def job(*args) -> subprocess.Popen:
    p = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, LOOP, *map(str, args)),
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "training"
    return p


class Lines:
    """A monitor's output lines, each stamped with CLOCK_MONOTONIC when it was read."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines = proc, []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))


def once_json(pid: int, baseline: str):
    p = subprocess.run(tuimon_cmd("attach", pid, "--once", "--json", "--window", 1.5, "--baseline", baseline),
                       capture_output=True, text=True, timeout=60)
    return p.returncode, json.loads(p.stdout)


def false_alarms(lines, step_log, ref: tuple[float, float], until: float = float("inf")) -> list[str]:
    """REGRESSION lines (before `until`) at a time when the loop's own timer says it was not slower.
    On 2 cores shared by two loops, their monitors and one-shot attaches, a loop is at times really
    slower for a few seconds (a full-suite run saw the steady loop +11%, its data phase 2.0 -> 3.2
    ms): an alert then is right. False: the loop's own median step over the 6 s before the line is
    under 1.05x its median while the baseline was saved (half the 10% threshold: the monitor's 5 s
    window and this one need not line up)."""
    steps = [tuple(map(float, row.split())) for row in open(step_log) if row.strip()]
    ref_ms = statistics.median(ms for t, ms in steps if ref[0] <= t <= ref[1])
    out = []
    for t, line in lines:
        if "REGRESSION" in line and t < until:
            own = statistics.median([ms for end, ms in steps if t - 6 <= end <= t] or [ref_ms])
            if own < 1.05 * ref_ms:
                out.append(f"{own / ref_ms:.3f}x own: {line[-140:]}")
    return out


def test_a_planted_regression_is_caught_and_a_steady_run_is_not(tmp_path):
    logs = {name: str(tmp_path / f"{name}.steps") for name in ("steady", "slowing")}
    steady = job("--seconds", 120, "--step-log", logs["steady"])
    procs = [steady]
    try:
        # Both loops run while the baseline is saved: on 2 cores the second loop alone slows the
        # first (a full-suite run once saw the steady loop +11% against a baseline saved without it).
        truth = tmp_path / "truth.json"
        slowing = job("--seconds", 80, "--slow-after", SLOW_AFTER_S, "--truth", truth, "--step-log", logs["slowing"])
        procs.append(slowing)
        base = str(tmp_path / "baseline.json")
        saving = (time.monotonic(), None)
        saved = subprocess.run(tuimon_cmd("baseline", "save", steady.pid, "--seconds", 8, "-o", base),
                               capture_output=True, text=True, timeout=60)
        saving = (saving[0], time.monotonic())
        assert saved.returncode == 0, saved.stderr
        assert "saved to" in saved.stdout and "phases: data" in saved.stdout
        watch = {name: Lines(subprocess.Popen(tuimon_cmd("attach", p.pid, "--plain", "--baseline", base),
                                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
                 for name, p in (("steady", steady), ("slowing", slowing))}
        procs += [w.proc for w in watch.values()]
        port = free_port()
        exporter = subprocess.Popen(tuimon_cmd("export", slowing.pid, "--port", port, "--baseline", base),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(exporter)
        started = time.monotonic()

        slowed_at = wait_for(lambda: truth.exists() and json.loads(truth.read_text())["slowed_at"],
                             timeout=SLOW_AFTER_S + 30, what="the loop to slow down")
        flagged = wait_for(lambda: next((t for t, line in watch["slowing"].lines
                                         if "REGRESSION" in line and t >= slowed_at), None),
                           timeout=20, what="the regression alert")
        print(f"\nflagged {flagged - slowed_at:.1f} s after the slowdown")  # (pytest -s shows it)
        assert flagged - slowed_at <= 10, f"flagged {flagged - slowed_at:.1f} s after the slowdown"
        assert not false_alarms(watch["slowing"].lines, logs["slowing"], saving, until=slowed_at)
        line = next(line for t, line in watch["slowing"].lines if "REGRESSION" in line and t >= slowed_at)
        assert "backward grew" in line, line

        time.sleep(3)  # a few seconds of slow steps: the window is all slow now
        code, doc = once_json(slowing.pid, base)
        assert code == 3 and doc["baseline"]["state"] == "regression" and doc["baseline"]["grown"]["name"] == "backward"
        t = json.loads(truth.read_text())
        true_ratio = (t["ms_after"] / t["steps_after"]) / (t["ms_before"] / t["steps_before"])
        print(f"ratio {doc['baseline']['ratio']:.3f}, the loop's own {true_ratio:.3f}; grown "
              f"{doc['baseline']['grown']}")
        assert abs(doc["baseline"]["ratio"] - true_ratio) < 0.1, (doc["baseline"]["ratio"], true_ratio)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        assert f'tuimon_regression{{pid="{slowing.pid}",rank=""}} 1.0' in metrics
        assert 'tuimon_phase_delta_seconds{phase="backward"' in metrics

        code, doc = once_json(steady.pid, base)
        assert code == 0 and doc["baseline"]["state"] == "same", doc["baseline"]
        time.sleep(max(0.0, started + STEADY_WATCH_S - time.monotonic()))
        steady_lines = [line for t, line in watch["steady"].lines if "baseline" in line or "REGRESSION" in line]
        assert len(steady_lines) >= STEADY_WATCH_S - 5  # a line a second, each with its comparison
        assert not false_alarms(watch["steady"].lines, logs["steady"], saving)
        assert sum("as baseline" in line for line in steady_lines) >= STEADY_WATCH_S - 10
    finally:
        for p in procs:
            p.kill()
            p.wait()
