"""monitor/job_log.py alone: the last lines of a launched job's output, read once it exited."""

from tuimon.model import ProcessSample
from tuimon.monitor.job_log import TAIL_LINES, JobLog

ALIVE, GONE = ProcessSample(pid=7), ProcessSample(pid=7, alive=False, exit_code=1)


def test_read_once_the_job_exited_and_kept(tmp_path):
    path = tmp_path / "job.log"
    path.write_text("".join(f"line {i}\n" for i in range(100)) + "Traceback: boom")
    log = JobLog(str(path))
    assert log.tail(ALIVE) == [] and log.tail(None) == []
    tail = log.tail(GONE)
    assert TAIL_LINES == 40 and len(tail) == 40 and tail[0] == "line 61" and tail[-1] == "Traceback: boom"
    path.write_text("later\n")
    assert log.tail(GONE) == tail  # (read once)


def test_only_the_last_64_kib_are_read(tmp_path):
    path = tmp_path / "job.log"
    path.write_bytes(b"x" * (200 * 1024) + b"\nend\n")
    tail = JobLog(str(path)).tail(GONE)
    assert tail[-1] == "end" and len(tail[0]) == 64 * 1024 - len("\nend\n")


def test_no_log_and_an_unreadable_one(tmp_path):
    assert JobLog(None).tail(GONE) == []
    missing = str(tmp_path / "nope.log")
    assert JobLog(missing).tail(GONE) == [f"(cannot read {missing}: No such file or directory)"]
