"""What a job says about itself in its segment's header (argv, rank, nsys session, ...): one typed,
frozen record, encoded as JSON into the header's metadata area and validated once when read.

The area is small (layout.META_CAPACITY bytes): the encoding cuts the command line first (whole
arguments from the end, counted in argv_cut), then the other descriptive fields (see CUT_ORDER),
and never the fields the monitor acts on (KEPT: rank, world size, local rank, capture kind, the
nsys session, the job log, the hot path), whose strings are bounded so that they always fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any

from . import layout as L

KEPT = ("rank", "world_size", "local_rank", "capture_kind", "nsys_session", "job_log", "hot_path")
CUT_ORDER = ("nsys_start_args", "cwd", "cuda_visible_devices", "host", "python")  # after argv, in this order
KEPT_TEXT_BYTES = {"capture_kind": 32, "hot_path": 32, "nsys_session": 256, "job_log": 2048}
_INT_FIELDS = ("rank", "world_size", "local_rank", "argv_cut")
_TEXT_FIELDS = ("cwd", "host", "python", "cuda_visible_devices", "capture_kind", "nsys_session", "hot_path",
                "job_log", "note")
_LIST_FIELDS = ("argv", "nsys_start_args")
_BOOL_FIELDS = ("launched_by_tuimon", "loaded_mid_run")


@dataclass(frozen=True, kw_only=True)
class JobMeta:
    argv: tuple[str, ...] = ()
    argv_cut: int = 0  # arguments left out at the end of argv (the header had no room for them)
    cwd: str | None = None
    host: str | None = None
    python: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    cuda_visible_devices: str | None = None
    launched_by_tuimon: bool = False
    capture_kind: str = "torch.profiler"  # what a capture window takes: 'nsys' or 'torch.profiler'
    nsys_session: str | None = None  # under `tuimon run --nsys`: the session the monitor drives windows in
    nsys_start_args: tuple[str, ...] = ()  # its `nsys start` options (--nsys-args)
    hot_path: str | None = None  # 'c', or 'python' where the C extension is missing
    job_log: str | None = None  # where `tuimon run` sends the job's output
    loaded_mid_run: bool = False  # the probe was loaded into the running job (`tuimon inject`): steps from the load on
    note: str | None = None  # what was cut when writing, or wrong when reading

    @property
    def command(self) -> str:
        """The command line, with a mark where it was cut."""
        cut = f" [+{self.argv_cut} argument{'s' if self.argv_cut != 1 else ''} cut]" if self.argv_cut else ""
        return " ".join(self.argv) + cut

    # -- writing ------------------------------------------------------------------------------------

    def encode(self, capacity: int = L.META_CAPACITY) -> bytes:
        """JSON of at most capacity bytes: argv cut first, then CUT_ORDER, never KEPT."""
        meta = self._bounded()
        raw = _dump(meta)
        if len(raw) <= capacity:
            return raw
        whole = len(meta.argv)
        lo, hi = 0, whole  # the most arguments that fit: lo fits (or is 0), hi + 1 does not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(_dump(_cut_argv(meta, mid, whole))) <= capacity:
                lo = mid
            else:
                hi = mid - 1
        meta = _cut_argv(meta, lo, whole)
        cut: list[str] = []
        for name in CUT_ORDER:
            raw = _dump(meta)
            if len(raw) <= capacity:
                break
            blank: dict[str, Any] = {name: () if name == "nsys_start_args" else None}
            meta = replace(meta, **blank)
            cut.append(name)
        if cut:
            meta = _noted(meta, f"left out to fit the segment's header: {', '.join(cut)}")
        raw = _dump(meta)
        if len(raw) > capacity:  # (KEPT is bounded well under the capacity: only a too small capacity)
            raise ValueError(f"job metadata needs {len(raw)} bytes, the header holds {capacity}")
        return raw

    def _bounded(self) -> JobMeta:
        changes: dict[str, Any] = {}
        for name, limit in KEPT_TEXT_BYTES.items():
            v = getattr(self, name)
            if isinstance(v, str) and len(v.encode("utf-8", "replace")) > limit:
                changes[name] = v.encode("utf-8", "replace")[:limit].decode("utf-8", "ignore")
        if not changes:
            return self
        return _noted(replace(self, **changes), f"cut to fit the segment's header: {', '.join(changes)}")

    # -- reading ------------------------------------------------------------------------------------

    @classmethod
    def decode(cls, raw: bytes) -> JobMeta:
        """The metadata of a segment (untrusted bytes): unreadable JSON gives the defaults and a
        note; a field of the wrong type its default, named in the note."""
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            return cls(note=f"the job's metadata is unreadable ({type(e).__name__}): defaults shown")
        if not isinstance(data, dict):
            return cls(note=f"the job's metadata is a JSON {type(data).__name__}, not an object: defaults shown")
        kwargs: dict = {}
        wrong: list[str] = []
        for name in _INT_FIELDS:
            v = data.get(name)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                kwargs[name] = v
            elif v is not None:
                wrong.append(name)
        for name in _TEXT_FIELDS:
            v = data.get(name)
            if isinstance(v, str):
                kwargs[name] = v[:4096]
            elif v is not None:
                wrong.append(name)
        for name in _LIST_FIELDS:
            v = data.get(name)
            if isinstance(v, list) and all(isinstance(a, str) for a in v):
                kwargs[name] = tuple(a[:4096] for a in v[:1024])
            elif v is not None:
                wrong.append(name)
        for name in _BOOL_FIELDS:
            v = data.get(name)
            if isinstance(v, bool):
                kwargs[name] = v
            elif v is not None:
                wrong.append(name)
        if data.get("truncated") is True:  # (an older tuimon replaced metadata too long for the header)
            wrong.append("all of it (cut by an older tuimon: its command line was too long)")
        meta = cls(**kwargs)
        return _noted(meta, f"not readable in the job's metadata: {', '.join(wrong)}") if wrong else meta


def _noted(meta: JobMeta, note: str) -> JobMeta:
    return replace(meta, note=f"{meta.note}; {note}" if meta.note else note)


def _cut_argv(meta: JobMeta, keep: int, whole: int) -> JobMeta:
    return replace(meta, argv=meta.argv[:keep], argv_cut=meta.argv_cut + whole - keep)


def _dump(meta: JobMeta) -> bytes:
    doc = {f.name: getattr(meta, f.name) for f in fields(meta)}
    doc = {k: list(v) if isinstance(v, tuple) else v for k, v in doc.items() if v is not None}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
