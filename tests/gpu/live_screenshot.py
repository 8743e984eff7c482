"""Save an SVG of the live main screen attached to PID, after N seconds of sampling (GPU check)."""

import asyncio
import sys

from tuimon.monitor.session import LiveSession
from tuimon.ui.app import make_app


async def main(pid: int, seconds: float, path: str):
    app = make_app(LiveSession(pid, 1.0), "attached, every 1 s")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(seconds)
        app.redraw()
        await pilot.pause()
        print(app.save_screenshot(filename=path))
        print(app.screen.query_one("#verdict")._last.plain)
        print(app.screen.query_one("#gpus")._last.plain)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]))
