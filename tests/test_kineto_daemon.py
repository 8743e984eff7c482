"""tuimon as Kineto's local "dynolog" endpoint (capture/kineto_daemon.py, issue 41): the protocol
against a client written here from Kineto's structs, and a real CPU torch loop under
KINETO_USE_DAEMON=1 whose trace, asked for through the real endpoint, arrives and is summarized."""

from __future__ import annotations

import glob
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import tuimon_cmd
from tuimon.capture import kineto_daemon as K
from tuimon.capture.summary import summarize
from tuimon.cli.launch import kineto_env
from tuimon.model import CaptureStatus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _name() -> str:
    return f"tuimon-test-{uuid.uuid4().hex[:12]}"


class Client:
    """What Kineto's IpcFabricConfigClient does: its own abstract name, datagrams to the endpoint."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(K.abstract_address("dynoconfigclient" + str(uuid.uuid4())))
        self.sock.settimeout(5)

    def ask(self, kind: str, payload: bytes) -> tuple[str, bytes] | None:
        self.sock.sendto(K.encode(kind, payload), K.abstract_address(self.endpoint))
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return None
        return K.decode(data)

    def req(self, pids: list[int], ctype: int = K.CONFIG_EVENTS | K.CONFIG_ACTIVITIES) -> tuple[str, bytes] | None:
        return self.ask("req", K.REQUEST.pack(ctype, len(pids), 0) + struct.pack(f"={len(pids)}i", *pids))

    def close(self) -> None:
        self.sock.close()


def test_messages_have_kinetos_layout():
    assert K.METADATA.size == 40  # size_t size; char type[32]
    assert K.CONTEXT.size == 16 and K.REQUEST.size == 16
    assert K.decode(K.encode("req", b"abc")) == ("req", b"abc")
    assert K.decode(b"short") is None
    assert K.decode(K.encode("req", b"abc")[:-1]) is None  # (a size that does not match the payload)
    assert K.abstract_address("dynolog") == b"\0dynolog\0"


def test_config_lines_and_trace_file():
    c = K.trace_config("/x/t.json", iterations=7)
    assert "ACTIVITIES_LOG_FILE=/x/t.json" in c.splitlines() and "ACTIVITIES_ITERATIONS=7" in c.splitlines()
    assert "PROFILE_START_ITERATION_ROUNDUP=1" in c.splitlines() and "PROFILE_WITH_STACK=false" in c.splitlines()
    d = K.trace_config("/x/t.json", duration_ms=300)
    assert "ACTIVITIES_DURATION_MSECS=300" in d.splitlines() and "ACTIVITIES_WARMUP_PERIOD_SECS=0" in d.splitlines()
    for bad in ({"iterations": 1, "duration_ms": 1}, {}):
        with pytest.raises(ValueError):
            K.trace_config("/x/t.json", **bad)
    with pytest.raises(ValueError):
        K.trace_config("/x/t.json\nACTIVITIES_LOG_FILE=/etc/x.json", iterations=1)
    assert K.trace_file("/x/t.json", 42) == "/x/t_42.json"


def test_registration_config_once_and_refusals():
    name = _name()
    with K.KinetoEndpoint(name) as ep:
        c = Client(name)
        try:
            me = os.getpid()
            c.sock.settimeout(0.5)
            assert c.req([me, os.getppid()]) is None  # registered, its first request not answered
            assert ep.registered(me) and ep.jobs()[0].pids == (me, os.getppid())
            assert c.req([me, os.getppid()]) == ("req", b"")  # nothing to do
            c.sock.settimeout(5)
            assert c.ask("ctxt", K.CONTEXT.pack(0, me, 0)) == ("ctxt", struct.pack("=i", 1))
            w = ep.request_trace(me, "/tmp/t.json", iterations=3)
            assert w.path == f"/tmp/t_{me}.json"
            with pytest.raises(RuntimeError):
                ep.request_trace(me, "/tmp/t.json", iterations=3)  # one waiting config at a time
            assert c.req([me], K.CONFIG_EVENTS) == ("req", b"")  # (a trace is active: no activities asked)
            assert c.req([me]) == ("req", w.config.encode())
            assert ep.handed(me) > 0
            assert c.req([me]) == ("req", b"")  # handed once
            assert c.req([me + 1]) is None  # a pid that is not the sender's: no answer
            assert ep.refused == 1 and not ep.registered(me + 1)
            with pytest.raises(KeyError):
                ep.request_trace(me + 1, "/tmp/t.json", iterations=3)
        finally:
            c.close()


def test_a_held_name_is_never_taken_over():
    name = _name()
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    holder.bind(K.abstract_address(name))  # (as a real dynolog binds it)
    try:
        with pytest.raises(K.EndpointTaken, match="does not take it over"):
            K.KinetoEndpoint(name)
    finally:
        holder.close()
    K.KinetoEndpoint(name).close()  # (free again: it starts)


def test_tuimon_run_turns_kinetos_daemon_client_on_only_when_asked():
    env: dict = {"TUIMON_KINETO": "1"}
    kineto_env(env)
    assert env == {"TUIMON_KINETO": "1", "KINETO_USE_DAEMON": "1", "KINETO_LOG_LEVEL": "6"}
    env = {"TUIMON_KINETO": "1", "KINETO_LOG_LEVEL": "1"}
    kineto_env(env)
    assert env == {"TUIMON_KINETO": "1", "KINETO_USE_DAEMON": "1", "KINETO_LOG_LEVEL": "1"}  # (the job's own level)
    for own in ({}, {"TUIMON_KINETO": "0"}, {"TUIMON_KINETO": "1", "KINETO_USE_DAEMON": ""}):
        env = dict(own)
        kineto_env(env)
        assert env == own


def _torch_lib() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    found = glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    return found[0] if found else None


def _has_daemon_client(lib: str) -> bool:
    """Whether this torch build carries Kineto's daemon client (its endpoint name prefix)."""
    with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return m.find(b"dynoconfigclient") >= 0


