"""Hot lines of a loop a library drives (Hugging Face's Trainer, Lightning, Accelerate): the line
named is the deepest frame outside torch, the standard library and tuimon, a library's line
included, with the job's own line that led there beside it (issue 43, item 4: a Trainer job read
"forward 37%: hf_trainer.py:40 `Trainer(...).train()`", its one line, for every phase)."""

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from tests.conftest import tuimon_cmd, wait_for

TRAINER = '''\
import threading
import time

import torch


class Trainer:
    """A library's training loop: the job hands it a model and calls train()."""

    def __init__(self, model, seconds, ready, stall=False):
        self.model, self.seconds, self.ready, self.stall = model, seconds, ready, stall

    def train(self):
        opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        x = torch.randn(64, 512)
        end = time.monotonic() + self.seconds
        steps = 0
        while time.monotonic() < end:
            loss = self.model(x).square().mean()  # FORWARD
            loss.backward()
            opt.step()
            opt.zero_grad()
            self._log_metrics()
            steps += 1
            if steps == 20:
                open(self.ready, "w").close()
            if self.stall and steps == 30:
                self._save_checkpoint()

    def _save_checkpoint(self):
        threading.Event().wait(600)  # STALLS

    def _log_metrics(self):
        end = time.perf_counter() + 0.015
        while time.perf_counter() < end:  # LOGGING
            pass
'''

JOB = '''\
import sys
import sysconfig

if sys.argv[4] == "inside":  # (its site-packages inside the standard library's folder, as pyenv's, conda's and
    paths = sysconfig.get_paths()  # Docker's are: this folder the standard library's, with the real one)
    sysconfig.get_paths = lambda *a, **k: {**paths, "stdlib": sys.argv[5], "platstdlib": paths["stdlib"]}
sys.path.insert(0, sys.argv[1])  # (the environment's installed packages)
import torch
import fakelib.trainer

model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512))
fakelib.trainer.Trainer(model, float(sys.argv[2]), sys.argv[3], len(sys.argv) > 6).train()  # THE JOB'S LINE
'''


def _line_of(text: str, mark: str) -> int:
    return next(k for k, line in enumerate(text.splitlines(), 1) if mark in line)


def _attach_to_library_job(tmp_path, layout: str, ready_then_s: float, stall: bool = False) -> dict:
    """`attach --once --json` on a job whose loop fakelib (installed in site-packages, as `layout`
    says) drives, ready_then_s after its 20th step (stall: it waits forever after its 30th)."""
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    (site / "fakelib").mkdir(parents=True)
    (site / "fakelib" / "__init__.py").write_text("")
    (site / "fakelib" / "trainer.py").write_text(TRAINER)
    project = tmp_path / "project"
    project.mkdir()
    (project / "job.py").write_text(JOB)
    ready = tmp_path / "ready"
    env = {**os.environ, "TUIMON_SHM_DIR": str(tmp_path)}
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, "job.py", site, 200 if stall else 40,
                                      ready, layout, site.parent, *(["stall"] if stall else [])), cwd=project,
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: ready.exists() or job.poll() is not None, timeout=90, what="the job's first 20 steps")
        assert job.poll() is None, job.stderr.read() if job.stderr else ""
        time.sleep(ready_then_s)
        r = subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--json", "--window", 2), cwd=project, env=env,
                           capture_output=True, text=True, timeout=60)
        return json.loads(r.stdout)
    finally:
        job.kill()
        job.wait()


