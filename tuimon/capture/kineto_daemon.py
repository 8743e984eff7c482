"""tuimon as the local "dynolog" endpoint that Kineto's daemon client talks to: a job started with
KINETO_USE_DAEMON=1 polls it for on-demand trace configs, and Kineto then collects and writes the
trace on its own threads, without Python (no pause of the loop for a stop, a write or a free).

The protocol, as read in the sources (pytorch/kineto: libkineto/src/IpcFabricConfigClient.cpp,
DaemonConfigLoader.cpp, ConfigLoader.cpp; facebookincubator/dynolog: dynolog/src/ipcfabric/
FabricManager.h, Endpoint.h, Utils.h, src/tracing/IPCMonitor.cpp, src/LibkinetoConfigManager.cpp)
and checked against torch 2.13's libtorch_cpu.so (its strings: "dynoconfigclient",
"Failed to send config type=", KINETO_IPC_SOCKET_DIR):

- Unix datagram sockets in the abstract namespace (sun_path[0] = 0; the name, then a NUL, is the
  address). The endpoint binds "dynolog"; each job binds "dynoconfigclient<uuid4>" and sends to
  "dynolog". (With KINETO_IPC_SOCKET_DIR set in the job, both are files in that folder instead.)
- A message is one datagram: Metadata {size_t size; char type[32]} (40 bytes), then `size` bytes.
- "ctxt": LibkinetoContext {int32 gpu; int32 pid; int64 jobid} (on a CUDA context's creation);
  answered with "ctxt" holding an int32 (the job's instances on that GPU).
- "req": LibkinetoRequest {int32 type; int32 n; int64 jobid; int32 pids[n]} (the process first,
  then its ancestors), sent by Kineto's config thread every 5 s (ConfigLoader's
  kOnDemandConfigUpdateIntervalSecs: fixed). type: bit 1 EVENTS, bit 2 ACTIVITIES (asked only
  while no trace is active). Answered with "req" holding the config text (empty: nothing to do).
  jobid: SLURM_JOB_ID, else 0.
- The config is Kineto's key=value lines (libkineto/src/Config.cpp): ACTIVITIES_LOG_FILE,
  ACTIVITIES_ITERATIONS with PROFILE_START_ITERATION=0 and PROFILE_START_ITERATION_ROUNDUP (as
  `dyno gputrace` writes them; iterations are optimizer steps: torch registers an optimizer step
  post-hook when KINETO_USE_DAEMON is set at its import), or ACTIVITIES_DURATION_MSECS with
  PROFILE_START_TIME: 0 (Kineto starts ACTIVITIES_WARMUP_PERIOD_SECS + 2 s after it parsed the
  config) or a Unix time in ms (the same wall-clock start on every rank of a torchrun job:
  capture/kineto_ranks.py).

A client's first request to this endpoint is registered and not answered. Kineto reads the answers
to its requests in the order they come, one after each request it counts as sent
(dynolog/src/ipcfabric/FabricManager.h sync_send, poll_recv), and a request sent while no endpoint
was bound is retried with doubling sleeps (10 ms to 5.12 s) and counted as failed when its tenth
retry is the one that went through: an answer to it would stay queued and every later answer would
be read one request late (a config 5 s after it was handed). Unanswered, Kineto's wait for that
answer ends empty (it says nothing), and an answer queued from an earlier endpoint is read there.

Abstract sockets carry no file permissions: any process on the host can send to the endpoint.
So every datagram's sender is checked with SCM_CREDENTIALS (SO_PASSCRED): only processes of this
user are answered, and the pid a job claims must be the pid that sent it. One endpoint per host:
when the name is taken (a real dynolog, or another tuimon) this one does not start (EndpointTaken):
a real dynolog on the host is used, never fought.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field

ENDPOINT_NAME = "dynolog"
TYPE_SIZE = 32
METADATA = struct.Struct("=Q32s")  # size_t size; char type[32] (x86-64 and aarch64: no padding)
CONTEXT = struct.Struct("=iiq")  # LibkinetoContext: int32 gpu; pid_t pid; int64 jobid
REQUEST = struct.Struct("=iiq")  # LibkinetoRequest: int type; int n; int64 jobid; then int32 pids[n]
UCRED = struct.Struct("=iII")  # struct ucred: pid, uid, gid
CONFIG_EVENTS, CONFIG_ACTIVITIES = 1, 2  # LibkinetoConfigType bits
POLL_S = 5.0  # how often a job asks (Kineto's ConfigLoader: fixed)
GONE_S = 3 * POLL_S  # a job that has not asked for this long is no longer counted as registered
MAX_DATAGRAM = 1 << 16
MAX_PIDS = 1024


class EndpointTaken(Exception):
    """The "dynolog" name is held by another process of this host: a real dynolog or another
    tuimon. Said to the person; nothing of this endpoint runs."""


@dataclass
class KinetoJob:
    pid: int
    jobid: int
    pids: tuple[int, ...] = ()  # the process, then its ancestors
    client: str = ""  # the job's own endpoint name (where answers go)
    gpu: int | None = None
    first_seen: float = 0.0
    last_seen: float = 0.0  # time.monotonic() of its last message
    asks: int = 0
    pending: str = ""  # a config to hand over at its next request
    handed_at: float = 0.0  # when the last config was handed over (monotonic)


@dataclass
class Window:
    """A trace asked of one job: where Kineto will write it (trace_file)."""
    pid: int
    path: str
    config: str
    asked_at: float = field(default_factory=time.monotonic)


def abstract_address(name: str) -> bytes:
    """The address Kineto's EndPoint::setAddress_ builds for an abstract name: NUL, name, NUL."""
    return b"\0" + name.encode() + b"\0"


