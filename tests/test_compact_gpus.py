"""More than two GPUs: a line each (nvitop's compact mode), their blocks on `g` (issue 43, item 6).
Render functions at the panel widths of 120 and 80 columns (115 and 75: the body's padding and
scrollbar) and at the terminal widths themselves; the main screen of a 4-GPU job and `tuimon top` on 8
GPUs at 120x40."""

import os

import pytest

from tests.conftest import ROOT
from tests.fake_nvml import FakeNvml
from tuimon.model import NA, GpuProcess, GpuSample
from tuimon.monitor.session import LiveSession
from tuimon.monitor.state import GpuView, View
from tuimon.sources.nvml import DeviceSampler
from tuimon.ui.app import make_app
from tuimon.ui.panels.gpus import (
    COMPACT_COLUMNS,
    SPARK_MAX,
    compact_gpus,
    compact_layout,
    gpus_panel,
    gpus_title,
    short_name,
)
from tuimon.ui.panels.top import top_header, top_panel
from tuimon.ui.replay_frames import state_from_recording
from tuimon.ui.screens import GpuScreen, MainScreen, TopScreen
from tuimon.ui.widgets import Panel

FOUR = str(ROOT / "tests" / "fixtures" / "h200x4_ddp_synthetic.jsonl")  # the 2-rank DDP recording made 4 ranks
WIDTHS = [115, 75, 120, 80]
SERIES = ("sm_active", "tensor_active", "dram_bw", "power_w", "util_gpu", "util_mem")


def gpu(i, **kw):
    """An H200 at work, as NVML reads one (kw: fields that differ)."""
    s = GpuSample(index=i, name="NVIDIA H200", gpm=True, sm_active=97.0, tensor_active=40.0, dram_bw=35.0,
                  mem_used=40 * 2**30, mem_total=141 * 2**30, power_w=612.3, power_limit_w=700.0, temp_c=61,
                  sm_clock_mhz=1755, sm_clock_max_mhz=1980, clock_events=[],
                  processes=[GpuProcess(pid=4200 + i, gpu_mem=3 * 2**30, sm_util=71, user="ana", command="python train.py")],
                  uses_target=True)
    s = GpuSample(**{**s.__dict__, **kw})
    return GpuView(s, {f: [50.0, None, 97.0] for f in SERIES}, {f: [None, 80.0, 97.0] for f in SERIES})


def view(gpus, targets=None):
    return View(training=None, process=None, gpus=gpus, step_ms=[], verdict=None,
                target_gpus=[g.latest.index for g in gpus] if targets is None else targets)


NA_EVERYWHERE = {f: NA("not supported") for f in ("sm_active", "tensor_active", "dram_bw", "mem_used", "mem_total",
                                                   "power_w", "power_limit_w", "temp_c", "sm_clock_mhz")}


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("width", WIDTHS)
def test_each_gpu_is_one_line_never_wider_than_the_panel(n, width):
    gpus = [gpu(i) for i in range(n)]
    gpus[1] = gpu(1, **NA_EVERYWHERE)  # one GPU whose fields all failed: n/a where its numbers were
    lines = gpus_panel(view(gpus), width).plain.split("\n")
    assert len(lines) == n
    assert all(len(line) <= width for line in lines)
    assert [line.split()[:2] for line in lines] == [["GPU", str(i)] for i in range(n)]
    assert "n/a" in lines[1] and "97%" not in lines[1] and "97%" in lines[0]
    for k in ("tensor", "DRAM", " W", "GiB"):  # each column where the others have it, whatever it holds
        if k in lines[0]:
            assert len({line.find(k) for line in lines if k in line}) == 1, k