@pytest.mark.parametrize("layout", ["venv", "inside"])
def test_a_library_driven_loop_names_the_librarys_lines_with_the_jobs_line_beside_them(tmp_path, layout):
    """A package installed in an environment's site-packages (here one the job puts on sys.path)
    runs the loop: its time is named at the library's lines, the logging it does between steps in
    "other" and its model call in "forward", each with the job's one line (`Trainer(...).train()`) as
    context, in `attach --once --json`, wherever the environment keeps its packages. Before: the
    library's line with no context where its site-packages sat outside the standard library's folder
    (venv: a virtual environment's), and the job's one line for every phase where it sat inside
    (inside: pyenv's, conda's and Docker's), as in the issue's Trainer job."""
    doc = _attach_to_library_job(tmp_path, layout, ready_then_s=4)
    lines = doc["hot_lines"]
    print(json.dumps(lines, indent=1))
    assert doc["samples"] >= 50, doc["samples"]
    context = f"job.py:{_line_of(JOB, 'THE JOB')}"
    other = max((h for h in lines if h["phase"] == "other"), key=lambda h: h["share"])
    assert other["line"].startswith(f"fakelib/trainer.py:{_line_of(TRAINER, 'LOGGING')} in _log_metrics "), other
    assert other.get("context") == context, other
    forward = max((h for h in lines if h["phase"] == "forward"), key=lambda h: h["share"])
    assert forward["line"].startswith(f"fakelib/trainer.py:{_line_of(TRAINER, 'FORWARD')} in train "), forward
    assert forward.get("context") == context, forward
    assert not any("THE JOB" in h["line"] for h in lines), lines  # (the job's line is context, never a line)


def _frames(*where):
    """Fake frames, outermost first: (file, line, function) each."""
    f = None
    for file, line, function in where:
        f = SimpleNamespace(f_code=SimpleNamespace(co_filename=file, co_name=function), f_lineno=line, f_back=f)
    return f


def test_an_installed_library_inside_the_standard_librarys_folder_is_named_with_the_jobs_line(monkeypatch):
    """pyenv, conda, python.org and Docker builds install packages under the standard library's own
    folder (lib/python3.11/site-packages): the library's frames were taken for the standard library's
    and passed through, so every sample of a Trainer job fell to the job's one line. A library's
    line is named, with the job's innermost line outside it as context; the standard library's and
    torch's frames are still passed through, and a loop of the job's own has no context."""
    import tuimon.probe.present as present
    from tuimon.probe.anatomy import short_path
    from tuimon.probe.sampler import LineNames

    prefix = "/opt/conda/lib/python3.11"
    monkeypatch.setattr(present.sysconfig, "get_paths", lambda: {"stdlib": prefix, "platstdlib": prefix})
    names: list[str] = []
    lines = LineNames(intern=lambda name: names.append(name) or len(names))
    site = f"{prefix}/site-packages"
    library_loop = _frames(("/home/me/hf_train.py", 45, "<module>"), ("/home/me/hf_train.py", 40, "main"),
                           (f"{site}/transformers/trainer.py", 1938, "train"),
                           (f"{site}/transformers/trainer.py", 2231, "_inner_training_loop"),
                           (f"{prefix}/contextlib.py", 81, "inner"),
                           (f"{site}/accelerate/utils/operations.py", 820, "forward"))
    lines.id_of(library_loop)
    context = "\x1f"  # (channel/layout.py HOT_CONTEXT)
    assert names[-1] == f"accelerate/utils/operations.py:820 in forward{context}{short_path('/home/me/hf_train.py')}:40"
    own_loop = _frames(("/home/me/train.py", 12, "main"), (f"{prefix}/threading.py", 320, "wait"))
    lines.id_of(own_loop)
    assert names[-1] == f"{short_path('/home/me/train.py')}:12 in main"


def test_a_library_line_and_its_context_reach_the_view_and_the_screen(shm_dir):
    """Through a real channel: the name's two parts become the hot line and its context (JSON's
    `context`), and the main screen's line keeps the context whole where the line is cut."""
    from tuimon.channel import SegmentReader, SegmentWriter
    from tuimon.channel import layout as L
    from tuimon.channel.meta import JobMeta
    from tuimon.monitor.training import TrainingView
    from tuimon.sources.channel import ChannelSource
    from tuimon.ui.panels.breakdown import line_text

    w = SegmentWriter.create(JobMeta(argv=("hf_train.py",)), 1 << 12)
    line = "transformers/trainer.py:2231 in _inner_training_loop `tr_loss_step = self.training_step(model, inputs)`"
    nid = w.intern(f"{line}{L.HOT_CONTEXT}hf_train.py:40")
    now = time.monotonic_ns()
    for k in range(50):
        w.emit(L.HOT, L.PHASES.index("forward"), nid, 1, 0, L.HOW_PYTHON, now - (50 - k) * 10**8, 2.0)
    view = TrainingView(ChannelSource(SegmentReader(w.path)))
    view.poll()
    (h,) = view.snapshot().hot_lines
    assert (h.line, h.context, h.samples) == (line, "hf_train.py:40", 100)
    shown = line_text("forward 37%: ", h, 80).plain
    assert len(shown) <= 80 and shown.endswith(" · from hf_train.py:40") and shown.startswith("forward 37%: transformers/")
    assert h.where == f"{line} · from hf_train.py:40"


