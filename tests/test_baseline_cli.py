"""`tuimon baseline save/show` and `--baseline` on the command line: what each refuses, in words."""

import subprocess

from tests.conftest import ROOT, tuimon_cmd

H100 = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")


def tm(*args, timeout=60):
    return subprocess.run(tuimon_cmd(*args), capture_output=True, text=True, timeout=timeout)


def test_save_from_a_recording_then_show_and_use_it_in_a_replay_and_an_export(tmp_path):
    out = str(tmp_path / "b.json")
    p = tm("baseline", "save", "--recording", H100, "-o", out)
    assert p.returncode == 0, p.stderr
    assert "GPU: NVIDIA H100 80GB HBM3" in p.stdout and f"saved to {out}" in p.stdout
    shown = tm("baseline", "show", out)
    assert shown.returncode == 0 and shown.stdout.splitlines()[:3] == p.stdout.splitlines()[:3]
    again = tm("baseline", "save", "--recording", H100, "-o", out)
    assert again.returncode == 2 and "exists: --force" in again.stderr
    assert tm("baseline", "save", "--recording", H100, "-o", out, "--force").returncode == 0


def test_what_is_refused(tmp_path, sleeper):
    out = str(tmp_path / "b.json")
    p = tm("baseline", "save", 2**22 + 7, "-o", out)
    assert p.returncode == 2 and "no process with PID" in p.stderr
    p = tm("baseline", "save", sleeper.pid, "-o", out, "--seconds", 1)  # a process with no channel
    assert p.returncode == 1 and "no baseline saved: only 0 steps seen" in p.stderr
    p = tm("baseline", "save", "--recording", str(tmp_path / "none.jsonl"), "-o", out)
    assert p.returncode == 2 and "cannot read" in p.stderr and "No such file" in p.stderr
    (tmp_path / "junk.json").write_text("{}")
    junk = ("--baseline", str(tmp_path / "junk.json"))
    for args in (("attach", sleeper.pid, *junk), ("replay", H100, *junk), ("export", "--port", 0, *junk),
                 ("run", *junk, "--", "true")):
        p = tm(*args)
        assert p.returncode == 2 and "junk.json is not a tuimon baseline" in p.stderr, (args, p.stderr)
    p = tm("baseline", "show", str(tmp_path / "junk.json"))
    assert p.returncode == 2 and "is not a tuimon baseline" in p.stderr
    assert tm("baseline", "save", "--recording", H100, "-o", out).returncode == 0
    p = tm("run", "--headless", "--baseline", out, "--", "true")
    assert p.returncode == 2 and "--headless runs no monitor" in p.stderr
    p = tm("attach", sleeper.pid, "--once", "--json", "--baseline", out)  # no channel: nothing to compare, rc 0
    assert p.returncode == 0 and '"state": "too few steps"' in p.stdout
