"""torch, seen with no change to the training code: data waits, steps and the step's phases.

- data: next() on any DataLoader iterator (the time the loop waits for a batch);
- forward: the outermost nn.Module calls of the loop thread. A global module hook slows every
  module call of the model, so it only runs for the first DISCOVER_STEPS steps, to find those
  outermost modules; then only they are timed, by their class's __call__ (one call each per step);
- backward: torch.autograd.backward (which Tensor.backward calls) / torch.autograd.grad;
- optimizer: the whole optimizer.step() call, torch's wrapper included (its record_function and the
  job's step hooks: a third of a small optimizer's step), from a wrapper around each optimizer
  class's step as torch hooks it (classes hooked before tuimon started get it when it starts). The
  lead optimizer's step ends the step;
- DataParallel: its forward as the forward phase; its replicate, scatter, parallel_apply (the loop
  waiting in the replicas' join) and gather as the step's dp.* values (data_parallel.py); the
  replicas' forwards, on DataParallel's threads, pass the probe's hooks at their first check;
- sync: the loop blocked in a device-to-host copy or wait on a CUDA tensor or device: .item(),
  .tolist(), .cpu(), .to() to the CPU, bool()/int()/float() of a tensor,
  torch.cuda.synchronize(), Event.synchronize(), Stream.synchronize(). Implicit syncs inside
  other ops (nonzero, boolean masks) are not caught.

Every wrapper calls the original and keeps its behaviour (results, exceptions). Under
torch.compile's tracing every wrapper and hook calls straight through (_compile_check), so
compiled code gets no op of tuimon's (dynamo may still start a frame at a wrapper)."""

from __future__ import annotations

import functools
import inspect
import os
import sys
import weakref
from collections.abc import Callable
from time import monotonic_ns as _now
from typing import TYPE_CHECKING, Any

from . import comm, copies, data_parallel, graphs, state
from .anatomy import BACKWARD, COPY, DATA, FORWARD, OPTIMIZER, SYNC
from .core import BACKWARD_CALL, FORWARD_CALL, Probe
from .marks import TIMES_FORWARD, mark

if TYPE_CHECKING:
    from .copies import Copies

DISCOVER_STEPS = 3
_CALL = "__call__"  # (where ModuleRoots times a root: its class's)
# class -> (its own __call__ or None, the wrapper ModuleRoots put there); weakly: fx makes a class per GraphModule
_class_calls: weakref.WeakKeyDictionary[type, tuple[Any, Any]] = weakref.WeakKeyDictionary()
_compiling: Callable[[], bool]  # torch.compiler.is_dynamo_compiling, bound by patch() (why: _compile_check); no
#   wrapper is in place before it is
_swaps: list[tuple[object, str, object, object]] = []  # (owner, name, original, wrapper)
_enabled = True  # set_enabled: wrappers put into classes as torch makes them stay; off, they only call through
_stepping = 0  # optimizer.step() calls open on the loop thread, timed by _timed_step (a nested one steps aside)


def _swap(owner: Any, name: str, wrapper: Any) -> None:
    """Put wrapper in place of owner.name, remembering the original (set_enabled can put it back; a
    class's own staticmethod is kept as one)."""
    own = vars(owner).get(name) if isinstance(owner, type) else None
    _swaps.append((owner, name, own if isinstance(own, staticmethod) else getattr(owner, name), wrapper))
    setattr(owner, name, wrapper)


def set_enabled(on: bool) -> None:
    """Every wrapper and hook in place (True) or the originals back (False): what a process
    without tuimon runs. For benchmarks that alternate the probe on and off in one process."""
    global _enabled
    _enabled = on
    for owner, name, orig, wrapper in _swaps:
        setattr(owner, name, wrapper if on else orig)
    ModuleRoots.set_enabled(on)
    comm_timing = getattr(state.probe, "comm", None)
    if comm_timing is not None:
        comm_timing.set_enabled(on)


