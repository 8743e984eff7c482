"""Metrics for Prometheus: the families made from a real H100 recording; a real Prometheus server
scraping `tuimon export` beside a real instrumented training loop, read back through its HTTP API;
`tuimon run --metrics-port`; and the bad inputs."""

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import replace

import pytest

from tests.conftest import ROOT, tuimon_cmd, wait_for
from tuimon.export.metrics import families
from tuimon.model import Cycle, ProcessSample, StepInProgress, TrainingSnapshot
from tuimon.model.vocab import VERDICT_CODES
from tuimon.monitor.state import MonitorState
from tuimon.ui.replay_frames import state_from_recording

PLANTED = str(ROOT / "tests" / "workloads" / "planted.py")


def samples(view) -> dict[tuple, float]:
    """{(metric name, (label, value) pairs...): value} of every family, as Prometheus would read them."""
    return {(s.name, *sorted(s.labels.items())): s.value for fam in families(view) for s in fam.samples}


def test_the_h100_recording_as_metrics():
    view = state_from_recording(str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")).view()
    got = samples(view)
    gpu = (("gpu", "0"), ("name", "NVIDIA H100 80GB HBM3"))
    assert 0.2 < got[("tuimon_gpu_sm_active_ratio", *gpu)] < 0.5  # the demo: SM ~34% (a ratio, not %)
    assert 100 < got[("tuimon_gpu_power_watts", *gpu)] < got[("tuimon_gpu_power_limit_watts", *gpu)] == 700
    assert got[("tuimon_gpu_sm_clock_hertz", *gpu)] > 1e9 and got[("tuimon_gpu_used_by_job", *gpu)] == 1
    job = (("pid", str(view.training.pid)), ("rank", ""))
    q = [got[("tuimon_step_time_seconds", *job[:1], ("quantile", x), *job[1:])] for x in ("0.5", "0.95", "0.99")]
    assert 0.01 < q[0] <= q[1] <= q[2] < 0.2 and q[0] == view.training.step_time_ms.p50 / 1e3
    assert got[("tuimon_step_time_mean_seconds", *job)] == view.training.step_time_ms.mean / 1e3  # (the headline)
    phases = {dict(k[1:])["phase"]: v for k, v in got.items() if k[0] == "tuimon_phase_ratio"}
    assert set(phases) >= {"data", "forward", "backward", "optimizer", "other"} and abs(sum(phases.values()) - 1) < 0.02
    assert got[("tuimon_data_wait_ratio", *job)] == phases["data"]
    assert got[("tuimon_steps_total", *job)] == view.training.steps  # (a counter: exposed as _total)
    verdict = {dict(k[1:])["verdict"]: v for k, v in got.items() if k[0] == "tuimon_verdict"}
    assert set(verdict) == set(VERDICT_CODES) and verdict["input-bound"] == 1 and sum(verdict.values()) == 1


def test_the_baseline_series():
    """tuimon_regression is 1 for a slower job and for a peak memory that grew (on its own); the
    ratio is the mean step time's; while the step time is collecting there is no ratio."""
    from tests.test_ui import h100_baseline

    fixture = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")

    def baseline_series(base, upto=None):
        view = state_from_recording(fixture, upto=upto, baseline=("good.json", base)).view()
        return view, {k[0]: v for k, v in samples(view).items() if "baseline" in k[0] or k[0] == "tuimon_regression"}

    view, got = baseline_series(h100_baseline(0.7))
    assert view.baseline.state == "regression" and got["tuimon_regression"] == 1
    assert got["tuimon_baseline_step_time_ratio"] == view.baseline.ratio == pytest.approx(
        view.baseline.mean_ms / view.baseline.baseline_mean_ms, abs=1e-3)
    assert got["tuimon_baseline_step_time_seconds"] == pytest.approx(view.baseline.baseline_mean_ms / 1e3, abs=1e-9)
    assert got["tuimon_baseline_peak_memory_ratio"] == 1.0
    base = h100_baseline()
    view, got = baseline_series(replace(base, peak_allocated=int(base.peak_allocated / 1.2)))
    assert view.baseline.state == "same" and got["tuimon_regression"] == 1  # the peak grew 20%: a regression
    assert got["tuimon_baseline_peak_memory_ratio"] == pytest.approx(1.2, abs=1e-3)
    view, got = baseline_series(base, upto=5)
    assert view.baseline.state == "collecting" and set(got) == {"tuimon_baseline_step_time_seconds",
                                                                "tuimon_baseline_peak_memory_ratio"}


def test_a_hang_serves_no_steps_per_second_and_an_exit_its_verdict_and_cause():
    """Issue 43 item 15: tuimon_steps_per_second held its last window's 43 through a 25 s hang, and
    once the job exited every tuimon_verdict series went, so verdict="exited" was never 1 and the
    cause was not served. The rate is 0 once no step has completed for longer than its window's
    span (100 steps at 43/s: 2.3 s) or the stall bar, whichever is shorter; after the exit the
    verdict, how it ended and, against a baseline, tuimon_regression stay."""
    from tests.test_ui import h100_baseline

    def served(since_s):
        state = MonitorState()
        state.apply(Cycle(t=1, process=ProcessSample(pid=1, procs=[]), training=TrainingSnapshot(
            pid=1, steps=500, window_steps=100, steps_per_s=43.0, since_step_s=since_s, longest_step_ms=30.0)))
        return samples(state.view()).get(("tuimon_steps_per_second", ("pid", "1"), ("rank", "")))

    assert served(0.02) == served(2.0) == 43.0  # (steps coming, or a pause shorter than the window's span)
    assert served(2.5) == served(25.0) == 0.0
    state = MonitorState(baseline=("good.json", h100_baseline()))
    state.apply(Cycle(t=1, process=ProcessSample(pid=1, procs=[]), training=TrainingSnapshot(
        pid=1, steps=500, window_steps=100, steps_per_s=43.0, since_step_s=0.02, longest_step_ms=30.0)))
    state.apply(Cycle(t=2, process=ProcessSample(pid=1, alive=False, exit_code=1, procs=[]), training=TrainingSnapshot(
        pid=1, state="exited", steps=500, window_steps=100, steps_per_s=43.0, since_step_s=0.5,
        end="exception", end_text="RuntimeError: boom\n  at train.py:3 in main")))
    got = samples(state.view())
    job = (("pid", "1"), ("rank", ""))
    verdicts = {dict(k[1:])["verdict"]: v for k, v in got.items() if k[0] == "tuimon_verdict"}
    assert set(verdicts) == set(VERDICT_CODES) and verdicts["exited"] == 1 and sum(verdicts.values()) == 1
    end = [dict(k[1:]) for k in got if k[0] == "tuimon_job_end_info"]
    assert end == [{"pid": "1", "rank": "", "how": "exception", "cause": "exited with code 1: RuntimeError: boom"}]
    assert got[("tuimon_job_exit_code", *job)] == 1 and got[("tuimon_regression", *job)] == 1
    assert ("tuimon_steps_per_second", *job) not in got and got[("tuimon_steps_total", *job)] == 500
    killed = MonitorState()
    killed.apply(Cycle(t=1, process=ProcessSample(pid=1, alive=False, exit_code=-9, procs=[])))
    got = samples(killed.view())  # (a job with no channel: its end is served all the same)
    assert got[("tuimon_job_exit_code", *job)] == 137 and got[("tuimon_verdict", *job, ("verdict", "exited"))] == 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def planted_job(seconds: int = 60):
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED, "phases", "--seconds",
                                      seconds, "--device", "cpu"), stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "training"
    return job


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="no prometheus here (scripts/test.sh installs Debian's package where it runs as root)")
def test_a_real_prometheus_scrapes_a_real_job(shm_dir, tmp_path):
    job = planted_job()
    port, web = free_port(), free_port()
    exporter = subprocess.Popen(tuimon_cmd("export", job.pid, "--port", port), stderr=subprocess.PIPE, text=True)
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs: [{{job_name: tuimon, static_configs: [{{targets: ['127.0.0.1:{port}']}}]}}]\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{web}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        said = exporter.stderr.readline()
        said = exporter.stderr.readline() if said.startswith("tuimon: no GPU series") else said  # (no NVML here)
        assert "serving PID" in said

        def query(expr: str) -> dict:
            url = f"http://127.0.0.1:{web}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
            try:
                data = json.loads(get(url))["data"]["result"]
            except OSError:
                return {}
            return {json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in data}

        steps = wait_for(lambda: query("tuimon_steps_per_second"), timeout=60, what="the job's series in Prometheus")
        labels, value = next(iter(steps.items()))
        assert json.loads(labels)["pid"] == str(job.pid) and json.loads(labels)["job"] == "tuimon" and value > 5
        phases = wait_for(lambda: len(p := query("tuimon_phase_ratio")) >= 5 and p, what="the phases")
        assert abs(sum(phases.values()) - 1) < 0.02
        assert wait_for(lambda: query('tuimon_verdict{verdict="input-bound"} == 1'), what="the verdict")
        growing = wait_for(lambda: query("increase(tuimon_steps_total[5s])"), what="steps counted")
        assert max(growing.values()) > 0
        p50 = query('tuimon_step_time_seconds{quantile="0.5"}')
        assert 0.03 < max(p50.values()) < 0.2  # the loop's step: ~50 ms on its own timers
    finally:
        for p in (prom, exporter, job):
            p.kill()
            p.wait()
        exporter.stderr.close()


