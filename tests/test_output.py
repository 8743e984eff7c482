"""`-o PATH` of every writer (trace, record, baseline save): a FIFO, a device or a symlink is written
through or refused, never replaced; a regular file is replaced whole, only with --force; what cannot
be written is refused with exit code 2 (issue 43, items 8 and 27). Real commands."""

import json
import os
import stat
import subprocess
import threading

import pytest

from tests.conftest import ROOT, tuimon_cmd
from tuimon.cli import output

FIXTURE = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")
NO_SUCH_DEVICE = os.makedev(240, 0)  # (a number for local use: no driver has it, so nothing opens)


@pytest.fixture(params=["trace", "record", "baseline"])
def writer(request):
    """The writer's argv, given -o OUT and more options."""
    if request.param == "trace":
        return lambda out, *more: ("trace", "--recording", FIXTURE, "-o", out, *more)
    if request.param == "baseline":
        return lambda out, *more: ("baseline", "save", "--recording", FIXTURE, "-o", out, *more)
    pid = request.getfixturevalue("sleeper").pid
    return lambda out, *more: ("record", pid, "-o", out, "--seconds", 0.5, "--interval", 0.2, *more)


@pytest.fixture
def here(tmp_path):
    """A folder of the test's own outputs alone (tmp_path holds the test's segment folder too)."""
    d = tmp_path / "out"
    d.mkdir()
    return d


def tm(*args, cwd=None):
    return subprocess.run(tuimon_cmd(*args), capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
                          cwd=cwd)


def first_json(data: bytes):
    return json.loads(data.decode().splitlines()[0])


class FifoReader(threading.Thread):
    """Reads a FIFO to its end (its open waits for the writer)."""

    def __init__(self, path):
        super().__init__(daemon=True)  # (never joined if nothing ever opens the FIFO)
        self.path, self.data = path, None

    def run(self):
        with open(self.path, "rb") as f:
            self.data = f.read()


@pytest.mark.parametrize("via_link", [False, True])
def test_a_fifo_is_written_through(here, writer, via_link):
    fifo = here / "fifo"
    os.mkfifo(fifo)
    out = fifo
    if via_link:
        out = here / "link"
        out.symlink_to(fifo)
    reader = FifoReader(fifo)
    reader.start()
    p = tm(*writer(out))
    reader.join(30)
    assert p.returncode == 0, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and reader.data and first_json(reader.data)
    assert not via_link or os.readlink(out) == str(fifo)
    assert sorted(os.listdir(here)) == sorted({"fifo", out.name})


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_a_character_device_is_written_through(here, writer, force):
    """A twin of /dev/null (char 1:3) made here: the same rule as the real one, without risking it."""
    null = here / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    p = tm(*writer(null, *force))
    assert p.returncode == 0, p.stderr
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert os.listdir(here) == ["null"]


def test_dev_null_is_never_replaced(writer):
    before = os.stat("/dev/null")
    p = tm(*writer("/dev/null", "--force"))
    after = os.stat("/dev/null")
    assert p.returncode == 0, p.stderr
    assert stat.S_ISCHR(after.st_mode) and (after.st_rdev, after.st_ino) == (before.st_rdev, before.st_ino)


def test_dev_stdout_holds_the_data_alone(writer):
    """Through a pipe: the words that say what was written go to standard error."""
    p = tm(*writer("/dev/stdout"))
    assert p.returncode == 0, p.stderr
    assert [json.loads(line) for line in p.stdout.splitlines()]
    assert ("wrote /dev/stdout" in p.stderr or "saved to /dev/stdout" in p.stderr
            or "cycles to /dev/stdout" in p.stderr), p.stderr


def test_a_symlink_writes_through_to_its_regular_file_with_force(here, writer):
    target, link = here / "target.json", here / "link.json"
    target.write_text("precious\n")
    link.symlink_to(target)
    p = tm(*writer(link))
    assert p.returncode == 2 and f"{link} exists: --force to overwrite it" in p.stderr, p.stderr
    assert target.read_text() == "precious\n"
    p = tm(*writer(link, "--force"))
    assert p.returncode == 0, p.stderr
    assert os.readlink(link) == str(target) and first_json(target.read_bytes())
    assert sorted(os.listdir(here)) == ["link.json", "target.json"]


def test_a_symlink_to_nothing_is_refused(here, writer):
    link = here / "link.json"
    link.symlink_to(here / "missing.json")
    for force in ([], ["--force"]):
        p = tm(*writer(link, *force))
        assert p.returncode == 2 and f"{link} is a symlink to {here / 'missing.json'}, which does not exist" \
            in p.stderr, p.stderr
    assert os.listdir(here) == ["link.json"] and os.readlink(link) == str(here / "missing.json")


def test_what_cannot_be_written_is_refused_with_exit_code_2(here, writer):
    folder, plain = here / "folder", here / "plain"
    folder.mkdir()
    plain.write_text("x")
    block = here / "block"
    os.mknod(block, stat.S_IFBLK | 0o600, NO_SUCH_DEVICE)
    for out, says in (("", "-o is empty: a file's name, or - for standard output"),
                      (folder, f"{folder} is a folder: -o names a file"),
                      ("/nonexistent/x", "cannot write /nonexistent/x: No such file or directory"),
                      (plain / "x", f"cannot write {plain / 'x'}: Not a directory"),
                      (block, f"{block} is a block device: -o writes a file, a FIFO or a character device")):
        for force in ([], ["--force"]):
            p = tm(*writer(out, *force), cwd=here)  # (-o '': nothing made where it runs either)
            assert p.returncode == 2 and p.stderr.startswith(f"tuimon: {says}"), (out, force, p.stderr)
            assert p.stderr.count("\n") == 1, p.stderr  # (one line: no traceback)
    assert os.listdir(folder) == [] and stat.S_ISBLK(os.lstat(block).st_mode)
    assert sorted(os.listdir(here)) == ["block", "folder", "plain"]


def test_a_regular_file_is_replaced_whole_or_not_at_all(here):
    path = here / "x.json"
    path.write_text("old")
    with pytest.raises(output.OutputError, match="exists: --force"), output.opened(str(path), force=False):
        pass
    with pytest.raises(RuntimeError), output.opened(str(path), force=True) as f:
        f.write("half")
        raise RuntimeError("the writer failed")
    assert path.read_text() == "old" and os.listdir(here) == ["x.json"]
    with output.opened(str(path), force=True) as f:
        f.write("new")
    assert path.read_text() == "new" and os.listdir(here) == ["x.json"]
