"""Where monitor data comes from: live pollers on one thread, or a recording. Both hand entries
(source, data) to the same callback, which feeds MonitorState.apply()."""

from __future__ import annotations

import threading
from dataclasses import asdict

from ..capture.client import CaptureClient, CaptureRefused
from ..capture.summary import summarize
from ..channel import ChannelError
from ..channel.control import KIND_NAMES, KIND_NSYS
from ..sources.channel import ChannelSource
from ..sources.nvml import DeviceSampler, target_note
from ..sources.poller import Poller
from ..sources.process import ProcessSampler
from ..sources.recording import ReplaySource
from .target import open_channel
from .training import TrainingView


class LiveSession:
    """The target's channel (opened as soon as it exists), its process tree and the GPUs, polled
    together on one thread; pid None watches the GPUs alone (`tuimon top`)."""

    def __init__(self, pid: int | None, interval: float = 1.0, popen=None, devices=None):
        self.pid, self.interval = pid, interval
        self.procs = ProcessSampler(pid, popen) if pid else None
        self.gpus = devices if devices is not None else DeviceSampler()
        self.training: TrainingView | None = None
        self.channel_error: str | None = None
        self.captures: CaptureClient | None = None
        self._summaries: dict[int, dict] = {}
        self._poller: Poller | None = None

    def _training(self) -> TrainingView | None:
        if self.training is None and self.pid:
            try:
                self.training = TrainingView(ChannelSource(open_channel(self.pid)))
                self.channel_error = None
            except ChannelError as e:
                self.channel_error = str(e)
        return self.training

    def poll(self) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = []
        pids: set[int] = set()
        if self.procs is not None:
            p = self.procs.sample()
            pids = {r["pid"] for r in p["procs"]} or {self.pid}
            out.append(("process", p))
        self.gpus.target_pids = pids
        gpu = self.gpus.sample()
        out.append(("gpu", gpu))
        if self.gpus.error:
            out.append(("note", self.gpus.error))
        elif pids:
            out.append(("note", target_note(gpu, pids)))
        view = self._training()
        if view is not None:
            try:
                view.poll()
                out.append(("training", view.snapshot()))
            except ChannelError as e:
                self.channel_error = str(e)
            out.append(("capture", self._capture_state()))
        return out

    def _capture_state(self) -> dict | None:
        """The capture state, with the summary of a finished one (read here, off the UI thread)."""
        if self.captures is None:
            info = self.training.source.reader.info
            try:
                self.captures = CaptureClient(info.path, info.pid, info.start_ticks)
            except ChannelError as e:
                return {"error": str(e)}
        st = self.captures.state()
        d = asdict(st) | {"name": st.name, "kind_name": KIND_NAMES.get(st.kind, "?")}
        if st.name == "done":
            summary = self._summaries.get(st.ack_seq)
            if summary is None or (summary["file"] is None and st.kind == KIND_NSYS):
                summary = self._summaries[st.ack_seq] = summarize(st)
            d["summary"] = summary
        return d

    def request_capture(self, steps: int | None, seconds: float | None) -> str:
        """From the UI thread: a few bytes into the control block. Returns what to tell the user."""
        if self.captures is None:
            raise CaptureRefused(self.channel_error or "no channel to the process yet")
        seq = self.captures.request(steps=steps, seconds=seconds)
        return f"capture {seq} asked: {f'{steps} steps' if steps else f'{seconds:g} s'}"

    def start(self, on_entries) -> None:
        self._poller = Poller(self.poll, on_entries, self.interval, name="tuimon-sampler").start()

    def stop(self) -> None:
        if self._poller:
            self._poller.stop()
        self.gpus.close()


BATCH_GAP_NS = 200_000_000


class ReplaySession:
    """A recording, paced as recorded (speed > 1: faster)."""

    def __init__(self, path: str, speed: float = 1.0):
        self.source = ReplaySource(path, speed)
        self.channel_error = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, on_entries) -> None:
        batch: list = []
        first_t = [0]

        def on_entry(source, data, t):
            # One poll cycle recorded its sources a few ms apart: hand them over together, as
            # the live poller does, so the UI draws once per cycle.
            if batch and t - first_t[0] > BATCH_GAP_NS:
                on_entries(list(batch))
                batch.clear()
            if not batch:
                first_t[0] = t
            batch.append((source, data))

        def run():
            self.source.run(on_entry, self._stop, with_time=True)
            if batch:
                on_entries(list(batch))

        self._thread = threading.Thread(target=run, name="tuimon-replay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def request_capture(self, steps, seconds) -> str:
        raise CaptureRefused("a replay has no process to capture")
