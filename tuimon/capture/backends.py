"""Which client takes a job's capture windows, chosen here for `tuimon capture` and the TUI's `c`
alike (issue 42: one place): the job's nsys session (`tuimon run --nsys`), Kineto's on-demand path
(a job started with KINETO_USE_DAEMON=1 that asks this host's endpoint: capture/kineto_windows.py),
or the probe's control block (torch.profiler and memory windows). Every client has the same
interface, `WindowClient`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..channel.paths import program_name
from ..model import CaptureStatus
from . import kineto_ranks, kineto_windows, nsys_session
from .client import CaptureClient, CaptureRefused

if TYPE_CHECKING:
    from ..channel.reader import SegmentInfo

RanksNow = Callable[[], list[kineto_ranks.RankJob]]  # a torchrun job's ranks as they are now


class WindowClient(Protocol):
    """A job's capture windows: CaptureClient (the probe's), nsys_session.SessionWindows,
    kineto_windows.KinetoWindows."""

    def status(self) -> CaptureStatus: ...

    def request(self, steps: int | None = None, seconds: float | None = None, kind: int = 0) -> int: ...

    def wait(self, seq: int, timeout: float, on_change: Callable[[CaptureStatus], object] | None = None,
             on_poll: Callable[[], object] | None = None) -> CaptureStatus: ...

    def close(self) -> None: ...


# The rule: in a job whose Kineto runs in daemon mode (KINETO_USE_DAEMON), no torch.profiler window through the
# probe. Measured: on an H200 (torch 2.11.0+cu130), the ~3,000-kernel loop (tests/workloads/gpu_loops.py kernels)
# under `tuimon run` in daemon mode ended with SIGSEGV, without a word, during the probe's torch.profiler window
# that followed a Kineto window (benchmarks/kineto_cost.py, 2 of 2 runs; a small GPT survived 3 such pairs).
PROFILER_IN_DAEMON_MODE = ("no torch.profiler window in a job whose Kineto runs in daemon mode (KINETO_USE_DAEMON): "
                           "on an H200 one ended such a job with SIGSEGV; ask a window in optimizer steps, which "
                           "Kineto takes, or run the job without TUIMON_KINETO=1")

NOT_ASKED = "the job did not ask Kineto's endpoint"


@dataclass(frozen=True)
class Ask:
    """The window asked for: steps or seconds; memory (the allocator's history: the probe's)."""
    steps: int | None
    seconds: float | None
    memory: bool = False


def kineto_why_not(pid: int, ask: Ask | None, step_source: str | None) -> str | None:
    """Why this window does not go through Kineto's path, in words; None when it is tried (the
    endpoint is then asked, which can take ~6.5 s). Fast: reads /proc/PID/environ only."""
    if ask is None:
        return "no window asked for yet"
    if ask.memory:
        return "a memory window is the probe's"
    if (why := kineto_windows.why_not(pid)) is not None:
        return why
    if ask.seconds is not None:  # (Kineto's duration trace, asked for 0.5 s on torch 2.13: ~10 s, 22 MiB)
        return "Kineto's time windows record from the config's arrival, seconds longer than asked"
    if step_source != "optimizer":
        return f"Kineto counts optimizer steps, and this job's steps are counted by {step_source or 'nothing yet'}"
    return None


def may_wait(info: SegmentInfo, ask: Ask | None, step_source: str | None, current: WindowClient | None,
             ranks: RanksNow | None = None) -> bool:
    """Whether choose() may wait for Kineto's endpoint (up to kineto_windows.REGISTER_WAIT_S):
    then it belongs on a worker, never on the sampler thread nor the UI's."""
    if info.meta.nsys_session or kineto_why_not(info.pid, ask, step_source) is not None:
        return False
    return not _kept(current, ranks)


def _many(ranks: RanksNow | None) -> bool:
    """Whether the job has several ranks (then a window is taken on every one: kineto_ranks.py)."""
    return ranks is not None and len(ranks()) >= 2


def _kept(current: WindowClient | None, ranks: RanksNow | None) -> bool:
    """Whether the Kineto client in use is the kind the job needs now (one job, or its ranks)."""
    if not isinstance(current, kineto_windows.KinetoWindows):
        return False
    return isinstance(current, kineto_ranks.KinetoRankWindows) == _many(ranks)


def choose(info: SegmentInfo, steps_now: Callable[[], int], ask: Ask | None = None, step_source: str | None = None,
           current: WindowClient | None = None, say: Callable[[str], object] | None = None,
           ranks: RanksNow | None = None) -> WindowClient:
    """The client for this job's next window (ask None: the one to follow before any is asked):
    its nsys session's; Kineto's, when kineto_why_not() is None and the job asks the endpoint
    (waits up to ~6.5 s for that: may_wait() says when); else the probe's, but never a
    torch.profiler window in a job in Kineto's daemon mode (PROFILER_IN_DAEMON_MODE: refused,
    with the reason Kineto's path was not taken). current: the client in use, kept when it is
    still the right kind (the caller closes it otherwise). say: what is being asked. Raises
    CaptureRefused (nsys not found, the rule above) and ChannelError (the segment gone). ranks: a
    torchrun job's ranks (info is one of them): with two or more, Kineto's window is taken on
    every rank at the same steps (kineto_ranks.py)."""
    if info.meta.nsys_session and not (ask is not None and ask.memory):  # (memory: the probe's, in any job)
        if isinstance(current, nsys_session.SessionWindows):
            return current
        found = nsys_session.for_job(info, steps_now)
        assert found is not None  # (the session is named)
        return found
    why = kineto_why_not(info.pid, ask, step_source)
    if why is None:
        if _kept(current, ranks):
            assert current is not None
            return current  # (its endpoint holds the name: a job that stopped asking it is refused in words)
        if isinstance(current, kineto_windows.KinetoWindows):
            current.close()  # (the endpoint's name is taken anew below)
        heard: list[str] = []
        k: kineto_windows.KinetoWindows | None
        if ranks is not None and _many(ranks):
            if say is not None:
                say("asking Kineto's endpoint for every rank: each polls it every 5 s")
            k = kineto_ranks.for_ranks(ranks, info.pid, info.start_ticks, program_name(list(info.meta.argv)),
                                       steps_now, say=heard.append)
        else:
            if say is not None:
                say("asking Kineto's endpoint: the job polls it every 5 s")
            k = kineto_windows.for_job(info.pid, info.start_ticks, program_name(list(info.meta.argv)), steps_now,
                                       say=heard.append)
        if k is not None:
            return k
        why = heard[-1] if heard else NOT_ASKED
    if ask is not None and not ask.memory and kineto_windows.job_uses_daemon(info.pid):
        raise CaptureRefused(f"{why or NOT_ASKED}: {PROFILER_IN_DAEMON_MODE}")
    if isinstance(current, CaptureClient):
        return current
    return CaptureClient(info.path, info.pid, info.start_ticks)


def kind_of(client: WindowClient, memory: bool, probe_kind: str) -> str:
    """What a window of this client is called ('nsys', 'kineto', 'torch.profiler', 'memory')."""
    if memory:
        return "memory"
    if isinstance(client, kineto_windows.KinetoWindows):
        return kineto_windows.KIND
    if isinstance(client, nsys_session.SessionWindows):
        return "nsys"
    return probe_kind


def runs_here(client: WindowClient) -> bool:
    """Whether the window is run from this monitor (nsys start/stop, Kineto's endpoint) rather than
    by the job's probe: it ends with this process."""
    return isinstance(client, (nsys_session.SessionWindows, kineto_windows.KinetoWindows))