def test_a_loop_stalled_inside_a_library_is_placed_at_the_librarys_line_with_the_jobs_line_beside_it(tmp_path):
    """The step in progress (`now`) and the stall verdict name where the loop is by the hot lines'
    rule: the library's line it waits at (fakelib's Event.wait, past threading's frames), with the
    job's own line as context, in the JSON (`now.where`, `now.context`) and in the verdict's words
    ("at fakelib/trainer.py:31 in _save_checkpoint · from job.py:12"). Before: the job's one line
    (`Trainer(...).train()`) for a library inside the standard library's folder, with no context."""
    doc = _attach_to_library_job(tmp_path, "inside", ready_then_s=2 + 25, stall=True)  # (past the 20 s floor)
    now, verdict = doc["now"], doc["verdict"]
    print(json.dumps({"now": now, "verdict": verdict, "stall": doc["stall"]}, indent=1))
    line = f"fakelib/trainer.py:{_line_of(TRAINER, 'STALLS')} in _save_checkpoint"
    context = f"job.py:{_line_of(JOB, 'THE JOB')}"
    assert now["where"] == line and now["context"] == context, now
    assert "threading.py:" in now["waiting_in"], now  # (the innermost frame, where it is not the line)
    assert verdict["code"] == "stalled", verdict
    assert f" at {line} · from {context}" in verdict["evidence"], verdict
    assert f" at {line} · from {context}" in verdict["next_step"], verdict


def test_the_loops_position_now_is_picked_by_the_hot_lines_rule(monkeypatch):
    """present.loop_position walks with the sampler's LineNames.where: a library's line with the job's
    line as context, the innermost frame beside it where that is elsewhere (the standard library's
    wait); the job's own line alone; nothing named for a stack all the standard library's."""
    import tuimon.probe.present as present
    from tuimon.probe.anatomy import short_path
    from tuimon.probe.sampler import LineNames

    prefix = "/opt/conda/lib/python3.11"
    monkeypatch.setattr(present.sysconfig, "get_paths", lambda: {"stdlib": prefix, "platstdlib": prefix})
    lines = LineNames(intern=lambda name: 1)
    site = f"{prefix}/site-packages"
    stalled = _frames(("/home/me/hf_train.py", 40, "main"), (f"{site}/transformers/trainer.py", 2231, "training_step"),
                      (f"{prefix}/threading.py", 331, "wait"))
    where, context, waiting = present.loop_position(stalled, lines)
    assert (where, context) == ("transformers/trainer.py:2231 in training_step", f"{short_path('/home/me/hf_train.py')}:40")
    assert waiting == f"{short_path(prefix + '/threading.py')}:331 in wait"
    running = _frames(("/home/me/hf_train.py", 40, "main"), (f"{site}/transformers/trainer.py", 2231, "training_step"))
    assert present.loop_position(running, lines)[1:] == (context, "")  # (at the line itself: nothing beside it)
    own = _frames(("/home/me/train.py", 12, "main"), (f"{prefix}/queue.py", 180, "get"))
    assert present.loop_position(own, lines) == (f"{short_path('/home/me/train.py')}:12 in main", "",
                                                 f"{short_path(prefix + '/queue.py')}:180 in get")
    assert present.loop_position(_frames((f"{prefix}/threading.py", 331, "wait")), lines)[:2] == ("", "")