def patch(torch: Any) -> None:
    global _compiling
    _compiling = _compile_check(torch)
    _patch_dataloader(torch)
    _patch_optimizer(torch)
    _patch_backward(torch)
    _patch_syncs(torch)
    _patch_compile(torch)
    graphs.patch(torch, _swap)
    comm.patch(torch, _swap, _compiling)
    data_parallel.patch(torch, _swap, _compiling)
    p = state.probe
    if p is not None:
        attach(p, torch)


def _compile_check(torch: Any) -> Any:
    """What every wrapper asks first: is torch.compile tracing this call (then it calls through)?
    torch.compiler.is_dynamo_compiling: one frame that returns False, which torch._dynamo folds to
    True as it does is_compiling (two frames and three lookups: ~7 wrapper calls a step, the
    probe's most frequent call). Under a non-strict torch.export, which runs the job's Python on fake
    tensors, the wrappers time what they see and call through as always."""
    compiler = getattr(torch, "compiler", None)
    return getattr(compiler, "is_dynamo_compiling", None) or getattr(compiler, "is_compiling", None) \
        or (lambda: False)


def attach(p: Probe, torch: Any) -> None:
    """Give this process's probe its torch-side helpers (forward roots, GPU timing)."""
    from .gpu_timing import GpuTiming

    p.anatomy.skip_frames_in(os.path.dirname(torch.__file__))
    if getattr(p, "roots", None) is None:
        # a job that has already compiled (a probe loaded mid-run): no global module hook, ever (dynamo
        # guards on them: the job's graphs would be recompiled); its compiled modules timed by their class
        p.roots = ModuleRoots(torch, p, discover=not (p.mid_run and _has_compiled()))
    if getattr(p, "ops", None) is None:
        from .ops import OpCounter
        from .sampler import LineNames

        try:
            p.ops = OpCounter(p, LineNames(p.intern).name_of)
        except Exception:  # noqa: BLE001 - a torch without dispatch modes: no op counts
            p.ops = None
    if getattr(p, "gpu", None) is None and torch.cuda.is_available():
        p.gpu = GpuTiming(torch, p.emit, p.intern, p.thread_id)
        p.copies = copies.Copies(p.emit, p.intern)
    dist = getattr(torch, "distributed", None)
    if getattr(p, "comm", None) is None and dist is not None and dist.is_available():
        p.comm = comm.CommTiming(torch, p.emit, p.intern, p.thread_id)
        p.comm.gpu = p.gpu
    if getattr(p, "dp", None) is None:
        p.dp = data_parallel.DataParallelTiming(torch, p.emit, p.intern, p.thread_id)
        p.dp.gpu = p.gpu


def _has_compiled() -> bool:
    """Whether the job has compiled anything with torch.compile (dynamo's own count of the frames it
    compiled; read, never imported: an eager optimizer imports torch._dynamo too)."""
    if "torch._dynamo" not in sys.modules:
        return False
    try:
        from torch._dynamo.utils import counters

        return counters["frames"].get("total", 0) > 0
    except Exception:  # noqa: BLE001 - a torch that keeps no counts: taken as compiled (the safe side)
        return True


# -- data -----------------------------------------------------------------------------------------


def _patch_dataloader(torch: Any) -> None:
    from torch.utils.data import dataloader  # (torch is fully imported when this runs)

    it = dataloader._BaseDataLoaderIter
    if getattr(it.__next__, "_tuimon", False):
        return
    orig_next = it.__next__

    def __next__(self: Any) -> Any:
        p = state.probe
        if p is None:
            return orig_next(self)
        workers = None
        if not getattr(self, "_tuimon_seen", False):  # a new iterator (epoch): say its worker count
            workers = getattr(self, "_num_workers", None)
            try:
                self._tuimon_seen = True
            except AttributeError:
                pass
        t0 = _now()
        p.data_start(t0, workers)
        try:
            return orig_next(self)
        finally:
            p.anatomy.data_wait(DATA, t0, _now())  # (the DATA phase left, a DATA_WAIT record)

    mark(__next__)
    _swap(it, "__next__", __next__)


