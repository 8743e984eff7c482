"""analysis/ending.py: each way a job ends, in words, from what tuimon has (exit code 0 clean, a
negative one a signal; the probe's word; the output's last traceback, warnings left out)."""

import pytest

from tuimon.analysis.ending import exception_in, job_end


@pytest.mark.parametrize("exit_code, probe_end, text, tail, how, headline", [
    (0, None, "", [], "clean", "exited with code 0"),
    (1, None, "", [], "exit code", "exited with code 1"),
    (-9, None, "", [], "signal", "killed by SIGKILL"),
    (-9, "exception", "ValueError: x\n  at a.py:1", [], "signal", "killed by SIGKILL: ValueError: x"),
    (None, "exception", "ValueError: x\n  at a.py:1\n", [], "exception", "ended by an uncaught exception: ValueError: x"),
    (None, "exception", "", [], "exception", "ended by an uncaught exception"),
    (None, "clean", "", [], "clean", "its interpreter finished (exit code: known to its parent, not to tuimon)"),
    (None, "clean", "", ["KeyError: 'a'"], "exception",
     "its interpreter finished (exit code: known to its parent, not to tuimon): KeyError: 'a'"),
    (0, None, "", ["RuntimeError: boom"], "exception", "exited with code 0: RuntimeError: boom"),
    (None, None, "", [], "unknown", None),
    (None, None, "", ["RuntimeError: x"], "exception", None),
])
def test_how_a_job_ended(exit_code, probe_end, text, tail, how, headline):
    end = job_end(exit_code=exit_code, probe_end=probe_end, probe_text=text, log=None, log_tail=tail)
    assert end.how == how and (headline is None or end.headline == headline), end
    if probe_end == "exception" and text:
        assert end.frames == ["at a.py:1"]


def test_warnings_are_not_the_exception():
    assert exception_in(["ValueError: a", "UserWarning: b"]) == "ValueError: a"
    assert exception_in(["Warning: b"]) is None and exception_in(["MyWarning: c"]) == "MyWarning: c"
    assert exception_in(["x", "NCCL error in: foo", "y"]) == "NCCL error in: foo"