def test_the_loops_library_line_and_its_context_cross_the_channel_and_reach_the_words(shm_dir):
    """The control block's `where` carries the context as a HOT name does (after HOT_CONTEXT): the
    line cut, never the context, where both are longer than the field; the monitor reads them apart;
    the now line keeps the context whole in its width; a stalled rank is named with it."""
    from tuimon.channel import SegmentReader, SegmentWriter
    from tuimon.channel import layout as L
    from tuimon.channel.control import ControlBlock, Now
    from tuimon.channel.fileview import MappedView
    from tuimon.channel.meta import JobMeta
    from tuimon.model import RankRow, StepInProgress, TrainingSnapshot
    from tuimon.monitor.evidence import _ranks
    from tuimon.monitor.training import TrainingView
    from tuimon.sources.channel import ChannelSource
    from tuimon.ui.panels.now import now_line

    w = SegmentWriter.create(JobMeta(argv=("hf_train.py",)), 1 << 10)
    try:
        line = "transformers/trainer.py:2231 in _inner_training_loop" + "_x" * 200
        now = time.monotonic_ns()
        ControlBlock(MappedView(w._mm, L.CONTROL_OFFSET)).write_now(Now(
            updated_ns=now, step=3, source="optimizer", phase_id=w.intern("forward"), collective_id=0,
            phase_since_ns=now - 5 * 10**9, step_t0_ns=now - 6 * 10**9, moved_ns=now, longest_ns=10**9,
            where=line, context="hf_train.py:40", waiting_in="threading.py:331 in wait"))
        view = TrainingView(ChannelSource(SegmentReader(w.path)))
        view.poll()
        n = view.snapshot().now
    finally:
        w.unlink()
    assert n.context == "hf_train.py:40" and n.where.endswith("…") and line.startswith(n.where[:-1]), n
    assert len(f"{n.where}{L.HOT_CONTEXT}{n.context}".encode()) <= L.CTL_WHERE_CAPACITY
    assert n.at == f"{n.where} · from hf_train.py:40"
    shown = now_line(SimpleNamespace(training=TrainingSnapshot(pid=1, steps=2, now=n)), 100).plain
    assert len(shown) <= 100 and shown.endswith(" · from hf_train.py:40") and " at transformers/" in shown
    short = StepInProgress(step=3, phase="other", phase_s=30.0, step_s=30.0, still_s=30.0, where="t.py:9 in f")
    assert short.at == "t.py:9 in f"  # (the job's own line: no context)
    row = RankRow(rank=0, pid=10, steps=20, since_step_s=40.0, longest_step_ms=30.0, now_phase="other",
                  now_phase_s=40.0, where="transformers/trainer.py:2231 in step", context="hf_train.py:40", stalled=True)
    (stalled,) = _ranks(2, None, [row]).stalled
    assert stalled.where == "transformers/trainer.py:2231 in step · from hf_train.py:40"


def test_stacks_read_from_outside_name_a_librarys_line_with_the_jobs_line_beside_it():
    """py-spy's stacks of a job without the probe (sources/pyspy.py) are read by the same rule
    (channel/lines.py pick): a loop stalled inside a library, in a virtual environment's
    site-packages or one inside the standard library's folder, is named at the library's line with
    the job's own line as context; the job's own loop keeps its line alone. Before: the library's
    line with no context."""
    from tuimon.sources import pyspy

    s = pyspy.OutsideSampler(100)
    s._cwd = "/job"
    raw = ("thread (100): MainThread;<module> (/job/job.py:12);train (/env/lib/python3.11/site-packages/fakelib/"
           "trainer.py:30);_save_checkpoint (/env/lib/python3.11/site-packages/fakelib/trainer.py:48);"
           "wait (/usr/lib/python3.11/threading.py:331) 40\n"
           "thread (100): MainThread;<module> (/job/job.py:12);train (/opt/conda/lib/python3.11/site-packages/"
           "fakelib/trainer.py:20);_call_impl (/opt/conda/lib/python3.11/site-packages/torch/nn/modules/"
           "module.py:1778) 30\n"
           "thread (100): MainThread;<module> (/job/own.py:5);step (/job/own.py:9);"
           "sleep (/usr/lib/python3.11/threading.py:320) 30\n")
    s._add({"all": (raw, "")}, 2)
    lines = {h.line: h.context for h in s.latest().hot_lines}
    assert lines == {"fakelib/trainer.py:48 in _save_checkpoint": "job.py:12",
                     "fakelib/trainer.py:20 in train": "job.py:12", "own.py:9 in step": ""}, lines
    (h,) = [h for h in s.latest().hot_lines if h.context and h.samples == 40]
    assert h.where == "fakelib/trainer.py:48 in _save_checkpoint · from job.py:12"