@pytest.mark.parametrize("width", WIDTHS)
def test_every_column_fills_its_width_whatever_the_gpu_reads(width):
    """Columns line up: each cell is as wide as its column, NA or not, lost or not, GPM or not (the
    last column, the clock, is the rest of the line: its cells may be shorter; the index's last two
    cells are the target's mark, gpu_row's)."""
    widths = compact_layout(width)
    assert sum(widths.values()) <= width
    for g in (gpu(0), gpu(1, **NA_EVERYWHERE), gpu(2, gpm=False, util_gpu=100, util_mem=42, tensor_active=NA("no GPM")),
              gpu(3, name="NVIDIA A100-SXM4-80GB", power_w=1000.0, power_limit_w=1000.0, temp_c=105,
                  mem_used=191.5 * 2**30, mem_total=192 * 2**30)):  # (a B200: 1000 W)
        for k, w in widths.items():
            cell = COMPACT_COLUMNS[k].cell(g, w).plain
            assert len(cell) == w - 2 * (k == "index") or (k == "clock" and len(cell) <= w), (k, w, cell)


def test_at_120_columns_every_number_at_80_the_activity_power_and_memory():
    wide = compact_gpus([gpu(0)], 115, [0]).plain
    assert wide.startswith("GPU 0 ◆ H200") and "SM" in wide and "97%" in wide
    for part in ("tensor  40%", "DRAM  35%", "612/700 W", "40.0/141.0 GiB", "61°C", "1755 MHz"):
        assert part in wide, part
    assert compact_layout(115)["sm"] > compact_layout(75)["sm"]  # the sparkline shrinks first...
    narrow = compact_gpus([gpu(0)], 75, [0]).plain
    for part in ("GPU 0 ◆", "97%", "tensor  40%", "DRAM  35%", "612/700 W", "40.0/141.0 GiB"):
        assert part in narrow, part
    for gone in ("H200", "61°C", "MHz"):  # ... the clock, the name and the temperature go
        assert gone not in narrow
    assert "▇" in narrow or "█" in narrow  # (a short sparkline still)
    assert compact_layout(400)["sm"] <= 8 + SPARK_MAX + 1  # a wide terminal: a sparkline no longer than SPARK_MAX


def test_a_throttled_gpu_says_so_where_the_clock_was_and_a_lost_one_why():
    lines = compact_gpus([gpu(0, clock_events=["GPU idle", "software power cap"]),
                          gpu(1, lost=NA("GPU is lost")), gpu(2)], 115, [0, 1, 2]).plain.split("\n")
    assert lines[0].endswith("  throttle") and "MHz" not in lines[0]  # the flag: the reasons on `g`
    assert compact_gpus([gpu(0, clock_events=["software power cap"])], 160, [0]).plain.endswith(
        "  throttle: software power cap")  # ... or where the line has room
    assert lines[1].startswith("GPU 1 ◆ H200") and "lost: GPU is lost" in lines[1] and "W" not in lines[1]
    assert "1755 MHz" in lines[2]
    tiny = compact_gpus([gpu(0, clock_events=["software power cap"])], 30, [0]).plain
    assert len(tiny) <= 30 and tiny.startswith("GPU 0")  # narrower than anything: cut, never wrapped


def test_names_short_and_safe():
    assert [short_name(n) for n in ("NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090", "Tesla T4",
                                    "NVIDIA H100 80GB HBM3", NA("not read"))] == \
        ["H200", "A100", "RTX 4090", "T4", "H100", "?"]
    assert "\x1b" not in compact_gpus([gpu(0, name="\x1b[31mEVIL")], 115, []).plain


def test_one_or_two_gpus_keep_their_blocks_and_more_say_where_the_detail_is():
    two = view([gpu(0), gpu(1)])
    assert "SM active" in gpus_panel(two, 115).plain and "processes 4200" in gpus_panel(two, 115).plain
    assert "g: detail" not in gpus_title(two)
    four = view([gpu(i) for i in range(4)])
    assert "SM active" not in gpus_panel(four, 115).plain and gpus_title(four).endswith("g: detail")
    # only the target's GPUs count: 2 of 8 used, blocks (and the others a key away, as before)
    mostly_idle = view([gpu(i) for i in range(8)], targets=[3, 5])
    shown = gpus_panel(mostly_idle, 115).plain
    assert "SM active" in shown and "6 other GPU(s) not used by the target" in shown
    assert "g: detail" not in gpus_title(mostly_idle)


