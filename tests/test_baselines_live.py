"""Baselines on real training loops (torch, DataLoader workers, the probe via `tuimon run`), the
slowdowns people have:
- a loop that slows by 30% mid-run is flagged, naming the phase that grew; a steady copy is not;
- a bursty input-bound loop (4 workers, most steps find a batch ready) whose batches are 2x slower
  to make is flagged within 30 s of its start, though its median step did not move; a steady
  bursty loop is not flagged;
- a loop of 2 s steps that becomes 3 s steps is flagged within 60 s;
- a loop whose peak memory grows is flagged (on a CPU there is no CUDA allocator: the workload
  feeds the probe's allocator gauges fake numbers, at that one boundary; tests/gpu/check_regression.sh
  is the real GPU check).
`attach --once --json --baseline` exits 3 on a regression; the exporter serves the series. Jobs of
a test run at once; every step time is mostly sleeps, so a loaded 2-core machine changes them little,
and where it does (the loop's own timer says so) an alert is right, not false."""

import bisect
import json
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from tests.conftest import ROOT, tuimon_cmd, wait_for
from tests.test_export import free_port
from tuimon.analysis import thresholds as T
from tuimon.monitor.target import open_channel

LOOP = str(ROOT / "tests" / "workloads" / "regressing.py")
BURSTY = ("--workers", 4, "--batch-ms", 320, "--backward-ms", 2, "--other-ms", 2)  # mean ~80 ms, median ~5 ms
LONG = ("--backward-ms", 2000, "--other-ms", 0)  # 2 s steps


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

    def first(self, words: str, since: float = 0.0):
        return next((t for t, line in self.lines if words in line and t >= since), None)


def watch(pid: int, base: str) -> Lines:
    return Lines(subprocess.Popen(tuimon_cmd("attach", pid, "--plain", "--baseline", base), stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True))


