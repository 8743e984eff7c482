"""While a CUDA graph is captured, the probe makes no CUDA call (tuimon/probe/graphs.py).

CI has no GPU: a stand-in CUDA records every call the probe makes at the CUDA boundary, and a
stand-in graph class takes torch.cuda.CUDAGraph's two methods. The same code runs on the GPU machine
against a real manual capture in tests/gpu/check_cuda_graph.py."""

from types import SimpleNamespace

import pytest
import torch

from tuimon.probe import comm, copies, gpu_timing, graphs, torch_hooks


class Cuda:
    """torch.cuda at the boundary: every call that would reach the driver is logged."""

    def __init__(self):
        self.calls: list[str] = []
        self.stream_capturing = False

    def is_initialized(self):
        return True

    def current_device(self):
        return 0

    def current_stream(self):
        return None

    def is_current_stream_capturing(self):
        return self.stream_capturing

    def Event(self, enable_timing=False):  # noqa: N802 - torch's name
        self.calls.append("Event()")
        cuda = self

        class Ev:
            def record(self, stream=None):
                cuda.calls.append("record")

            def query(self):
                cuda.calls.append("query")
                return True

            def elapsed_time(self, other):
                cuda.calls.append("elapsed_time")
                return 1.0

        return Ev()


class Graph:
    """A stand-in for torch.cuda.CUDAGraph: its capture_begin/capture_end, as torch.cuda.graph calls them."""

    fail_begin = False

    def capture_begin(self, pool=None, capture_error_mode="global"):
        if self.fail_begin:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    def capture_end(self):
        pass


@pytest.fixture
def graph_class():
    swaps = []
    cls = type("CUDAGraph", (Graph,), {})
    graphs.patch(SimpleNamespace(cuda=SimpleNamespace(CUDAGraph=cls)),
                 lambda owner, name, wrapper: (swaps.append(name), setattr(owner, name, wrapper)))
    assert swaps == ["capture_begin", "capture_end"]
    yield cls
    assert graphs.open_captures == 0


def _timing(cuda):
    t = gpu_timing.GpuTiming(SimpleNamespace(cuda=cuda), lambda *r: None, lambda n: 1, lambda: 1)
    t.every, t.measuring, t.anchored = 1, True, False
    return t


def test_no_event_is_made_recorded_or_queried_inside_a_capture(graph_class):
    cuda = Cuda()
    t = _timing(cuda)
    t.boundary(1, 0, 1000, [])  # outside a capture: recorded
    assert cuda.calls == ["Event()", "record"]
    cuda.calls.clear()
    g = graph_class()
    g.capture_begin()
    assert graphs.open_captures == 1
    t.measuring, t.anchored = True, False
    t.mark()  # the end of a forward inside the capture
    t.after_sync()
    t.boundary(2, 1000, 2000, [])  # a step that ends inside the capture (its optimizer step captured)
    assert cuda.calls == []
    g.capture_end()
    assert graphs.open_captures == 0
    t.boundary(3, 2000, 3000, [])  # after it: the event of step 1 is queried again
    assert cuda.calls == ["query"]


def test_a_capture_begun_elsewhere_on_this_stream_is_seen_too():
    cuda = Cuda()
    t = _timing(cuda)
    cuda.stream_capturing = True  # (torch._C's own capture, or one begun before the probe)
    t.boundary(1, 0, 1000, [])
    t.mark()
    t.after_sync()
    assert cuda.calls == []


def test_no_collective_event_and_no_pinned_check_inside_a_capture(graph_class):
    cuda = Cuda()
    timing = _timing(cuda)
    ct = comm.CommTiming.__new__(comm.CommTiming)  # (only event(): its state set by hand)
    ct.gpu, ct.cuda, ct._pairs, ct._free = timing, cuda, [], []
    cp = copies.Copies(lambda *r: None, lambda n: 1)
    asked = []
    src = SimpleNamespace(nbytes=8, data_ptr=lambda: 1, is_pinned=lambda: asked.append(1) or True)
    g = graph_class()
    g.capture_begin()
    assert ct.event() is None
    cp.host_to_device(src, True)
    assert cuda.calls == [] and asked == []
    g.capture_end()
    assert ct.event() is not None
    cp.host_to_device(src, True)
    assert asked == [1]


def test_a_failed_capture_begin_leaves_no_capture_open(graph_class):
    g = graph_class()
    g.fail_begin = True
    with pytest.raises(RuntimeError, match="capturing"):
        g.capture_begin()
    assert graphs.open_captures == 0


def test_torch_cuda_graph_is_wrapped_by_the_probe_and_put_back():
    """The real class: torch.cuda.graph and make_graphed_callables call these two methods."""
    before = torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.capture_end
    swaps = []

    def swap(owner, name, wrapper):
        swaps.append((owner, name, getattr(owner, name)))
        setattr(owner, name, wrapper)

    graphs.patch(torch, swap)
    try:
        assert [(o, n) for o, n, _ in swaps] == [(torch.cuda.CUDAGraph, "capture_begin"),
                                                (torch.cuda.CUDAGraph, "capture_end")]
        assert torch.cuda.CUDAGraph.capture_begin._tuimon and torch.cuda.CUDAGraph.capture_end.__wrapped__ is before[1]
        graphs.patch(torch, swap)  # (twice: wrapped once)
        assert len(swaps) == 2
    finally:
        for owner, name, orig in swaps:
            setattr(owner, name, orig)
    assert (torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.capture_end) == before
    assert torch_hooks.graphs is graphs  # (torch_hooks.patch installs it)
