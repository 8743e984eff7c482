"""monitor/outside.py alone: when lines are sampled from outside (py-spy, faked here: the
boundary, an outside process; tests/test_attach_outside.py runs the real one through the session).
Started at the first cycle with no channel while the process lives, once, with the first round's
seconds asked for; stopped once a channel shows or the session stops; never without a pid."""

from tuimon.model import OutsideLines, ProcessSample
from tuimon.monitor.outside import OutsideWatch

ALIVE, GONE = ProcessSample(pid=4242), ProcessSample(pid=4242, alive=False)


class FakeSampler:
    made: list["FakeSampler"] = []

    def __init__(self, pid, first_round_s):
        self.pid, self.first_round_s, self.started, self.stopped = pid, first_round_s, False, 0
        self.rounds = 0
        FakeSampler.made.append(self)

    def start(self):
        self.started = True
        return self

    def latest(self):
        self.rounds += 1
        return OutsideLines(pid=self.pid, state="sampling" if self.rounds > 1 else "starting", samples=self.rounds)

    def stop(self):
        self.stopped += 1


def watch(pid=4242, **kw):
    FakeSampler.made = []
    followed = []
    return OutsideWatch(pid, first_round_s=3, on_start=followed.append, make=FakeSampler, **kw), followed


def test_started_once_without_a_channel_and_its_lines_each_cycle():
    w, followed = watch()
    first = w.lines(False, ALIVE)
    assert first is not None and (first.pid, first.state) == (4242, "starting")
    assert w.lines(False, ALIVE).state == "sampling" and w.lines(False, None).samples == 3  # (one sampler)
    [sampler] = FakeSampler.made
    assert (sampler.pid, sampler.first_round_s, sampler.started) == (4242, 3, True)
    assert followed == [4242]  # (the session reads the main thread's CPU from then on)


def test_stopped_once_a_channel_shows_and_on_stop():
    w, _ = watch()
    w.lines(False, ALIVE)
    [sampler] = FakeSampler.made
    assert w.lines(True, ALIVE) is None and sampler.stopped == 1 and w.sampler is None
    assert w.lines(True, ALIVE) is None and sampler.stopped == 1  # (nothing left to stop)
    w.lines(False, ALIVE)  # the channel went away again: a new sampler
    assert len(FakeSampler.made) == 2
    w.stop()
    assert FakeSampler.made[1].stopped == 1 and w.sampler is None


def test_not_started_for_a_process_gone_or_without_a_pid():
    w, followed = watch()
    assert w.lines(False, GONE) is None and w.lines(False, None) is None
    off, _ = watch(pid=None)
    assert off.lines(False, ALIVE) is None
    assert FakeSampler.made == [] and followed == []


def test_a_sampler_keeps_going_after_the_process_is_gone():
    """Its last rounds hold what the process did before it ended (the sampler says it ended)."""
    w, _ = watch()
    w.lines(False, ALIVE)
    assert w.lines(False, GONE) is not None and FakeSampler.made[0].stopped == 0