def trace_file(path: str, pid: int) -> str:
    """Where Kineto writes the trace asked for as `path` (…/name.json): …/name_<pid>.json, written
    to …/name_<pid>.json.tmp first and renamed when complete (seen on torch 2.13)."""
    if not path.endswith(".json"):
        raise ValueError("a Kineto trace path ends in .json")
    return f"{path[:-len('.json')]}_{pid}.json"


def trace_config(path: str, iterations: int | None = None, duration_ms: int | None = None,
                 start_roundup: int = 1, warmup_s: int = 0, with_stack: bool = False,
                 record_shapes: bool = False, start_iteration: int | None = None,
                 start_time_ms: int | None = None) -> str:
    """Kineto's on-demand config for one window of `iterations` optimizer steps (from the next one:
    PROFILE_START_ITERATION=0, PROFILE_START_ITERATION_ROUNDUP=1; from the next multiple of
    start_roundup; or from Kineto's absolute iteration `start_iteration`), or of `duration_ms` of
    wall-clock time from start_time_ms (Unix ms), or, without it, from warmup_s + 2 s after Kineto
    parsed the config. Shapes and stacks off: they cost the loop (the stack needs the GIL).

    Kineto's semantics (libkineto/src/AsyncActivityProfilerHandler.cpp):
    - by iterations (shouldActivateIterationConfig): its iteration count is -1 until the first
      optimizer step and one more at each; a config waits until the count reaches
      PROFILE_START_ITERATION and starts there; a count already past it at the first step after the
      config arrived moves the start to that count rounded up to a multiple of
      PROFILE_START_ITERATION_ROUNDUP.
    - by time (shouldActivateTimestampConfig; only with neither PROFILE_START_ITERATION nor
      PROFILE_START_ITERATION_ROUNDUP, which take precedence): its profiler thread, ticking every
      1 s, activates the config at the first tick within 1 s of start - ACTIVITIES_WARMUP_PERIOD_SECS
      (whole seconds; 5 by default) and cancels it there when fewer than the warm-up's seconds are
      left to the start (GenericActivityProfiler canStart); then it sleeps until the start (ms) and
      traces until start + ACTIVITIES_DURATION_MSECS. A start more than 10 s past is refused at parse."""
    if (iterations is None) == (duration_ms is None):
        raise ValueError("a window is either iterations or a duration")
    if "\n" in path or "\r" in path or not path.endswith(".json"):
        raise ValueError("a trace path is one line and ends in .json")
    lines = [f"ACTIVITIES_LOG_FILE={path}"]
    if iterations is not None:
        if start_iteration is not None and start_iteration < 0:
            raise ValueError("an absolute start iteration is 0 or more")
        lines += [f"PROFILE_START_ITERATION={start_iteration or 0}",
                  f"PROFILE_START_ITERATION_ROUNDUP={max(1, start_roundup)}",
                  f"ACTIVITIES_ITERATIONS={iterations}", "ACTIVITIES_WARMUP_ITERATIONS=0"]
    else:
        if start_time_ms is not None and start_time_ms <= 0:
            raise ValueError("a start time is a Unix time in ms")
        if warmup_s < 0 or duration_ms is None or duration_ms < 1:
            raise ValueError("a timed window lasts 1 ms or more, after a warm-up of 0 s or more")
        lines += [f"PROFILE_START_TIME={start_time_ms or 0}", f"ACTIVITIES_DURATION_MSECS={duration_ms}",
                  f"ACTIVITIES_WARMUP_PERIOD_SECS={warmup_s}"]
    lines += [f"PROFILE_REPORT_INPUT_SHAPES={str(record_shapes).lower()}", "PROFILE_PROFILE_MEMORY=false",
              f"PROFILE_WITH_STACK={str(with_stack).lower()}", "PROFILE_WITH_FLOPS=false",
              "PROFILE_WITH_MODULES=false"]
    return "\n".join(lines)


