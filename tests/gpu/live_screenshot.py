"""Save an SVG of the live main screen attached to PID (or of `tuimon top`: PID "top") after N
seconds of sampling (GPU check)."""

import asyncio
import sys

from tuimon.monitor.session import LiveSession
from tuimon.ui.app import make_app


async def main(target: str, seconds: float, path: str):
    top = target == "top"
    app = make_app(LiveSession(None if top else int(target), 1.0), "top, every 1 s" if top else "attached, every 1 s",
                   top=top)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(seconds)
        app.redraw()
        await pilot.pause()
        print(app.save_screenshot(filename=path))
        for wid in ("#header", "#gpus") if top else ("#verdict", "#gpus", "#process"):
            print(app.screen.query_one(wid)._last.plain)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), sys.argv[3]))