# -- optimizer ------------------------------------------------------------------------------------


def _patch_optimizer(torch: Any) -> None:
    from torch.optim.optimizer import Optimizer

    orig_profile = Optimizer.profile_hook_step  # (torch wraps each optimizer class's step with it, once)
    if getattr(orig_profile, "_tuimon", False):
        return

    def profile_hook_step(func: Any) -> Any:
        return _timed_step(orig_profile(func))

    mark(profile_hook_step)
    _swap(Optimizer, "profile_hook_step", staticmethod(profile_hook_step))
    # classes hooked before tuimon started (a job that calls tuimon.instrument() after making its
    # optimizer): the same wrapper, put around the step torch hooked
    classes = [Optimizer]
    while classes:
        cls = classes.pop()
        classes += cls.__subclasses__()
        hooked = vars(cls).get("step")
        if getattr(hooked, "hooked", False) and not getattr(hooked, "_tuimon", False):
            _swap(cls, "step", _timed_step(hooked))


def _timed_step(hooked: Any) -> Any:
    """An optimizer class's step as torch hooked it (its record_function, pre hooks, step, post hooks),
    timed whole on the loop thread: the optimizer phase is the call the loop makes. An exception
    leaves the phase and ends no step (as the post hook, which it skips, did)."""

    @functools.wraps(hooked)  # (torch marks what it gets back `hooked`: a class is wrapped once)
    def step(*args: Any, **kwargs: Any) -> Any:
        global _stepping
        p = state.probe
        if not _enabled or p is None or _stepping or _compiling() or not p.anatomy.on_loop():
            return hooked(*args, **kwargs)
        a = p.anatomy
        a.enter(OPTIMIZER)
        _stepping = 1
        try:
            out = hooked(*args, **kwargs)
        finally:
            _stepping = 0
            a.exit(OPTIMIZER)
        if args:
            p.step(explicit=False, optimizer=args[0])
        return out

    mark(step)
    return step


# -- backward -------------------------------------------------------------------------------------


def _phase(orig: Any, phase: int) -> Callable[..., Any]:
    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _compiling():
            return orig(*args, **kwargs)
        p = state.probe
        if p is None:
            return orig(*args, **kwargs)
        anatomy = p.anatomy
        if anatomy.top == phase:  # (a backward inside a backward: the outer call times both)
            return orig(*args, **kwargs)
        anatomy.enter(phase)
        try:
            return orig(*args, **kwargs)
        finally:
            t = _now()
            if anatomy.on_loop():
                if p.comm is not None and p.comm.reducing:
                    p.comm.backward_done(p, t)  # DDP's wait for its reduction
                anatomy.exit(phase, t)
                if p.gpu is not None and p.gpu.measuring:
                    p.gpu.mark()  # the backward ended: its kernels are queued
                if p.source <= BACKWARD_CALL and phase == BACKWARD:
                    p.boundary(BACKWARD_CALL, t)  # a loop with no optimizer step: its backward ends the step
                p.work_seen = p.work_since_boundary = True

    mark(wrapper)
    return wrapper


def _patch_backward(torch: Any) -> None:
    import torch.autograd

    # (Tensor.backward calls torch.autograd.backward: wrapping it too would time each backward twice)
    for owner, name in ((torch.autograd, "backward"), (torch.autograd, "grad")):
        orig = getattr(owner, name)
        if not getattr(orig, "_tuimon", False):
            _swap(owner, name, _phase(orig, BACKWARD))


# -- syncs ----------------------------------------------------------------------------------------


