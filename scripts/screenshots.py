"""Render the main, explain, ranges and GPU screens from the committed real-GPU recordings into
screenshots/ as SVG (and PNG where rsvg-convert is installed: apt-get install librsvg2-bin).

    bash scripts/setup.sh && .venv/bin/python scripts/screenshots.py
"""

import asyncio
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tuimon.ui.app import make_app  # noqa: E402
from tuimon.ui.replay_frames import state_from_recording  # noqa: E402

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "h100_demo_v2.jsonl")
STUCK_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "h100_sync_stuck.jsonl")  # a kernel that spins, then .item()
DDP_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "h200x2_ddp_straggler.jsonl")  # 2 ranks, rank 1 planted slow
FOUR_GPUS = os.path.join(ROOT, "tests", "fixtures", "h200x4_ddp_synthetic.jsonl")  # that job made 4 ranks (synthetic)
OUT = os.path.join(ROOT, "screenshots")


def first_half_baseline():
    """A baseline of the recording's first half (real numbers), to show the job against it."""
    from tuimon.monitor.baseline import BaselineBuilder
    from tuimon.sources.recording import Recording

    cycles = list(Recording(FIXTURE).cycles())
    builder = BaselineBuilder("recording h100_demo_v2.jsonl, first half")
    for c in cycles[: len(cycles) // 2]:
        builder.add(c)
    return "first-half.json", builder.build()


async def shoot(size, keys_and_names, baseline=None, fixture=FIXTURE):
    app = make_app(None, f"replay of {os.path.basename(fixture)}", state_from_recording(fixture, baseline=baseline))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        for keys, name in keys_and_names:
            for k in keys:
                await pilot.press(k)
            await pilot.pause()
            app.redraw()
            await pilot.pause()
            path = app.save_screenshot(filename=f"{name}.svg", path=OUT)
            print(path)
            if shutil.which("rsvg-convert"):
                subprocess.run(["rsvg-convert", "-o", path[:-4] + ".png", path], check=True)


def main():
    os.makedirs(OUT, exist_ok=True)
    asyncio.run(shoot((120, 40), [([], "main-120x40"), (["e"], "explain-120x40"), (["escape", "r"], "ranges-120x40"),
                                  (["escape", "g"], "gpu-120x40")]))
    asyncio.run(shoot((80, 24), [([], "main-80x24")]))
    asyncio.run(shoot((120, 40), [([], "main-baseline-120x40")], baseline=first_half_baseline()))
    asyncio.run(shoot((120, 40), [([], "main-ranks-120x40")], fixture=DDP_FIXTURE))
    asyncio.run(shoot((120, 40), [([], "main-stalled-120x40")], fixture=STUCK_FIXTURE))
    asyncio.run(shoot((120, 40), [([], "main-4gpu-120x40")], fixture=FOUR_GPUS))


if __name__ == "__main__":
    main()
