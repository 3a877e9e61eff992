"""Per-thread eager state that the dispatcher reads on every op call.

PyTorch keeps grad mode, inference mode, autocast and the dispatch-mode stack per thread: a
thread starts with grad enabled, autocast off and no modes, whatever other threads are doing,
so a graph being captured in one thread (a tracing mode on that thread's stack) never sees,
nor changes, the ops of another. kiln does the same with one ``ThreadState`` per thread.

Hot paths read ``per_thread.state`` once per call (one thread-local lookup) and then its slots;
code that is not hot calls ``current()``. ``compile_lock`` is taken by whoever fills a compile
cache (dynamo's frame caches, AOT's signature cache), never on a cache hit.
"""

from __future__ import annotations

import threading

__all__ = ["ThreadState", "per_thread", "current", "compile_lock"]


class ThreadState:
    """One thread's switches: what eager code in this thread does with each op call.

    ``mode_stack`` is mutated in place, never replaced, so a caller may keep a reference to it
    for the duration of a call.
    """

    __slots__ = (
        "grad_enabled", "inference_mode", "mode_stack", "autocast", "source_stack", "profiler",
        "frees_saved", "saved_tensors_hooks", "saved_hooks_disabled",
    )  # fmt: skip

    def __init__(self):
        self.grad_enabled = True
        self.inference_mode = False
        # dispatch modes (tracing, meta propagation, logging); the innermost is last
        self.mode_stack: list = []
        # the active autocast configuration (kiln.amp.autocast_mode._Config), None when off
        self.autocast = None
        # (source, text) pairs pushed by ``kiln.ir.node_source`` while a graph is replayed
        self.source_stack: list = []
        # the recorder of the ``kiln.profiler.profile`` recording in this thread, None when off:
        # the dispatcher, the autograd engine and compiled code report to it (duck-typed, so
        # the core never imports the profiler)
        self.profiler = None
        # True while the autograd engine runs a backward that frees what nodes saved
        # (retain_graph=False): a node may then drop its saved tensors before its backward
        # computation ends, not after it (a compiled backward returns each activation's memory
        # once it has read it). False outside the engine: a node called directly keeps them.
        self.frees_saved = False
        # (pack, unpack) pairs of the active ``autograd.graph.saved_tensors_hooks`` contexts,
        # innermost last; the message ``disable_saved_tensors_hooks`` refuses them with
        self.saved_tensors_hooks: list = []
        self.saved_hooks_disabled = None


class _PerThread(threading.local):
    """A fresh ``ThreadState`` (PyTorch's defaults) the first time a thread looks."""

    def __init__(self):
        self.state = ThreadState()


per_thread = _PerThread()

# reentrant: capturing a frame compiles its graphs (AOT, inductor), which take it again
compile_lock = threading.RLock()


def current() -> ThreadState:
    """The calling thread's state."""
    return per_thread.state
