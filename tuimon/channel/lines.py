"""Which frame of a stack names the loop's line, and which its context (issue 43 item 4): one rule
for the probe's line sampler (probe/sampler.py LineNames.where: the hot lines, and the now line
and stall words through probe/present.py) and for py-spy's stacks read from outside
(sources/pyspy.py); channel/_sampler.c walks the same way in C. A frame's code is one of:

- OWN: the job's own code;
- LIBRARY: an installed library's (site-packages, dist-packages: transformers, lightning, accelerate);
- SKIPPED: passed through, never named (tuimon's, torch's, the standard library's, `<string>`);
- IMPORTING: the import system's (`<frozen importlib...>`).

The line named is the innermost frame that is OWN or LIBRARY; a LIBRARY line's context is the
job's own innermost frame outside it (a loop a library drives spends its time in the library, not
at the job's one line that called it). A library's line under an import is not named: the line
that imports it is, outside the import."""

from __future__ import annotations

from collections.abc import Iterable

OWN, LIBRARY, SKIPPED, IMPORTING = 0, 1, 2, 3
IMPORT = "<frozen importlib"  # (the import system's frames: IMPORTING)
CONTEXT_FRAMES = 200  # frames walked out from a library's line to find the job's own line, at most


def pick(kinds: Iterable[int]) -> tuple[int | None, int | None]:
    """(the index of the frame whose line is named, the index of its context's frame or None) in a
    stack's frames' kinds, innermost first; (None, None) where no frame is OWN or LIBRARY. kinds is
    read only as far as the rule needs (a generator over frames stops early)."""
    hot: int | None = None
    n = 0
    for k, kind in enumerate(kinds):
        if kind == IMPORTING:  # (a library's line found so far runs under an import: not named)
            hot, n = None, 0
        elif hot is None and kind != SKIPPED:
            hot = k
            if kind == OWN:
                return hot, None
        elif kind == OWN:
            return hot, k
        elif hot is not None:
            n += 1
            if n >= CONTEXT_FRAMES:
                break
    return hot, None