def encode(kind: str, payload: bytes) -> bytes:
    return METADATA.pack(len(payload), kind.encode()[:TYPE_SIZE - 1]) + payload


def decode(data: bytes) -> tuple[str, bytes] | None:
    """(type, payload) of one datagram, or None when it is not a whole message."""
    if len(data) < METADATA.size:
        return None
    size, kind = METADATA.unpack_from(data)
    payload = data[METADATA.size:]
    if size != len(payload):
        return None
    return kind.split(b"\0", 1)[0].decode("ascii", "replace"), payload


class KinetoEndpoint:
    """The endpoint: binds the name (or raises EndpointTaken), answers on a thread of its own
    until close(). Thread-safe: request_trace() and jobs() from any thread."""

    def __init__(self, name: str = ENDPOINT_NAME, uid: int | None = None):
        self.name = name
        self.uid = os.getuid() if uid is None else uid
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            self.sock.bind(abstract_address(name))  # (the trailing NUL is part of the name, as Kineto sends it)
        except OSError as e:
            self.sock.close()
            if e.errno == errno.EADDRINUSE:
                raise EndpointTaken(f'another process of this host holds Kineto\'s endpoint "{name}" (a dynolog '
                                    "daemon, or another tuimon): tuimon does not take it over") from None
            raise
        self.sock.settimeout(0.2)
        self._lock = threading.Lock()
        self._jobs: dict[int, KinetoJob] = {}
        self.refused = 0  # datagrams from another user, or a pid that was not the sender's
        self.log: deque[str] = deque(maxlen=100)  # what happened lately, for a test or a debug line
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="tuimon-kineto-endpoint", daemon=True)
        self._thread.start()

    # -- what the monitor asks ----------------------------------------------------------------------

    def jobs(self) -> list[KinetoJob]:
        now = time.monotonic()
        with self._lock:
            return [KinetoJob(**vars(j)) for j in self._jobs.values() if now - j.last_seen <= GONE_S]

    def registered(self, pid: int) -> bool:
        with self._lock:
            j = self._jobs.get(pid)
            return j is not None and time.monotonic() - j.last_seen <= GONE_S

    def wait_registered(self, pid: int, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not self.registered(pid):
            if time.monotonic() >= end:
                return False
            time.sleep(0.1)
        return True

    def request_trace(self, pid: int, path: str, iterations: int | None = None, duration_ms: int | None = None,
                      with_stack: bool = False, record_shapes: bool = False, start_iteration: int | None = None,
                      start_roundup: int = 1, start_time_ms: int | None = None, warmup_s: int = 0) -> Window:
        """Hands the job a trace config at its next poll (within POLL_S). Raises KeyError when the
        job has not registered, RuntimeError when a config is already waiting for it. By default the
        window starts at the job's next optimizer step; start_iteration, start_roundup,
        start_time_ms, warmup_s: trace_config."""
        config = trace_config(path, iterations, duration_ms, start_roundup=start_roundup, with_stack=with_stack,
                              record_shapes=record_shapes, start_iteration=start_iteration,
                              start_time_ms=start_time_ms, warmup_s=warmup_s)
        with self._lock:
            j = self._jobs.get(pid)
            if j is None or time.monotonic() - j.last_seen > GONE_S:
                raise KeyError(pid)
            if j.pending:
                raise RuntimeError(f"a trace config already waits for process {pid}")
            j.pending = config
        return Window(pid=pid, path=trace_file(path, pid), config=config)

    def withdraw(self, pid: int) -> bool:
        """Takes back the config waiting for the job (True), False when none waits (handed over)."""
        with self._lock:
            j = self._jobs.get(pid)
            if j is None or not j.pending:
                return False
            j.pending = ""
            return True

    def handed(self, pid: int) -> float:
        """When the job took its last config (monotonic), 0.0 if it has not."""
        with self._lock:
            j = self._jobs.get(pid)
            return j.handed_at if j is not None and not j.pending else 0.0

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()

    def __enter__(self) -> KinetoEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the endpoint's thread ------------------------------------------------------------------

    def _serve(self) -> None:
        space = socket.CMSG_SPACE(UCRED.size)
        while not self._stop.is_set():
            try:
                data, anc, _flags, addr = self.sock.recvmsg(MAX_DATAGRAM, space)
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.1)
                continue
            try:
                self._handle(data, anc, addr)
            except Exception as e:  # noqa: BLE001 - one bad datagram never ends the endpoint
                self.log.append(f"bad message: {type(e).__name__}: {e}")

    def _sender(self, anc: list) -> tuple[int, int] | None:
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= UCRED.size:
                pid, uid, _gid = UCRED.unpack_from(data)
                return pid, uid
        return None

    def _handle(self, data: bytes, anc: list, addr: object) -> None:
        msg = decode(data)
        cred = self._sender(anc)
        if msg is None or cred is None or not isinstance(addr, (str, bytes)) or not addr:
            return
        kind, payload = msg
        sender_pid, sender_uid = cred
        if sender_uid != self.uid:
            self.refused += 1
            return
        reply_to = addr.encode("latin-1") if isinstance(addr, str) else addr
        now = time.monotonic()
        if kind == "ctxt" and len(payload) >= CONTEXT.size:
            gpu, pid, jobid = CONTEXT.unpack_from(payload)
            if pid != sender_pid:
                self.refused += 1
                return
            with self._lock:
                j = self._job(pid, jobid, now)
                j.gpu, j.client = gpu, _name(reply_to)
                count = sum(1 for o in self._jobs.values() if o.jobid == jobid and o.gpu == gpu)
            self._send(reply_to, "ctxt", struct.pack("=i", count))
        elif kind == "req" and len(payload) >= REQUEST.size:
            ctype, n, jobid = REQUEST.unpack_from(payload)
            if not 1 <= n <= MAX_PIDS or len(payload) < REQUEST.size + 4 * n:
                return
            pids = struct.unpack_from(f"={n}i", payload, REQUEST.size)
            if pids[0] != sender_pid:
                self.refused += 1
                return
            config = ""
            with self._lock:
                j = self._job(pids[0], jobid, now)
                j.pids, j.client, j.asks = tuple(pids), _name(reply_to), j.asks + 1
                first = j.asks == 1
                if ctype & CONFIG_ACTIVITIES and j.pending and not first:
                    config, j.pending, j.handed_at = j.pending, "", now
            if first:  # (registered, not answered: the module's docstring says why)
                return
            if config:
                self.log.append(f"config handed to {pids[0]}")
            self._send(reply_to, "req", config.encode())

    def _job(self, pid: int, jobid: int, now: float) -> KinetoJob:
        j = self._jobs.get(pid)
        if j is None:
            j = self._jobs[pid] = KinetoJob(pid=pid, jobid=jobid, first_seen=now)
        j.last_seen = now
        return j

    def _send(self, addr: bytes, kind: str, payload: bytes) -> None:
        try:
            self.sock.sendto(encode(kind, payload), addr)
        except OSError as e:  # (the job went away, or its socket is full: it asks again in 5 s)
            self.log.append(f"send failed: {e}")


def _name(addr: bytes) -> str:
    return addr.lstrip(b"\0").split(b"\0", 1)[0].decode("ascii", "replace")
