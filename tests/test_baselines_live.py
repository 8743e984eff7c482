"""Baselines on real training loops (torch, DataLoader workers, the probe via `tuimon run`): a
baseline saved from a running job; a copy of the loop that slows by 30% mid-run is flagged within
10 s, naming the phase that grew; the steady loop is not flagged over a minute; `attach --once
--json --baseline` exits 3 on the regression; the exporter serves the regression series."""

import json
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


def test_a_planted_regression_is_caught_and_a_steady_run_is_not(tmp_path):
    steady = job("--seconds", 120)
    procs = [steady]
    try:
        # Both loops run while the baseline is saved: on 2 cores the second loop alone slows the
        # first (a full-suite run once saw the steady loop +11% against a baseline saved without it).
        truth = tmp_path / "truth.json"
        slowing = job("--seconds", 80, "--slow-after", SLOW_AFTER_S, "--truth", truth)
        procs.append(slowing)
        base = str(tmp_path / "baseline.json")
        saved = subprocess.run(tuimon_cmd("baseline", "save", steady.pid, "--seconds", 8, "-o", base),
                               capture_output=True, text=True, timeout=60)
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
        flagged = wait_for(lambda: next((t for t, line in watch["slowing"].lines if "REGRESSION" in line), None),
                           timeout=20, what="the regression alert")
        print(f"\nflagged {flagged - slowed_at:.1f} s after the slowdown")  # (pytest -s shows it)
        assert flagged - slowed_at <= 10, f"flagged {flagged - slowed_at:.1f} s after the slowdown"
        early = [f"{t - slowed_at:+.1f} s {line[-120:]}" for t, line in watch["slowing"].lines if t < slowed_at]
        assert not any("REGRESSION" in line for line in early), "\n".join(early)
        line = next(line for _, line in watch["slowing"].lines if "REGRESSION" in line)
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
        assert not [line for line in steady_lines if "REGRESSION" in line]
        assert sum("as baseline" in line for line in steady_lines) >= STEADY_WATCH_S - 10
    finally:
        for p in procs:
            p.kill()
            p.wait()
