"""Each sync call site's own share of the step (issue 43 item 3): SITE records carry the loop's
wait there (t0, channel/layout.py), the monitor's step model sums it, and the JSON, the screen and
the sync verdict give each site its share of the step's time, not only its calls per step."""

import json
import os

from tests.helpers.flat_evidence import flat_evidence as Evidence
from tuimon.analysis.verdicts import diagnose
from tuimon.channel import SegmentReader, SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.meta import JobMeta
from tuimon.model import Cycle, ProcessSample, Syncs, SyncSite, from_json, to_json
from tuimon.monitor.report import view_json
from tuimon.monitor.state import MonitorState
from tuimon.monitor.training import TrainingView
from tuimon.sources.channel import ChannelSource
from tuimon.ui.panels.breakdown import breakdown_panel

MS = 1_000_000
ITEM, SYNC = "train.py:41", "train.py:50"


def loop(timed: bool = True, steps: int = 11):
    """Steps of 100 ms, 45 ms of them blocked in two syncs (a .item() waiting 30 ms, a synchronize()
    15 ms; the rest "other"), one walk a step standing for 2 syncs: the .item()'s in even steps, the
    synchronize()'s in odd ones. Over the window (steps 2..11: the first is left out) each site is 1
    call a step, 30% and 15% of the step. timed: SITE t0 carries the walk's wait (else 0, as from a
    probe before it)."""
    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 1 << 12)
    sync, other, count, item_id, sync_id = (w.intern(n) for n in ("sync", "other", "sync.count", ITEM, SYNC))
    for k in range(1, steps + 1):
        t0, t1 = (k - 1) * 100 * MS, k * 100 * MS
        w.emit(L.STEP, 0, 0, 1, k, t0, t1, 0.0)
        w.emit(L.PHASE, 0, sync, 1, k, 0, t1, 45.0 * MS)
        w.emit(L.PHASE, 0, other, 1, k, 0, t1, 55.0 * MS)
        w.emit(L.STEP_VALUE, 0, count, 1, k, 0, t1, 2.0)
        nid, wait = (item_id, 30 * MS) if k % 2 == 0 else (sync_id, 15 * MS)
        w.emit(L.SITE, 0, nid, 1, k, 2 * wait if timed else 0, t1, 2.0)
    view = TrainingView(ChannelSource(SegmentReader(w.path)))
    view.poll()
    return view.snapshot()


def view_of(snap):
    state = MonitorState()
    state.apply(Cycle(t=1, process=ProcessSample(pid=os.getpid()), training=snap))
    return state.view()


def test_each_sites_share_in_the_once_json(shm_dir):
    view = view_of(loop())
    doc = json.loads(json.dumps(view_json(view)))
    assert doc["window_steps"] == 10
    assert doc["syncs"] == {"per_step": 2.0, "share": 0.45, "mean_us": 22500.0,
                            "top": [{"site": ITEM, "per_step": 1.0, "share": 0.3},
                                    {"site": SYNC, "per_step": 1.0, "share": 0.15}]}
    assert from_json(Syncs, doc["syncs"]) == view.training.syncs  # (a recording of it reads back)
    text = breakdown_panel(view, 120).plain
    assert "syncs: 2.0 per step, 22,500 us each · blocked train.py:41 30% · train.py:50 15%" in text
    assert doc["verdict"]["code"] == "sync-bound"  # (45% of the step blocked, no GPU to say otherwise)
    assert doc["verdict"]["next_step"].startswith(
        "2 syncs per step at train.py:41 (30% of the step, 1/step), train.py:50 (15% of the step, 1/step): ")


def test_a_probe_that_did_not_time_its_sites_keeps_the_counts(shm_dir):
    """SITE t0 0 (a probe before it, a recording of one): no share, the sites by calls, as before."""
    view = view_of(loop(timed=False))
    doc = json.loads(json.dumps(view_json(view)))
    assert doc["syncs"]["top"] == [{"site": ITEM, "per_step": 1.0, "share": None},
                                   {"site": SYNC, "per_step": 1.0, "share": None}]
    assert "syncs: 2.0 per step, 22,500 us each · train.py:41 1.0/step · train.py:50 1.0/step" in \
        breakdown_panel(view, 120).plain
    old = from_json(SyncSite, {"site": ITEM, "per_step": 1.0})  # (an older recording: no share field)
    assert old == SyncSite(ITEM, 1.0) and old.share is None and to_json(old)["share"] is None


def test_the_sync_verdict_names_each_sites_share():
    e = Evidence(steps=50, step_ms=100.0, data_share=0.0, phases={"sync": 0.45, "other": 0.55}, sync_share=0.45,
                 sync_per_step=2.0, sync_mean_us=22500.0, sync_sites=[(ITEM, 1.0, 0.3), (SYNC, 1.0, 0.15)])
    v = diagnose(e)
    assert v.code == "sync-bound", v
    assert v.next_step.startswith(
        "2 syncs per step at train.py:41 (30% of the step, 1/step), train.py:50 (15% of the step, 1/step): the host")
    untimed = diagnose(Evidence(**{**e.__dict__}, sync_sites=[(ITEM, 1.0), (SYNC, 1.0)]))
    assert untimed.next_step.startswith("2 syncs per step at train.py:41 (1/step), train.py:50 (1/step): the host")


def test_a_window_of_no_time_gives_its_sites_no_share(shm_dir):
    """Steps with phases that took no time (t0 == t1: a clock that did not move) but whose sites carry
    waits: the sites keep their calls a step, with no share of a step of 0 ns (no division by it)."""
    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 1 << 12)
    sync, count, item_id = w.intern("sync"), w.intern("sync.count"), w.intern(ITEM)
    for k in range(1, 12):
        w.emit(L.STEP, 0, 0, 1, k, k * MS, k * MS, 0.0)
        w.emit(L.PHASE, 0, sync, 1, k, 0, k * MS, 0.0)
        w.emit(L.STEP_VALUE, 0, count, 1, k, 0, k * MS, 1.0)
        w.emit(L.SITE, 0, item_id, 1, k, 30 * MS, k * MS, 1.0)
    view = TrainingView(ChannelSource(SegmentReader(w.path)))
    view.poll()
    syncs = view.snapshot().syncs
    assert syncs is not None and syncs.share == 0.0
    assert [(s.site, s.per_step, s.share) for s in syncs.top] == [(ITEM, 1.0, None)]