def test_run_serves_metrics_while_it_monitors(shm_dir):
    port = free_port()
    run = subprocess.Popen(tuimon_cmd("run", "--plain", "--metrics-port", port, "--", sys.executable, PLANTED,
                                      "phases", "--seconds", 30, "--device", "cpu"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def scrape():
            try:
                return get(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                return ""
        text = wait_for(lambda: "tuimon_steps_total{" in (t := scrape()) and t, timeout=60, what="the job's metrics")
        assert 'tuimon_process_up{pid="' in text and "# TYPE tuimon_steps_total counter" in text
    finally:
        run.kill()
        run.wait()
        subprocess.run(["pkill", "-f", f"{PLANTED} phases --seconds 30"])


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_run_serves_the_jobs_series_with_the_tui(shm_dir):
    """The TUI publishes the view it draws: the job's series are served while it shows them."""
    from tests.test_tmux import Tmux

    port = free_port()
    cmd = tuimon_cmd("run", "--metrics-port", port, "--interval", "0.5", "--", sys.executable, PLANTED, "phases",
                     "--seconds", 60, "--device", "cpu")
    t = Tmux(" ".join(shlex.quote(x) for x in cmd))

    def scrape():
        try:
            return get(f"http://127.0.0.1:{port}/metrics")
        except OSError:
            return ""
    try:
        wait_for(lambda: f"metrics on :{port}" in t.screen(), timeout=60, what="the header")
        text = wait_for(lambda: "tuimon_steps_per_second{" in (x := scrape()) and x, timeout=60,
                        what="the job's series")
        assert 'tuimon_process_up{pid="' in text and "tuimon_verdict{" in text and "tuimon_phase_ratio{" in text
        assert float(re.search(r"^tuimon_steps_total\{[^}]*\} (\S+)", text, re.M).group(1)) > 0
    finally:
        t.kill()
        for seg in shm_dir.iterdir():  # the job (its own session: the terminal's end leaves it running)
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(seg.name.rsplit("-", 1)[1]), signal.SIGKILL)


def scrape_series(port: int) -> dict[str, float]:
    """{'name{labels}': value} of one scrape ({} while nothing answers)."""
    try:
        text = get(f"http://127.0.0.1:{port}/metrics")
    except OSError:
        return {}
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def nvml_here() -> bool:
    from tuimon.sources.nvml import DeviceSampler

    d = DeviceSampler()
    d.close()
    return d.error is None


@pytest.mark.skipif(nvml_here(), reason="needs a machine without NVML (the same is checked with a fake NVML below)")
def test_export_without_nvml_says_so_and_a_job_that_ended_has_no_live_series(shm_dir):
    job = planted_job()
    port = free_port()
    exporter = subprocess.Popen(tuimon_cmd("export", job.pid, "--port", port, "--interval", "0.5"),
                                stderr=subprocess.PIPE, text=True)
    try:
        said = exporter.stderr.readline()
        assert said.startswith("tuimon: no GPU series: NVML unavailable: ") and 'source="nvml"} 0' in said, said
        assert f"serving PID {job.pid} on http://127.0.0.1:{port}/metrics" in exporter.stderr.readline()
        live = wait_for(lambda: "tuimon_steps_per_second" in str(x := scrape_series(port)) and x, timeout=60,
                        what="the job's series")
        nvml = [k for k in live if k.startswith('tuimon_source_up{reason="NVML unavailable: ')]
        assert len(nvml) == 1 and nvml[0].endswith('source="nvml"}') and live[nvml[0]] == 0
        assert live['tuimon_source_up{reason="",source="process"}'] == 1
        assert live['tuimon_source_up{reason="",source="channel"}'] == 1
        assert live[f'tuimon_process_up{{pid="{job.pid}"}}'] == 1
        assert f'tuimon_verdict{{pid="{job.pid}",rank="",verdict="waiting"}}' in live
        job.kill()
        job.wait()
        ended = wait_for(lambda: (x := scrape_series(port)).get(f'tuimon_process_up{{pid="{job.pid}"}}') == 0 and x,
                         timeout=30, what="the job's end")
        assert not [k for k in ended if k.startswith(("tuimon_steps_per_second", "tuimon_phase_ratio",
                                                      "tuimon_step_time_seconds", "tuimon_process_cpu_ratio"))], ended
        verdicts = {k: v for k, v in ended.items() if k.startswith("tuimon_verdict")}  # (the exited verdict stays)
        assert verdicts[f'tuimon_verdict{{pid="{job.pid}",rank="",verdict="exited"}}'] == 1 and sum(verdicts.values()) == 1
        end = [k for k in ended if k.startswith("tuimon_job_end_info")]  # (killed, and not tuimon's child here)
        assert len(end) == 1 and 'how="unknown"' in end[0] and "without a clean exit" in end[0], end
        steps = ended[f'tuimon_steps_total{{pid="{job.pid}",rank=""}}']  # a counter keeps its final value
        assert steps >= live[f'tuimon_steps_total{{pid="{job.pid}",rank=""}}'] > 0
    finally:
        for p in (exporter, job):
            p.kill()
            p.wait()
        exporter.stderr.close()


def test_sources_up_and_down_with_their_reasons(sleeper):
    """Where NVML cannot start (a fake that fails as a machine without a driver does) the reason is a
    label of tuimon_source_up; a PID with no channel says why; the process is read."""
    from tests.fake_nvml import FakeNvml
    from tuimon.monitor.session import LiveSession
    from tuimon.monitor.state import MonitorState
    from tuimon.sources.nvml import DeviceSampler

    fake = FakeNvml()
    fake.fail["nvmlInit"] = 9  # NVML_ERROR_DRIVER_NOT_LOADED
    session, state = LiveSession(sleeper.pid, devices=DeviceSampler(fake)), MonitorState()
    try:
        state.apply(session.poll())
    finally:
        session.stop()
    up = {dict(k[1:])["source"]: (dict(k[1:])["reason"], v) for k, v in samples(state.view()).items()
          if k[0] == "tuimon_source_up"}
    assert up["nvml"] == ("NVML unavailable: Driver Not Loaded", 0)
    assert up["process"] == ("", 1)
    assert up["channel"][1] == 0 and "has no tuimon channel" in up["channel"][0]
    assert not any(k[0].startswith("tuimon_gpu_") for k in samples(state.view()))


def test_bad_input_is_refused(sleeper):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = subprocess.run(tuimon_cmd("export", sleeper.pid, "--port", port), capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2 and f"cannot serve metrics on 127.0.0.1:{port}" in p.stderr
    p = subprocess.run(tuimon_cmd("export", 2**22 + 7, "--port", 0), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "no process with PID" in p.stderr
    p = subprocess.run(tuimon_cmd("run", "--headless", "--metrics-port", 0, "--", "true"), capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "tuimon export --port PORT PID" in p.stderr
    p = subprocess.run(tuimon_cmd("export", "--port", 70000), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "out of range" in p.stderr


def test_a_scrape_before_the_first_sample_is_empty_not_an_error():
    from tuimon.export.server import Exporter

    e = Exporter(0)
    try:
        assert get(f"http://127.0.0.1:{e.port}/metrics").strip() == ""
    finally:
        e.close()


def test_the_grafana_dashboard_asks_only_for_series_the_exporter_serves():
    import re

    dash = json.loads((ROOT / "dashboards" / "tuimon-grafana.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]] + [dash["templating"]["list"][1]["query"]]
    wanted = {m for e in exprs for m in re.findall(r"tuimon_[a-z0-9_]+", e)}
    from tests.test_ui import h100_baseline  # (the regression panel needs --baseline's series)

    fixture = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")
    view = state_from_recording(fixture, baseline=("good.json", h100_baseline())).view()
    ddp = state_from_recording(str(ROOT / "tests" / "fixtures" / "h200x2_ddp_straggler.jsonl")).view()  # (ranks)
    live = MonitorState()  # (a live job: the step in progress and the stall bar; the recordings predate them)
    live.apply(Cycle(t=1, process=ProcessSample(pid=1, procs=[]), training=TrainingSnapshot(
        pid=1, steps=20, since_step_s=0.4, longest_step_ms=30.0,
        now=StepInProgress(step=21, phase="forward", phase_s=0.1, step_s=0.4, still_s=0.1))))
    # (a newer probe than the recordings': the GPU's mean step time)
    newer = replace(view, training=replace(view.training, gpu=replace(view.training.gpu, step_mean_ms=24.0)))
    served = {s.name for v in (view, ddp, live.view(), newer) for fam in families(v) for s in fam.samples}
    assert len(wanted) >= 12 and wanted <= served, wanted - served
    assert {"tuimon_regression", "tuimon_baseline_step_time_ratio", "tuimon_phase_delta_seconds",
            "tuimon_baseline_peak_memory_ratio", "tuimon_step_time_mean_seconds", "tuimon_gpu_step_time_mean_seconds"} <= wanted
    assert {"tuimon_rank_own_work_seconds", "tuimon_rank_comm_ratio", "tuimon_straggler_ratio"} <= wanted


def test_an_ipv6_address_is_printed_as_a_url_writes_it():
    """--addr ::1 printed http://::1:P/metrics, which no client parses: the address goes in brackets."""
    p = subprocess.Popen(tuimon_cmd("export", "--port", 0, "--addr", "::1"), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        while line and "serving" not in line:  # (first, on a machine without NVML: "no GPU series: ...")
            line = p.stderr.readline()
        assert line.startswith("tuimon: serving ") and " on http://[::1]:" in line, line
        url = line.split(" on ", 1)[1].split()[0]
        assert urllib.parse.urlsplit(url).hostname == "::1" and url.endswith("/metrics")
        urllib.request.urlopen(url, timeout=10).read()  # the printed URL is the one served
    finally:
        p.kill()
        p.wait()
        p.stderr.close()
