"""The first frame paints what one sample holds (issue 42 item 9): the GPU's basic fields, the
process, the channel's last state; what needs a second sample (GPM's activity, CPU rates) follows on
the next cycle. NVML is faked at its boundary (tests/fake_nvml.py: GPM metrics need two samples,
as the real library's do); the interval is long, so no second sample comes while the test looks.
Speed is the benchmark's (benchmarks/first_frame.py), not a timed assertion here."""

import os
import time

import pytest

from tests.fake_nvml import FakeNvml
from tuimon.monitor.session import EarlyStart, LiveSession
from tuimon.sources.nvml import DeviceSampler
from tuimon.ui.app import make_app
from tuimon.ui.widgets import Panel


def panel(app, wid: str) -> str:
    return app.screen.query_one(wid, Panel)._last.plain


@pytest.mark.asyncio
async def test_the_first_frame_shows_one_samples_fields_with_gpm_pending():
    nvml = FakeNvml(gpus=1, gpm=True)
    nvml.processes = []
    session = LiveSession(os.getpid(), interval=600, devices=DeviceSampler(nvml))
    app = make_app(session, "attached", early=EarlyStart(session))
    async with app.run_test(size=(120, 40)) as pilot:
        end = time.monotonic() + 30
        while not app.state.gpus and time.monotonic() < end:
            await pilot.pause(0.05)
        await pilot.pause()
        assert nvml.calls.count("nvmlGpmSampleGet") == 1  # one sample: the frame did not wait for a second
        assert "nvmlGpmMetricsGet" not in nvml.calls
        gpus = panel(app, "#gpus")
        assert "GPU 0 NVIDIA H200" in gpus and "40.0/141.0 GiB" in gpus and "612/700 W" in gpus and "61°C" in gpus
        assert "SM active" in gpus and "n/a" in gpus  # (GPM's activity: pending until the next sample)
        assert str(os.getpid()) in panel(app, "#process")
