"""The Session protocol the app talks to, kept by the live session and the replay alike, and what
each one offers (a replay has no other rank to show)."""

import inspect

import pytest

from tests.conftest import ROOT
from tuimon.monitor.session import LiveSession, ReplaySession, Session
from tuimon.ui.app import make_app

DDP_FIXTURE = str(ROOT / "tests" / "fixtures" / "h200x2_ddp_straggler.jsonl")  # 2 ranks recorded


@pytest.mark.parametrize("cls", [LiveSession, ReplaySession])
def test_both_sessions_keep_the_protocol(cls):
    members = {n for n in dir(Session) if not n.startswith("_")} | set(Session.__annotations__)
    assert members == {"ranks_switchable", "live", "start", "stop", "request_capture", "next_rank", "request_stacks",
                       "progress"}
    for name in members - {"ranks_switchable", "live"}:
        want = list(inspect.signature(getattr(Session, name)).parameters)
        assert list(inspect.signature(getattr(cls, name)).parameters) == want, name
    assert isinstance(cls.ranks_switchable, bool) and cls.live is (cls is LiveSession)


async def until(pilot, cond, turns=200):
    for _ in range(turns):
        await pilot.pause(0.05)
        if cond():
            return True
    return False


@pytest.mark.asyncio
async def test_a_replay_of_ranks_does_not_offer_n():
    """The recording holds the shown rank's detail only: `n` is off (and out of the footer)."""
    session = ReplaySession(DDP_FIXTURE, speed=1000)
    app = make_app(session, "replay")
    async with app.run_test(size=(160, 40)) as pilot:
        assert await until(pilot, lambda: session.finished and len(app.state.ranks) == 2)
        assert app.check_action("next_rank", ()) is False
        footer = " ".join(b.binding.description for b in app.active_bindings.values() if b.binding.show and b.enabled)
        assert "next rank" not in footer and "captures" in footer
        await pilot.press("n")  # nothing happens, nothing breaks
        await pilot.pause()
        assert not app._notifications
    with pytest.raises(Exception, match="a replay shows the rank it recorded"):
        session.next_rank()