def _need_daemon_client() -> None:
    lib = _torch_lib()
    if lib is None:
        pytest.skip("no torch here (or no libtorch_cpu.so in it)")
    if not _has_daemon_client(lib):
        pytest.skip("this torch build has no Kineto daemon client (no 'dynoconfigclient' in libtorch_cpu.so)")


def _endpoint() -> K.KinetoEndpoint:
    try:
        return K.KinetoEndpoint()
    except K.EndpointTaken as e:
        pytest.skip(f"the host's endpoint is held: {e}")


def test_a_real_loop_traced_through_the_endpoint(tmp_path):
    _need_daemon_client()
    ep = _endpoint()
    env = dict(os.environ, KINETO_USE_DAEMON="1", KINETO_LOG_LEVEL="6")
    job = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "workloads", "small_ops.py"),
                            "--seconds", "120"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert job.stdout is not None
        assert job.stdout.readline().strip() == "training"  # (steps from now: a window of steps can start)
        assert ep.wait_registered(job.pid, 60), f"the job never asked the endpoint: {ep.log}"
        time.sleep(0.5)
        w = ep.request_trace(job.pid, str(tmp_path / "kineto.json"), iterations=5)
        end = time.monotonic() + 90
        while not os.path.exists(w.path):
            assert job.poll() is None, "the job ended"
            assert time.monotonic() < end, f"no trace within 90 s (handed: {ep.handed(job.pid)}; {ep.log})"
            time.sleep(0.1)
        assert ep.handed(job.pid) > 0
        result = summarize(CaptureStatus(seq=1, state="done", kind="kineto", first_step=1, last_step=5, path=w.path))
        assert result.state == "done", result.error
        text = "\n".join(result.lines)
        assert "top operators by self time on the host:" in text and "aten::" in text, text
    finally:
        job.kill()
        out = job.communicate()[0]
        ep.close()
    assert "dyno" not in out and "INFO:" not in out, out  # (KINETO_LOG_LEVEL=6: nothing of Kineto's said)


def test_tuimon_capture_takes_a_tuimon_run_jobs_window_through_kineto(tmp_path, monkeypatch):
    """`tuimon run` starts the job in daemon mode; `tuimon capture` serves the endpoint, hands the
    config, and summarizes the trace Kineto wrote; the job's output holds none of Kineto's lines."""
    _need_daemon_client()
    _endpoint().close()  # (skipped when the host's endpoint is held)
    monkeypatch.setenv("TUIMON_KINETO", "1")
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "captures"))
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, os.path.join(ROOT, "tests", "workloads",
                                      "small_ops.py"), "--seconds", "120"), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "training"
        time.sleep(3)  # (past the first steps: the probe has seen the optimizer step)
        p = subprocess.run(tuimon_cmd("capture", job.pid, "--steps", 5, "--wait", "--json"), capture_output=True,
                           text=True, timeout=150)
        assert p.returncode == 0, p.stderr
        st = json.loads(p.stdout)
        assert st["kind"] == "kineto" and st["state"] == "done", st
        assert st["last_step"] - st["first_step"] + 1 == 5
        assert st["path"].startswith(str(tmp_path / "captures")) and st["path"].endswith(f"_{job.pid}.json")
        assert any("aten::" in line for line in st["summary"]["lines"]), st["summary"]
        assert f"asked PID {job.pid} for a kineto capture of 5 steps" in p.stderr, p.stderr
    finally:
        job.kill()
        out = job.communicate()[0]
    assert "dyno" not in out and "INFO:" not in out and "USDT:" not in out, out
