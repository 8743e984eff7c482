"""The sync-site walk (probe/anatomy.py Anatomy._site) fed a stack whose innermost frames are
tuimon's and torch's, nested: the site named is the first frame outside both, the user's line
(issue 42 item 10: the walk's `while` made `if` went unnoticed)."""

import mmap
import os
from types import SimpleNamespace

from tests.test_phases import BEAT_AT, HEAD_AT, RING_AT, STEPS_AT
from tuimon.channel import layout as L
from tuimon.channel import ring
from tuimon.probe import anatomy

TORCH = "/venv/lib/python3.11/site-packages/torch"


def frames(*where: tuple[str, int]):
    """A stack from the outermost (first) to the innermost (returned), as f_back links it."""
    f = None
    for path, line in where:
        f = SimpleNamespace(f_code=SimpleNamespace(co_filename=path), f_lineno=line, f_back=f)
    return f


def site_of(frame) -> str:
    m = mmap.mmap(-1, RING_AT + 1024 * L.RECORD_SIZE)
    names: dict[str, int] = {}
    a = anatomy.Anatomy(ring.RingWriter(m, RING_AT, 1024, HEAD_AT, STEPS_AT, BEAT_AT),
                        lambda n: names.setdefault(n, len(names) + 1))
    a.skip_frames_in(TORCH)
    nid = a._site(frame)
    return {v: k for k, v in names.items()}[nid]


def test_the_site_is_the_first_frame_outside_torch_and_tuimon():
    probe = os.path.join(os.path.dirname(anatomy.__file__), "hooks.py")
    channel = os.path.join(os.path.dirname(os.path.dirname(anatomy.__file__)), "channel", "ring.py")
    stack = frames(("/job/main.py", 3), ("/job/train.py", 41), (f"{TORCH}/nn/modules/module.py", 1700),
                   (f"{TORCH}/_tensor.py", 900), (channel, 10), (probe, 55), (f"{TORCH}/cuda/__init__.py", 20),
                   (probe, 60))
    assert site_of(stack).endswith("train.py:41")
    assert site_of(frames(("/job/train.py", 7))).endswith("train.py:7")  # (the caller's own frame)
    assert site_of(frames((probe, 1), (f"{TORCH}/x.py", 2))) == "?:0"  # nothing outside them: no site
