"""Where monitor data comes from: live samplers polled together on one thread, or a recording.
Both hand one Cycle per poll to the same callback, which feeds MonitorState.apply(); `tuimon
record`, `--plain`, `--once` and the TUI all take their cycles from here."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from ..capture.client import CaptureClient, CaptureRefused
from ..channel import ChannelError, NoSegment
from ..model import NA, CaptureStatus, Cycle
from ..sources.channel import ChannelSource
from ..sources.nvml import DeviceSampler, target_note
from ..sources.poller import Poller
from ..sources.process import ProcessSampler
from ..sources.recording import ReplaySource
from .summaries import SummaryWorker
from .target import open_channel
from .training import TrainingView

REDISCOVER_S = 1.0  # how often to look for a channel that is not there (a /proc scan)


class LiveSession:
    """The target's process tree, the GPUs and the target's channel (picked up whenever it
    appears), polled together; pid None watches the GPUs alone (`tuimon top`). A source that
    fails is reported in the cycle's problems, with the reason, and tried again next cycle."""

    def __init__(self, pid: int | None, interval: float = 1.0, popen=None, devices=None,
                 summaries: SummaryWorker | None = None):
        self.pid, self.interval = pid, interval
        self.procs = ProcessSampler(pid, popen) if pid else None
        self._gpus = devices
        self.summaries = summaries or SummaryWorker()
        self.training: TrainingView | None = None
        self.channel: str | NA | None = NA("not looked for yet") if pid else None
        self.shown_why: str | None = None
        self.captures: CaptureClient | None = None
        self._looked_at = 0.0
        self._unreadable: str | None = None  # why the channel found at the last look could not be read
        self._poller: Poller | None = None

    @property
    def gpus(self) -> DeviceSampler:
        """NVML, opened by the first poll (on the sampler thread: nvmlInit and the per-GPU
        queries take a while, and the first frame does not wait for them)."""
        if self._gpus is None:
            self._gpus = DeviceSampler()
        return self._gpus

    # -- one cycle --------------------------------------------------------------------------------

    def poll(self) -> Cycle:
        t = time.monotonic_ns()
        problems: dict[str, str] = {}
        process = gpus = training = capture = note = None
        pids: set[int] = set()
        if self.procs is not None:
            process = _guard(problems, "process", self.procs.sample)
            if process is not None:
                pids = {r.pid for r in process.procs} or {self.pid}
        self.gpus.target_pids = pids
        if self.gpus.error:
            problems["gpu"] = self.gpus.error
        else:
            gpus = _guard(problems, "gpu", self.gpus.sample)
            note = target_note(gpus or [], pids) if pids else None
        view = self._view(problems)
        if view is not None:
            try:
                view.poll()
                training = view.snapshot()
            except ChannelError as e:  # truncated, overwritten: say so, keep what was read, reopen
                problems["channel"] = f"{e} (showing the last numbers read; reopening)"
                self._drop_channel()
            if training is not None:
                capture = self._capture(problems)
                if self.procs is not None and training.pid == self.pid:
                    self.procs.follow_loop(training.loop_tid)  # its CPU is read from the next cycle on
        return Cycle(t, process, gpus, training, capture, self.channel,
                     view.source.reader.info.pid if view is not None and self.shown_why else None,
                     self.shown_why, problems, note)

    def _view(self, problems: dict) -> TrainingView | None:
        if self.training is not None or not self.pid:
            return self.training
        now = time.monotonic()
        if now - self._looked_at < REDISCOVER_S and self._looked_at:
            if self._unreadable:
                problems["channel"] = self._unreadable  # still so, as of the last look
            return None
        self._looked_at = now
        self._unreadable = None
        try:
            reader, why = open_channel(self.pid)
        except NoSegment as e:
            self.channel = NA(str(e))
            return None
        except ChannelError as e:  # there is one, but it cannot be read: that is a problem
            self.channel = NA(str(e))
            problems["channel"] = self._unreadable = str(e)
            return None
        self.training = TrainingView(ChannelSource(reader))
        self.channel, self.shown_why = reader.path, why
        return self.training

    def _drop_channel(self) -> None:
        if self.training is not None:
            try:
                self.training.source.reader.close()
            except OSError:
                pass
        if self.captures is not None:
            self.captures.close()
        self.training = self.captures = None
        self._looked_at = 0.0

    def _capture(self, problems: dict) -> CaptureStatus | None:
        """The capture state; a done capture carries its summary once the worker has made it."""
        try:
            if self.captures is None:
                info = self.training.source.reader.info
                self.captures = CaptureClient(info.path, info.pid, info.start_ticks)
            status = self.captures.status()
        except ChannelError as e:
            problems["capture"] = str(e)
            return None
        if status.state == "done":
            status = _with_summary(status, self.summaries.summary(status))
        return status

    # -- from the UI thread ---------------------------------------------------------------------

    def request_capture(self, steps: int | None, seconds: float | None) -> str:
        """A few bytes into the control block. Returns what to tell the user."""
        if self.captures is None:
            raise CaptureRefused(self.channel.reason if isinstance(self.channel, NA) else "no channel to the process yet")
        seq = self.captures.request(steps=steps, seconds=seconds)
        return f"capture {seq} asked: {f'{steps} steps' if steps else f'{seconds:g} s'}"

    # -- lifetime ---------------------------------------------------------------------------------

    def start(self, on_cycle) -> None:
        def failed(message: str) -> None:  # a bug in a sampler: say so rather than freeze
            on_cycle(Cycle(time.monotonic_ns(), problems={"sampler": message}))

        self._poller = Poller(self.poll, on_cycle, self.interval, name="tuimon-sampler", on_error=failed).start()

    def stop(self) -> None:
        if self._poller:
            self._poller.stop()
        self.summaries.stop()
        if self._gpus is not None:
            self._gpus.close()


def _guard(problems: dict, source: str, fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - one source's bug is reported, the others go on
        problems[source] = f"{type(e).__name__}: {e}"
        return None


def _with_summary(status: CaptureStatus, summary) -> CaptureStatus:
    return replace(status, summary=summary)


class ReplaySession:
    """A recording, paced as recorded (speed > 1: faster)."""

    def __init__(self, path: str, speed: float = 1.0):
        self.source = ReplaySource(path, speed)
        self.recording = self.source.recording
        self.finished = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, on_cycle, on_end=None) -> None:
        def run():
            self.source.run(on_cycle, self._stop)
            self.finished = True
            if on_end is not None and not self._stop.is_set():
                on_end()

        self._thread = threading.Thread(target=run, name="tuimon-replay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def request_capture(self, steps, seconds) -> str:
        raise CaptureRefused("a replay has no process to capture")


def run_cycles(session: LiveSession, interval: float, on_cycle, until=None, seconds: float = 0) -> int:
    """Poll on this thread every interval, handing each cycle to on_cycle, until until(cycle) is
    true, `seconds` have passed (0: no limit) or Ctrl-C. Returns the number of cycles."""
    n = 0
    end = time.monotonic() + seconds if seconds > 0 else None
    next_at = time.monotonic()
    try:
        while True:
            c = session.poll()
            n += 1
            on_cycle(c)
            if (until is not None and until(c)) or (end is not None and time.monotonic() >= end):
                return n
            next_at = max(next_at + interval, time.monotonic())
            time.sleep(max(0.0, min(next_at, end or next_at) - time.monotonic()))
    except KeyboardInterrupt:
        return n
