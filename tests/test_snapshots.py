"""SVG snapshots of every screen from the real H200 recording (pytest-textual-snapshot).
After an intended UI change: pytest tests/test_snapshots.py --snapshot-update, and look."""

import pytest

from tests.conftest import ROOT
from tuimon.ui.app import make_app
from tuimon.ui.replay_frames import state_from_recording

FIXTURE = str(ROOT / "tests" / "fixtures" / "h200_demo.jsonl")


async def redraw(pilot):
    await pilot.pause()
    pilot.app.redraw()
    await pilot.pause()


def app():
    return make_app(None, "replay of h200_demo.jsonl", state_from_recording(FIXTURE))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@pytest.mark.parametrize("keys", [[], ["r"], ["g"], ["question_mark"]], ids=["main", "ranges", "gpu", "help"])
def test_screen(snap_compare, size, keys):
    assert snap_compare(app(), terminal_size=size, press=keys, run_before=redraw)