def save_baseline(pid: int, seconds: float, out: str) -> subprocess.Popen:
    return subprocess.Popen(tuimon_cmd("baseline", "save", pid, "--seconds", seconds, "-o", out),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def saved(p: subprocess.Popen) -> str:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return out


def once_json(pid: int, baseline: str, window: float = 10):
    p = subprocess.run(tuimon_cmd("attach", pid, "--once", "--json", "--window", window, "--baseline", baseline),
                       capture_output=True, text=True, timeout=120)
    return p.returncode, json.loads(p.stdout)


def steps_of(step_log) -> list[tuple[float, float]]:
    return [tuple(map(float, row.split())) for row in open(step_log) if row.strip()]


def own_mean(steps, since: float, until: float) -> float:
    """The loop's own mean step over a span (its timer: end to end)."""
    return statistics.mean([ms for t, ms in steps if since <= t <= until] or [float("nan")])


OWN_SPAN_S = 7.5  # the monitor's window before a REGRESSION line (false_alarms says why)


def false_alarms(lines: Lines, step_log, ref: tuple[float, float], until: float = float("inf")) -> list[str]:
    """REGRESSION lines (before `until`) at a time when the loop's own timer says it was not slower.
    On 2 cores shared by several loops, their monitors and one-shot attaches, a loop is at times
    really slower for a few seconds: an alert then is right. False: the loop's own mean step over
    the span the monitor judged is under 1.05x its mean while the baseline was saved (half the 10%
    threshold). That span: the newest REGRESSION_BATCHES batches of at least REGRESSION_BATCH_S each
    (5 s of these loops' 25 ms steps, ~6.4 s of the bursty loop's 320 ms rounds), up to a monitor
    cycle (1 s) before the line: OWN_SPAN_S. (Over 20 s, as here before, a 5 s slowdown that tuimon
    rightly flagged at +11% beside two CPU burners read 1.044x.)"""
    steps = steps_of(step_log)
    ref_ms = own_mean(steps, *ref)
    out = []
    for t, line in lines.lines:
        if "REGRESSION" in line and t < until:
            own = own_mean(steps, t - OWN_SPAN_S, t)
            if not own >= 1.05 * ref_ms:
                out.append(f"{own / ref_ms:.3f}x own: {line[-160:]}")
    return out


def probe_created_s(pid: int) -> float:
    """When the job's probe started (CLOCK_MONOTONIC s): its uptime, and its warm-up, count from there."""
    reader, _ = open_channel(pid)
    try:
        return reader.info.created_ns / 1e9
    finally:
        reader.close()


def past_warmup(pid: int, span: tuple[float, float]) -> tuple[float, float]:
    """span, from the end of the job's warm-up on: a baseline leaves out the steps that began in the
    first REGRESSION_WARMUP_S s of the probe's life, so the loop's own reference does too."""
    return max(span[0], probe_created_s(pid) + T.REGRESSION_WARMUP_S.value), span[1]


def stop(procs):
    for p in procs:
        p.kill()
        p.wait()


def test_a_loop_slowing_by_30_percent_mid_run_is_caught_and_a_steady_copy_is_not(tmp_path):
    logs = {name: str(tmp_path / f"{name}.steps") for name in ("steady", "slowing")}
    truth = tmp_path / "truth.json"
    # Both loops run while the baseline is saved: on 2 cores the second loop alone slows the first.
    steady = job("--seconds", 130, "--step-log", logs["steady"])
    procs = [steady]
    try:
        slowing = job("--seconds", 90, "--slow-after", 32, "--truth", truth, "--step-log", logs["slowing"])
        procs.append(slowing)
        base = str(tmp_path / "baseline.json")
        saving = (time.monotonic(), None)
        out = saved(save_baseline(steady.pid, 22, base))
        saving = (saving[0], time.monotonic())
        assert "saved to" in out and "phases: data" in out and "step time mean" in out
        refs = {"steady": past_warmup(steady.pid, saving), "slowing": past_warmup(slowing.pid, saving)}
        watching = {name: watch(p.pid, base) for name, p in (("steady", steady), ("slowing", slowing))}
        procs += [w.proc for w in watching.values()]
        port = free_port()
        exporter = subprocess.Popen(tuimon_cmd("export", slowing.pid, "--port", port, "--baseline", base),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(exporter)
        started = time.monotonic()

        slowed_at = wait_for(lambda: truth.exists() and json.loads(truth.read_text())["slowed_at"],
                             timeout=60, what="the loop to slow down")
        flagged = wait_for(lambda: watching["slowing"].first("REGRESSION", slowed_at), timeout=40,
                           what="the regression alert")
        before = sum("REGRESSION" in line for t, line in watching["slowing"].lines if t < slowed_at)
        print(f"\n30% mid-run: flagged {flagged - slowed_at:.1f} s after the slowdown ({before} regression lines "
              "before it, each one the loop's own timer confirms)")  # (pytest -s shows it)
        assert flagged - slowed_at <= 20, f"flagged {flagged - slowed_at:.1f} s after the slowdown"
        assert not false_alarms(watching["slowing"], logs["slowing"], refs["slowing"], until=slowed_at)
        line = next(line for t, line in watching["slowing"].lines if "REGRESSION" in line and t >= slowed_at)
        assert "backward grew" in line, line

        time.sleep(max(0.0, slowed_at + 12 - time.monotonic()))  # the window all slow steps now
        asked = time.monotonic()
        code, doc = once_json(slowing.pid, base)
        done = time.monotonic()
        if code == 0:
            # Undecided is by design when a window holds a slow spike (one batch widens the spread and decides
            # nothing: regression.py), or it is still collecting; never 'faster'. A CI run's one-shot here exited
            # 0 while the monitor had flagged 7.9 s after the slowdown. A second window must decide.
            said = [line[-90:] for t, line in watching["slowing"].lines if asked <= t <= done]
            print(f"first one-shot undecided: {json.dumps(doc['baseline'])[:1500]}; the monitor meanwhile: {said}")
            assert doc["baseline"]["state"] in ("same", "collecting"), doc["baseline"]
            if doc["baseline"]["state"] == "same":  # (undecided, not unmeasured: its ratio is the loops' own)
                own = own_mean(steps_of(logs["slowing"]), done - OWN_SPAN_S, done) / own_mean(
                    steps_of(logs["steady"]), *refs["steady"])
                assert doc["baseline"]["p_value"] >= T.REGRESSION_P.value and abs(doc["baseline"]["ratio"] - own) < 0.1
            code, doc = once_json(slowing.pid, base)
            done = time.monotonic()
        assert code == 3 and doc["baseline"]["state"] == "regression" and doc["baseline"]["grown"]["name"] == "backward", \
            doc["baseline"]
        # What the ratio claims, by the loops' own timers: this loop's steps over the span judged against
        # the steady loop's while the baseline was saved from it. (Not this loop's own after/before: on
        # 2 shared cores the two loops did not run at one speed before the slowdown: 1.210 against
        # 1.373 in a run beside two burners, when the saved loop's steps were slower than this one's.)
        own = own_mean(steps_of(logs["slowing"]), done - OWN_SPAN_S, done) / own_mean(steps_of(logs["steady"]),
                                                                                   *refs["steady"])
        t = json.loads(truth.read_text())
        after_before = (t["ms_after"] / t["steps_after"]) / (t["ms_before"] / t["steps_before"])
        print(f"ratio {doc['baseline']['ratio']:.3f}, the loops' own {own:.3f} (this loop's own after/before "
              f"{after_before:.3f}); grown {doc['baseline']['grown']}")
        assert abs(doc["baseline"]["ratio"] - own) < 0.1, (doc["baseline"]["ratio"], own)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        assert f'tuimon_regression{{pid="{slowing.pid}",rank=""}} 1.0' in metrics
        assert 'tuimon_phase_delta_seconds{phase="backward"' in metrics

        code, doc = once_json(steady.pid, base)
        done = time.monotonic()
        steps = steps_of(logs["steady"])  # the loop's own over the span the one-shot judged (false_alarms' rule)
        own = own_mean(steps, done - OWN_SPAN_S, done) / own_mean(steps, *refs["steady"])
        if code != 0:  # an alert is right when the loop's own timer says it was slower
            assert code == 3 and own >= 1.05, (f"{own:.3f}x own", doc["baseline"])
        elif doc["baseline"]["state"] == "faster":  # ...and "faster" when it says it was faster (the load moved)
            assert own <= 1 / 1.05, (f"{own:.3f}x own", doc["baseline"])
        else:
            assert doc["baseline"]["state"] == "same", (f"{own:.3f}x own", doc["baseline"])
        time.sleep(max(0.0, started + 62 - time.monotonic()))
        lines = [line for _, line in watching["steady"].lines if "baseline" in line or "REGRESSION" in line]
        assert len(lines) >= 57  # a line a second, each with its comparison
        assert not false_alarms(watching["steady"], logs["steady"], refs["steady"])
        said = {w: sum(w in line for line in lines) for w in ("as baseline", "faster", "REGRESSION", "collecting")}
        print(f"the steady copy over {len(lines)} lines: {said}")
        # Decided on (almost) every line: as baseline, faster, or a regression its own timer confirms (false_alarms
        # above: every REGRESSION line is one). Beside two CPU burners the steady copy is at times really slower:
        # 12 of 61 lines, each confirmed, in a run where the copy never slowed on a quiet machine.
        decided = said["as baseline"] + said["faster"] + said["REGRESSION"]
        assert decided >= 52, [line[-150:] for line in lines if "as baseline" not in line]
    finally:
        stop(procs)


def test_a_bursty_loop_whose_batches_got_2x_slower_is_flagged_within_30_s_and_a_steady_one_is_not(tmp_path):
    """The issue's CPU case: mean 80.8 -> 161.1 ms while the median step got faster. (Here the
    median can move too: on a loaded machine the quick steps slow as well; tests/test_regression.py
    shows a median that stays put.)"""
    logs = {name: str(tmp_path / f"{name}.steps") for name in ("base", "steady", "slow")}
    base_job = job("--seconds", 150, "--step-log", logs["base"], *BURSTY)
    procs = [base_job]
    try:
        steady = job("--seconds", 150, "--step-log", logs["steady"], *BURSTY)
        procs.append(steady)
        base = str(tmp_path / "bursty.json")
        saving = (time.monotonic(), None)
        out = saved(save_baseline(base_job.pid, 24, base))
        saving = (saving[0], time.monotonic())
        # input-bound: the loop waits for batches most of its time (~93% quiet; beside two CPU burners its own
        # 2 ms sleeps took ~4.7 ms each and the wait was 88%, as its 81 ms mean step less those says)
        wait = re.search(r"data wait (\d+)%", out)
        assert wait and int(wait.group(1)) >= 75, out
        doc = json.loads(open(base).read())
        mean, p50 = doc["step_time_ms"]["mean"], doc["step_time_ms"]["p50"]
        # the loop's own steps over what tuimon measured: those past the job's warm-up (steps that began in
        # the first REGRESSION_WARMUP_S s of the probe's life are left out) that ended before the save did
        warmed = probe_created_s(base_job.pid) + T.REGRESSION_WARMUP_S.value
        own = sorted(ms for t, ms in steps_of(logs["base"]) if t - ms / 1e3 >= warmed and t <= saving[1])
        # bursty: the median is no step time, and how far under the mean it is depends on the machine (5 ms quiet;
        # beside two CPU burners the quick steps slow down: 28 and 54 ms of a mean of 80). Where quick and slow
        # steps are near half each, a median's value jumps between the two (a CI run: tuimon 8.6 ms, the loop's
        # own 35.8 over the whole save, warm-up included): so its rank among the loop's own steps is checked.
        rank = (bisect.bisect_left(own, p50) / len(own), bisect.bisect_right(own, p50) / len(own))
        print(f"\nbaseline mean {mean:.1f} ms, p50 {p50:.1f}: the loop's own {len(own)} steps, median "
              f"{statistics.median(own):.1f}, tuimon's p50 at their {rank[0]:.0%}..{rank[1]:.0%}")
        assert 70 < mean < 95 and rank[0] <= 0.6 and rank[1] >= 0.4, (mean, p50, statistics.median(own), rank)

        started = time.monotonic()  # the slower job, its monitor from its start
        slower = ("--workers", 4, "--batch-ms", 640, "--backward-ms", 2, "--other-ms", 2)  # (BURSTY, 2x the batch time)
        slow = subprocess.Popen(tuimon_cmd("run", "--plain", "--baseline", base, "--", sys.executable, LOOP,
                                           "--seconds", 100, "--step-log", logs["slow"], *slower),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(slow)
        slow_lines = Lines(slow)
        steady_lines = watch(steady.pid, base)
        procs.append(steady_lines.proc)
        watched = time.monotonic()
        flagged = wait_for(lambda: slow_lines.first("REGRESSION"), timeout=60, what="the regression alert")
        marks = {w: slow_lines.first(w) for w in ("| step ", "warm-up", "collecting: 0 s", "collecting: 5 s")}
        print(f"\nbursty 2x slower batches: flagged {flagged - started:.1f} s after the job started ("
              + ", ".join(f"{w.strip('| ')!r} at {t - started:.1f} s" for w, t in marks.items() if t) + ")")
        assert flagged - started <= 30, f"flagged {flagged - started:.1f} s after the job started"
        collecting = [line for _, line in slow_lines.lines if "baseline: collecting" in line]
        assert any("warm-up" in line for line in collecting) and any(re.search(r"collecting: \d+ s of \d+", line)
                                                                      for line in collecting), collecting

        time.sleep(max(0.0, watched + 60 - time.monotonic()))  # the steady twin over 6 windows
        code, doc = once_json(slow.pid, base)
        c = doc["baseline"]
        own = own_mean(steps_of(logs["slow"]), flagged - 5, time.monotonic()) / own_mean(steps_of(logs["base"]), *past_warmup(base_job.pid, saving))
        print(f"ratio {c['ratio']:.3f} (mean {c['mean_ms']} vs {c['baseline_mean_ms']} ms), the loops' own {own:.3f}; "
              f"p50 {c['p50_ms']} vs {c['baseline_p50_ms']}, p95 {c['p95_ms']} vs {c['baseline_p95_ms']}")
        assert code == 3 and c["state"] == "regression" and abs(c["ratio"] - own) < 0.15 * own
        assert c["grown"]["name"] == "data", c["grown"]
        lines = [line for t, line in steady_lines.lines if "baseline" in line or "REGRESSION" in line]
        steady_ref = past_warmup(steady.pid, saving)
        assert not false_alarms(steady_lines, logs["steady"], steady_ref)
        # decided on most lines: as baseline, faster, or a REGRESSION its own timer confirms (false_alarms above)
        decided = sum(any(w in line for w in ("as baseline", "faster", "REGRESSION")) for line in lines)
        assert decided >= 30, lines[-3:]
        code, doc = once_json(steady.pid, base)
        done = time.monotonic()
        own = own_mean(steps_of(logs["steady"]), done - OWN_SPAN_S, done) / own_mean(steps_of(logs["steady"]),
                                                                                     *steady_ref)
        assert code == 0 or own >= 1.05, (f"{own:.3f}x own", doc["baseline"])  # (slower by its own timer: right)
    finally:
        stop(procs)


def test_2_s_steps_that_become_3_s_are_flagged_within_a_minute_and_a_peak_memory_that_grows_is_flagged(tmp_path):
    truth = {name: tmp_path / f"{name}.json" for name in ("long", "memory")}
    long = job("--seconds", 150, "--slow-after", 44, "--slow-by", 0.5, "--truth", truth["long"], *LONG)
    procs = [long]
    try:
        memory_log = str(tmp_path / "memory.steps")
        memory = job("--seconds", 90, "--slow-after", 32, "--slow-by", 0, "--truth", truth["memory"],
                     "--fake-peak-mib", "1000:1200", "--step-log", memory_log)
        procs.append(memory)
        bases = {name: str(tmp_path / f"{name}-baseline.json") for name in ("long", "memory")}
        saving_at = time.monotonic()
        saving = [save_baseline(long.pid, 34, bases["long"]), save_baseline(memory.pid, 22, bases["memory"])]
        memory_out = saved(saving[1])
        memory_ref = past_warmup(memory.pid, (saving_at, time.monotonic()))
        assert "peak memory 0.98 GiB" in memory_out, memory_out
        memory_lines = watch(memory.pid, bases["memory"])
        procs.append(memory_lines.proc)
        long_out = saved(saving[0])
        assert "step time mean 20" in long_out and "no peak memory (no CUDA allocator" in long_out, long_out
        long_lines = watch(long.pid, bases["long"])
        procs.append(long_lines.proc)

        grew_at = wait_for(lambda: truth["memory"].exists() and json.loads(truth["memory"].read_text())["slowed_at"],
                           timeout=60, what="the peak to grow")
        flagged = wait_for(lambda: memory_lines.first("peak memory +20%: 1.0 -> 1.2 GiB", grew_at), timeout=20,
                           what="the memory alert")
        line = next(line for t, line in memory_lines.lines if t >= flagged)
        print(f"\npeak memory: flagged {flagged - grew_at:.1f} s after it grew: {line[-120:]}")
        # The alert, and the step time's own word beside it: a step-time REGRESSION (here or before the peak grew)
        # only where the loop's own timer says it was slower (false_alarms: a busy 2-core machine slows it)
        if "REGRESSION: peak memory +20%: 1.0 -> 1.2 GiB; step time" not in line:
            own = own_mean(steps_of(memory_log), flagged - OWN_SPAN_S, flagged) / own_mean(steps_of(memory_log),
                                                                                          *memory_ref)
            assert "REGRESSION: mean step" in line and own >= 1.05, (f"{own:.3f}x own", line)
        assert not false_alarms(memory_lines, memory_log, memory_ref, until=grew_at)
        code, doc = once_json(memory.pid, bases["memory"], window=2)
        done = time.monotonic()
        own = own_mean(steps_of(memory_log), done - OWN_SPAN_S, done) / own_mean(steps_of(memory_log), *memory_ref)
        assert code == 3 and doc["baseline"]["peak_memory"]["grew"], doc["baseline"]
        assert doc["baseline"]["state"] != "regression" or own >= 1.05, (f"{own:.3f}x own", doc["baseline"])

        slowed_at = wait_for(lambda: truth["long"].exists() and json.loads(truth["long"].read_text())["slowed_at"],
                             timeout=80, what="the 2 s steps to slow down")
        flagged = wait_for(lambda: long_lines.first("REGRESSION", slowed_at), timeout=75, what="the 3 s steps' alert")
        print(f"2 s -> 3 s steps: flagged {flagged - slowed_at:.1f} s after the slowdown")
        assert flagged - slowed_at <= 60, f"flagged {flagged - slowed_at:.1f} s after the slowdown"
        assert not any("REGRESSION" in line for t, line in long_lines.lines if t < slowed_at)
        assert "as baseline" in long_lines.lines[0][1]  # (attached late: it has the job's history at once)
        code, doc = once_json(long.pid, bases["long"], window=2)  # (its history: the last 120 steps, at once)
        t = json.loads(truth["long"].read_text())
        own = (t["ms_after"] / t["steps_after"]) / (t["ms_before"] / t["steps_before"])
        print(f"ratio {doc['baseline']['ratio']} (mean {doc['baseline']['mean_ms']} vs "
              f"{doc['baseline']['baseline_mean_ms']} ms), the loop's own {own:.3f}")
        assert code == 3 and doc["baseline"]["state"] == "regression" and doc["baseline"]["ratio"] > 1.2
    finally:
        stop(procs)
