"""The job's metadata in its segment's header: a typed JobMeta whose encoding cuts the command line
first and never the fields the monitor acts on; validated once on read."""

import json
import os
import subprocess
import sys

from tests.conftest import ROOT, seg_path, tuimon_cmd, wait_for
from tuimon.channel import SegmentReader, SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.meta import JobMeta

PLANTED_WAIT = str(ROOT / "tests" / "workloads" / "planted_wait.py")


def hydra_overrides(n_bytes: int) -> list[str]:
    """Hydra-style overrides, about n_bytes of them."""
    out, k = [], 0
    while sum(len(a) + 1 for a in out) < n_bytes:
        out.append(f"model.encoder.layers.{k}.attention.dropout=0.{k % 10}")
        k += 1
    return out


KEPT = dict(rank=3, world_size=4, local_rank=1, capture_kind="nsys", nsys_session="tuimon-1234-abcd",
            job_log="/tmp/tuimon-0/job-x.log", hot_path="c")


def test_a_long_command_line_is_cut_first_and_the_rank_stays():
    argv = ("python", "train.py", *hydra_overrides(8192))
    meta = JobMeta(argv=argv, cwd="/work", host="node-7", nsys_start_args=("--sample=none",), **KEPT)
    raw = meta.encode()
    assert len(raw) <= L.META_CAPACITY
    back = JobMeta.decode(raw)
    assert {k: getattr(back, k) for k in KEPT} == KEPT
    assert (back.cwd, back.host, back.nsys_start_args) == ("/work", "node-7", ("--sample=none",))
    kept = len(back.argv)
    assert 10 < kept < len(argv) and back.argv == argv[:kept] and back.argv_cut == len(argv) - kept
    assert back.command.endswith(f" [+{len(argv) - kept} arguments cut]")
    assert back.note is None
    # as many arguments as fit: one more does not
    assert len(JobMeta(argv=argv[:kept + 1], cwd="/work", host="node-7", nsys_start_args=("--sample=none",),
                       **KEPT).encode(10**6)) > L.META_CAPACITY


def test_every_long_field_is_cut_before_a_kept_one():
    """Long descriptive fields go after argv, in CUT_ORDER; kept strings are bounded, so they fit."""
    huge = "x" * 5000
    meta = JobMeta(argv=(huge,), cwd="/" + huge, host=huge, python="3.11.9", cuda_visible_devices=huge,
                   nsys_start_args=(huge,), **{**KEPT, "job_log": "/tmp/" + "j" * 3000})
    back = JobMeta.decode(meta.encode())
    assert (back.rank, back.world_size, back.local_rank, back.nsys_session) == (3, 4, 1, "tuimon-1234-abcd")
    assert back.argv == () and back.argv_cut == 1
    assert back.job_log == ("/tmp/" + "j" * 3000)[:2048]  # bounded, never dropped
    assert back.python == "3.11.9" and back.cwd is None and back.nsys_start_args == ()
    assert "nsys_start_args, cwd, cuda_visible_devices, host" in back.note and "job_log" in back.note


def test_unreadable_or_wrong_metadata_gives_defaults_and_says_so():
    assert JobMeta.decode(b"\xff{not json").note.startswith("the job's metadata is unreadable")
    assert JobMeta.decode(b"[1, 2]") == JobMeta(note="the job's metadata is a JSON list, not an object: defaults shown")
    bad = JobMeta.decode(json.dumps({"rank": "3", "world_size": 4, "argv": ["a", 5], "launched_by_tuimon": 1,
                                     "local_rank": -1}).encode())
    assert (bad.rank, bad.world_size, bad.argv, bad.local_rank, bad.launched_by_tuimon) == (None, 4, (), None, False)
    assert bad.note == "not readable in the job's metadata: rank, local_rank, argv, launched_by_tuimon"
    # what an older tuimon wrote for a command line too long for the header
    assert "older tuimon" in JobMeta.decode(b'{"truncated": true}').note


def test_the_reader_validates_once_and_the_writer_never_overflows():
    argv = ("python", "train.py", *hydra_overrides(20_000))
    w = SegmentWriter.create(JobMeta(argv=argv, rank=0, world_size=2), 64)
    try:
        with SegmentReader(w.path) as r:
            meta = r.info.meta
            assert isinstance(meta, JobMeta) and (meta.rank, meta.world_size) == (0, 2)
            assert meta.argv == argv[:len(meta.argv)] and meta.argv_cut == len(argv) - len(meta.argv)
    finally:
        w.unlink()


def test_attach_shows_rank_and_world_size_of_a_job_with_an_8_kb_command_line(shm_dir):
    """A real training loop under `tuimon run` with Hydra-style overrides (8 KB) and RANK=3 WORLD_SIZE=4:
    the rank, world size and the start of the command line, marked as cut."""
    overrides = hydra_overrides(8192)
    env = dict(os.environ, RANK="3", WORLD_SIZE="4", LOCAL_RANK="3")
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED_WAIT, 2000, 0.02, 0.004,
                                      *overrides), stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert job.stdout.readline().strip() == "training"
        wait_for(lambda: SegmentReader(seg_path(shm_dir, job.pid)).steps >= 3, 60, "steps")
        p = subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--json"), capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert (doc["rank"], doc["world_size"], doc["local_rank"]) == (3, 4, 3)
        argv = doc["argv"]
        assert argv[:5] == [sys.executable, PLANTED_WAIT, "2000", "0.02", "0.004"] and argv[5:] == overrides[:len(argv) - 5]
        assert doc["argv_cut"] == len(overrides) - (len(argv) - 5) > 0
        ls = subprocess.run(tuimon_cmd("ls"), capture_output=True, text=True, timeout=60)
        assert f"{job.pid}" in ls.stdout and "3/4" in ls.stdout
    finally:
        job.kill()
        job.wait()
