"""SVG snapshots of every screen from real GPU recordings (pytest-textual-snapshot).
After an intended UI change: pytest tests/test_snapshots.py --snapshot-update, and look."""

import pytest

from tests.conftest import ROOT
from tuimon.ui.app import make_app
from tuimon.ui.replay_frames import state_from_recording

FIXTURE = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")  # the demo on an H100, with its anatomy
V1_FIXTURE = str(ROOT / "tests" / "fixtures" / "h200_demo.jsonl")  # an older probe: no phases
DDP_FIXTURE = str(ROOT / "tests" / "fixtures" / "h200x2_ddp_straggler.jsonl")  # DDP on 2 H200s, rank 1 planted slow
FOUR_GPUS = str(ROOT / "tests" / "fixtures" / "h200x4_ddp_synthetic.jsonl")  # that DDP job made 4 ranks (synthetic)
STUCK_FIXTURE = str(ROOT / "tests" / "fixtures" / "h100_sync_stuck.jsonl")  # H100: .item() behind a kernel that spins


async def redraw(pilot):
    await pilot.pause()
    pilot.app.redraw()
    await pilot.pause()


def app(fixture=FIXTURE):
    return make_app(None, f"replay of {fixture.rsplit('/', 1)[-1]}", state_from_recording(fixture))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@pytest.mark.parametrize("keys", [[], ["r"], ["g"], ["e"], ["question_mark"], ["m"]],
                         ids=["main", "ranges", "gpu", "explain", "help", "memory"])
def test_screen(snap_compare, size, keys):
    assert snap_compare(app(), terminal_size=size, press=keys, run_before=redraw)


def test_a_recording_of_an_older_probe(snap_compare):
    assert snap_compare(app(V1_FIXTURE), terminal_size=(120, 40), run_before=redraw)


@pytest.mark.parametrize("keys", [[], ["t"]], ids=["main", "threads"])
def test_a_job_stalled_behind_a_gpu_kernel(snap_compare, keys):
    assert snap_compare(app(STUCK_FIXTURE), terminal_size=(120, 40), press=keys, run_before=redraw)


def test_every_rank_of_a_ddp_job(snap_compare):
    assert snap_compare(app(DDP_FIXTURE), terminal_size=(120, 40), run_before=redraw)


def test_a_four_gpu_job_a_line_per_gpu(snap_compare):
    assert snap_compare(app(FOUR_GPUS), terminal_size=(120, 40), run_before=redraw)


def test_a_regression_against_a_baseline(snap_compare):
    from tests.test_ui import H100, h100_baseline

    state = state_from_recording(H100, baseline=("good.json", h100_baseline(0.7)))
    assert snap_compare(make_app(None, "replay of h100_demo_v2.jsonl", state), terminal_size=(120, 40),
                        run_before=redraw)
