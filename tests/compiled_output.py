"""Reading tests/workloads/compiled.py's output, the same way in CI (tests/test_compile.py) and on the
GPU machine (tests/gpu/check_lines.py): its dynamo counters, and its other lines as comparable text."""

import re


def counters(output: str) -> str:
    line = next((x for x in output.splitlines() if x.startswith("graph_breaks")), "? ?")
    return line.rsplit(" ", 1)[0]  # (without its time)


def others(output: str) -> list[str]:
    """The output's other lines, torch's log lines without their time and PID ("W1125 13:08:12.375000 30826 ")."""
    return [re.sub(r"^([WIEF])\d{4} [\d:.]+ \d+ ", r"\1 ", x) for x in output.splitlines()
            if not x.startswith("graph_breaks") and x.strip()]