def _waiting(p: Probe, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """fn blocks the loop until the GPU has caught up: the sync phase while it runs (what the
    step in progress shows, and a loop stuck on a kernel that never ends), then counted."""
    a = p.anatomy
    t0 = _now()
    a.enter(SYNC, t0)
    try:
        return fn(*args, **kwargs)
    finally:
        # Probe.synced(t0, now, timed=True) in one C call (the sync phase left, counted, its span kept),
        # without its frames: this runs where the GPU waits for the host (the sync's return), where
        # each Python frame costs ~1.5 us (caches cold); a walked one's wait ends where synced left the
        # clock (a.t: the sync phase left at its now), read only then
        weight = a.synced(t0, None, True)
        if weight:
            a.walk(sys._getframe(), weight, a.t - t0)
        gpu = p.gpu
        if gpu is not None and not gpu.anchored:
            gpu.after_sync()


def _copying(p: Probe, copies: Copies, fn: Any, src: Any, *args: Any, **kwargs: Any) -> Any:
    """fn copies src from the host to the GPU: the copy phase while the host is in it (the whole
    transfer from pageable memory; only queuing it from pinned memory with non_blocking=True)."""
    a = p.anatomy
    a.enter(COPY)
    try:
        return fn(*args, **kwargs)
    finally:
        a.exit(COPY)
        copies.host_to_device(src, kwargs.get("non_blocking", False))


def _tensor_sync(orig: Any) -> Any:
    """A Tensor method that waits for the GPU when the tensor is on it (.cpu() counts the bytes it
    brings back)."""
    counts_bytes = orig.__name__ == "cpu"

    @functools.wraps(orig)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _compiling():
            return orig(self, *args, **kwargs)
        p = state.probe
        if p is None or not self.is_cuda or not p.anatomy.on_loop():
            return orig(self, *args, **kwargs)
        result = _waiting(p, orig, self, *args, **kwargs)
        if counts_bytes and p.copies is not None:
            p.copies.device_to_host(self)
        return result

    mark(wrapper)
    return wrapper


def _tensor_to(orig: Any, device_class: Any) -> Any:
    """Tensor.to(): from the host to a CUDA device, a host-to-device copy; from the GPU, a sync when
    the result is on the CPU (known once it returns), with the bytes it brings back. The hottest
    wrapper (every .to() of the job, a batch's copies among them): the copy is timed in this frame,
    not through _copying, and a torch.device target (device_class) is read here, not by to_cuda."""

    @functools.wraps(orig)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _compiling():
            return orig(self, *args, **kwargs)
        p = state.probe
        if p is None:
            return orig(self, *args, **kwargs)
        a = p.anatomy
        if not a.on_loop():
            return orig(self, *args, **kwargs)
        c = p.copies
        if self.is_cuda:
            t0 = _now()
            result = orig(self, *args, **kwargs)
            if not getattr(result, "is_cuda", True):
                p.synced(t0, _now())
                if c is not None:
                    c.device_to_host(self)
            return result
        if c is None:
            return orig(self, *args, **kwargs)
        d: Any = kwargs.get("device", args[0] if args else None)  # (a torch.device, a str or a dtype)
        if not (d.type == "cuda" if d.__class__ is device_class else copies.to_cuda(d)):
            return orig(self, *args, **kwargs)
        a.enter(COPY)
        try:
            return orig(self, *args, **kwargs)
        finally:
            a.exit(COPY)
            c.host_to_device(self, kwargs.get("non_blocking", False))

    mark(wrapper)
    return wrapper


def _tensor_cuda(orig: Any) -> Any:
    """Tensor.cuda(): from the host, a host-to-device copy."""

    @functools.wraps(orig)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _compiling():
            return orig(self, *args, **kwargs)
        p = state.probe
        if p is None or self.is_cuda or p.copies is None or not p.anatomy.on_loop():
            return orig(self, *args, **kwargs)
        return _copying(p, p.copies, orig, self, self, *args, **kwargs)

    mark(wrapper)
    return wrapper


def _tensor_copy_(orig: Any) -> Any:
    """dst.copy_(src): a host-to-device copy when dst is on the GPU and src is not; a device-to-host
    one (a sync) the other way."""

    @functools.wraps(orig)
    def wrapper(self: Any, src: Any, *args: Any, **kwargs: Any) -> Any:
        if _compiling():
            return orig(self, src, *args, **kwargs)
        p = state.probe
        if p is None or p.copies is None or not p.anatomy.on_loop():
            return orig(self, src, *args, **kwargs)
        to_gpu, from_gpu = self.is_cuda, getattr(src, "is_cuda", False)
        if to_gpu and not from_gpu:
            return _copying(p, p.copies, orig, src, self, src, *args, **kwargs)
        if from_gpu and not to_gpu:
            result = _waiting(p, orig, self, src, *args, **kwargs)
            p.copies.device_to_host(src)
            return result
        return orig(self, src, *args, **kwargs)

    mark(wrapper)
    return wrapper


def _device_sync(orig: Any) -> Any:
    """A call that waits for the device or a stream or event."""

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _compiling():
            return orig(*args, **kwargs)
        p = state.probe
        if p is None or not p.anatomy.on_loop():
            return orig(*args, **kwargs)
        return _waiting(p, orig, *args, **kwargs)

    mark(wrapper)
    return wrapper


def _patch_syncs(torch: Any) -> None:
    import torch.cuda

    T = torch.Tensor
    for name in ("item", "tolist", "cpu", "__bool__", "__int__", "__float__"):
        orig = getattr(T, name)
        if not getattr(orig, "_tuimon", False):
            _swap(T, name, _tensor_sync(orig))
    for name, wrap in (("to", functools.partial(_tensor_to, device_class=torch.device)), ("cuda", _tensor_cuda),
                       ("copy_", _tensor_copy_)):
        orig = getattr(T, name)
        if not getattr(orig, "_tuimon", False):
            _swap(T, name, wrap(orig))
    if not getattr(torch.cuda.synchronize, "_tuimon", False):
        _swap(torch.cuda, "synchronize", _device_sync(torch.cuda.synchronize))
    for cls in (torch.cuda.Event, torch.cuda.Stream):
        if not getattr(cls.synchronize, "_tuimon", False):
            _swap(cls, "synchronize", _device_sync(cls.synchronize))


# -- torch.compile ----------------------------------------------------------------------------------


def _patch_compile(torch: Any) -> None:
    """A job that compiles must run the same compiled graphs with tuimon as without it: torch.compile
    warns of global module hooks and traces them (a graph break at every untraceable call), so from
    the job's first torch.compile on there are none (ModuleRoots.compiled), and a compiled module is
    timed at its own boundary, outside the compiled code. Every hook left checks _compiling() first,
    so that where torch.compile traces one it traces to nothing."""
    orig = torch.compile
    if getattr(orig, "_tuimon", False):
        return

    @functools.wraps(orig)
    def compile(*args: Any, **kwargs: Any) -> Any:
        result = orig(*args, **kwargs)
        roots = getattr(state.probe, "roots", None)
        if roots is not None:
            roots.compiled(result)
        return result

    mark(compile)
    _swap(torch, "compile", compile)
    orig_module_compile = torch.nn.Module.compile

    @functools.wraps(orig_module_compile)
    def module_compile(self: Any, *args: Any, **kwargs: Any) -> Any:  # Module.compile() -> Any: in place, through torch.compile
        result = orig_module_compile(self, *args, **kwargs)
        roots = getattr(state.probe, "roots", None)
        if roots is not None:
            roots.compiled_in_place(self)
        return result

    mark(module_compile)
    _swap(torch.nn.Module, "compile", module_compile)


# -- forward --------------------------------------------------------------------------------------


class ModuleRoots:
    """The forward phase: the loop thread's outermost module calls (outside data loading and
    backward, where recomputed or preprocessing modules are not the model's forward)."""

    def __init__(self, torch: Any, probe: Probe, discover: bool = True) -> None:
        from torch.nn.modules import module as nn_module

        self.probe = probe
        self.depth = 0
        self.entered: list[bool] = []  # per open module call: did it open the forward phase?
        self.roots: weakref.WeakSet = weakref.WeakSet()
        self.discovering = discover
        self._end_due = False  # discovery is over once the open module call ends (on_step)
        self.compiled_seen = not discover  # the job called torch.compile
        self._module_class = torch.nn.Module
        self._global = [nn_module.register_module_forward_pre_hook(self._pre),
                        nn_module.register_module_forward_hook(self._post, always_call=True)] if discover else []
        # After discovery: the roots by id (an entry leaves with its module), timed by their classes'
        # __call__ (_class_calls). Nothing of the probe's is put into a module (hooks, attributes): the
        # job's copy.deepcopy(model) and torch.save(model) would carry the probe (and fail on its mmap)
        self._timed: dict[int, weakref.ref] = {}
        if not discover:
            self._time_compiled_class(getattr(getattr(torch, "_dynamo", None), "OptimizedModule", None))

    def _pre(self, module: Any, args: Any) -> None:
        if _compiling() or state.probe is not self.probe:  # (compiled: traced to nothing); forked, or off
            return
        a = self.probe.anatomy
        if not a.on_loop():
            return
        opened = self.depth == 0 and a.top not in (DATA, BACKWARD)
        self.depth += 1  # (first: a step this call ends leaves discovery to the call's end, on_step)
        self.entered.append(opened)
        if opened:
            if self.discovering:
                self.roots.add(module)
            p = self.probe
            if p.source <= FORWARD_CALL:  # a loop whose only boundary is its model call
                p.boundary(FORWARD_CALL)
            p.work_seen = p.work_since_boundary = True
            a.enter(FORWARD)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if _compiling() or state.probe is not self.probe:
            return
        a = self.probe.anatomy
        if not a.on_loop() or not self.entered:
            return
        self.depth -= 1
        if self.entered.pop():
            a.exit(FORWARD)
            gpu = self.probe.gpu
            if gpu is not None and gpu.measuring:
                gpu.mark()  # the outermost forward ended: its kernels are queued
        if self._end_due and not self.depth:
            self._end_discovery()

    def on_step(self, completed: int) -> None:
        """After DISCOVER_STEPS steps, time the outermost modules only: at once, or where a module
        call is open (a loop stepped by its model calls), when it ends (its global post hook must run)."""
        if not self.discovering or completed < DISCOVER_STEPS:
            return
        if self.depth:
            self._end_due = True
        else:
            self._end_discovery()

    def _end_discovery(self) -> None:
        """The global hooks go: calls open now get no post hook (torch.compile called inside a
        forward ends discovery there), so they are closed here (the rest of that forward is "other")."""
        self.discovering = self._end_due = False
        for h in self._global:
            h.remove()
        self._global = []
        if self.depth:
            if self.entered and self.entered[0] and self.probe.anatomy.on_loop():
                self.probe.anatomy.exit(FORWARD)
            self.depth, self.entered = 0, []
        self._time_roots()

    def compiled(self, result: Any) -> None:
        """The job called torch.compile (result: what it returned): discovery ends now, before
        anything compiled is traced (the roots found so far are timed by their classes' wrappers, which
        call straight through under tracing); a compiled module (OptimizedModule) is a root, timed by its class's __call__."""
        self.compiled_seen = True
        if self.discovering:
            self._end_discovery()
        if isinstance(result, self._module_class):
            self._time_compiled_class(type(result))

    def _time_compiled_class(self, cls: Any) -> None:
        """Calls of a compiled module class (OptimizedModule) timed as roots, every instance."""
        if isinstance(cls, type) and issubclass(cls, self._module_class):
            self._time_class(cls, every_instance=True)

    def compiled_in_place(self, module: Any) -> None:
        """module.compile(): its calls go to its _compiled_call_impl, which is timed at its boundary."""
        inner = getattr(module, "_compiled_call_impl", None)
        if inner is None or getattr(inner, "_tuimon", False):
            return
        roots = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if _compiling() or state.probe is not roots.probe:
                return inner(*args, **kwargs)
            return roots.call(module, lambda _, *a, **k: inner(*a, **k), args, kwargs)

        mark(timed)
        module._compiled_call_impl = timed

    def _time_roots(self) -> None:
        """Time each root found at its class's __call__ (once a class), or, for a class whose forward
        wrapper opens the forward phase itself (DataParallel, DDP), there. Module hooks would be
        cheaper to aim (one instance) but live in the module: its copies and pickles carry them, and
        they take torch's slow call path (~5 us a call more)."""
        for m in list(self.roots):
            try:
                self._timed[id(m)] = weakref.ref(m, self._forget)
                cls = type(m)  # (a scripted module's class raises on a plain read of its forward)
                if not getattr(inspect.getattr_static(cls, "forward", None), TIMES_FORWARD, False):
                    self._time_class(cls)
            except Exception:  # noqa: BLE001 - a root the probe cannot time: its time stays "other"
                continue

    def _time_class(self, cls: type, every_instance: bool = False) -> None:
        """cls.__call__ wrapped, once in the process: a call of a root of this process's probe (whichever
        probe is current: a test or a fork makes another; every_instance: any instance is one) opens the
        forward phase; any other call goes through (one frame and a dict lookup). Where cls inherits
        nn.Module's own __call__, that is looked up at each call, so a later patch of it (torch.fx's
        tracer) is seen as before. Each class's wrapper has its own code object: torch.compile of an
        instance compiles its class's __call__ as its top frame, and dynamo counts recompiles by code
        object (8 at most): one shared code would let 8 compiled classes use up the others' compiles."""
        base = self._module_class
        if cls is base or cls in _class_calls:
            return
        orig = cls.__call__
        inherited = orig is base.__call__

        def __call__(module: Any, /, *args: Any, **kwargs: Any) -> Any:
            if _compiling():
                return orig(module, *args, **kwargs)
            call = base.__call__ if inherited else orig
            p = state.probe
            roots = p.roots if p is not None else None
            if roots is None or not (every_instance or id(module) in roots._timed):
                return call(module, *args, **kwargs)
            return roots.call(module, call, args, kwargs)

        code = __call__.__code__
        named: dict[str, Any] = {"co_qualname" if hasattr(code, "co_qualname") else "co_name": f"{cls.__qualname__}.__call__"}
        __call__.__code__ = code.replace(**named)
        functools.update_wrapper(__call__, orig)
        mark(__call__)
        _class_calls[cls] = (vars(cls).get(_CALL), __call__)
        if _enabled:
            setattr(cls, _CALL, __call__)

    def _forget(self, ref: weakref.ref) -> None:
        """A timed root is gone: its id may be another module's next."""
        for key, r in list(self._timed.items()):
            if r is ref:
                del self._timed[key]

    def times(self, module: Any) -> bool:
        """Is this module a root (after discovery)? Asked by the forward wrappers that time their
        class's roots themselves (DataParallel, DDP)."""
        return id(module) in self._timed

    def call(self, module: Any, forward: Any, args: Any, kwargs: Any) -> Any:
        """forward(module, ...) as a root: what _pre and _post do around it, in one call."""
        if _compiling():
            return forward(module, *args, **kwargs)
        a = self.probe.anatomy
        if not a.on_loop():
            return forward(module, *args, **kwargs)
        opened = self.depth == 0 and a.top not in (DATA, BACKWARD)
        if opened:
            p = self.probe
            if p.source <= FORWARD_CALL:
                p.boundary(FORWARD_CALL)
            p.work_seen = p.work_since_boundary = True
            a.enter(FORWARD)
        self.depth += 1
        try:
            return forward(module, *args, **kwargs)
        finally:
            self.depth -= 1
            if opened:
                a.exit(FORWARD)
                gpu = self.probe.gpu
                if gpu is not None and gpu.measuring:
                    gpu.mark()  # the outermost forward ended: its kernels are queued

    @staticmethod
    def set_enabled(on: bool) -> None:
        """The roots' class wrappers in place (True) or their classes' own __call__ back (False)."""
        for cls, (own, wrapper) in list(_class_calls.items()):
            if on:
                setattr(cls, _CALL, wrapper)
            elif own is not None:
                setattr(cls, _CALL, own)
            elif _CALL in vars(cls):
                delattr(cls, _CALL)