@pytest.mark.parametrize("width", [115, 75])
def test_top_on_8_gpus_a_line_each_then_one_table_of_processes(width):
    v = view([gpu(i, uses_target=None) for i in range(8)], targets=[])
    lines = top_panel(v, width).plain.split("\n")
    assert [line.split()[:2] for line in lines[:8]] == [["GPU", str(i)] for i in range(8)]
    assert lines[8] == "" and lines[9].split() == ["GPU", "PID", "USER", "GPU", "MEM", "SM", "COMMAND"]
    assert [line.split()[:3] for line in lines[10:]] == [[str(i), str(4200 + i), "ana"] for i in range(8)]
    assert all(len(line) <= width for line in lines) and "◆" not in lines[0]
    assert "(g: detail)" in top_header(v, "top", 120).plain


async def settle(app, pilot):
    await pilot.pause()
    app.redraw()
    await pilot.pause()


@pytest.mark.asyncio
async def test_a_4_gpu_job_at_120x40_shows_verdict_ranks_every_gpu_and_the_step_on_one_screen():
    app = make_app(None, "replay", state_from_recording(FOUR))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)
        q = app.screen.query_one
        assert "STRAGGLER: RANK 1" in q("#verdict", Panel)._last.plain
        ranks = q("#ranks", Panel)._last.plain.split("\n")
        assert [line.replace("*", "").split()[:2] for line in ranks[1:]] == [["0", "678"], ["1", "679"], ["2", "680"],
                                                                               ["3", "681"]]
        gpus = q("#gpus", Panel)._last.plain.split("\n")
        assert len(gpus) == 4 and all(line.startswith(f"GPU {i} ◆ H200") for i, line in enumerate(gpus))
        assert str(q("#gpus-title").render()).endswith("g: detail")
        assert q("#body").scroll_y == 0
        footer = app.size.height - 1
        for wid in ("#verdict", "#ranks", "#gpus", "#breakdown-title"):
            assert q(wid).region.bottom <= footer, wid  # on the first screen, whole
        assert q("#breakdown").region.y < footer  # and the step's bar under its title
        await pilot.press("g")  # the detail: today's block
        await settle(app, pilot)
        assert isinstance(app.screen, GpuScreen)
        assert "SM active" in app.screen.query_one("#gpu-summary", Panel)._last.plain


@pytest.mark.asyncio
async def test_top_on_8_gpus_at_120x40():
    fake = FakeNvml(gpus=8)
    fake.processes[0].pid = os.getpid()  # a process /proc can name: this test's own
    app = make_app(LiveSession(None, 0.1, devices=DeviceSampler(fake)), "top", top=True)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            shown = app.screen.query_one("#gpus", Panel)._last
            if shown is not None and "GPU 7" in shown.plain:
                break
        assert isinstance(app.screen, TopScreen)
        lines = shown.plain.split("\n")
        assert [line.split()[:3] for line in lines[:8]] == [["GPU", str(i), "H200"] for i in range(8)]
        assert all(line.endswith("  throttle") for line in lines[:8])  # (the fake's clock events)
        assert len([line for line in lines if line.strip().startswith(tuple("01234567"))]) == 8  # a process each
        assert "8 GPUs (g: detail)" in app.screen.query_one("#header", Panel)._last.plain
        gpus = app.screen.query_one("#gpus", Panel)
        assert gpus.region.bottom <= app.size.height - 1 and max(map(len, lines)) <= gpus.text_width
        await pilot.press("g")
        await settle(app, pilot)
        assert isinstance(app.screen, GpuScreen)
