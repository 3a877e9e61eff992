"""The scheduler: group buffers into kernels, decide what lives in memory, plan buffer reuse.

A kernel iterates an *outer* space (split across threads) and, for reduction kernels, runs one or
more *inner* loops per outer point. A buffer joins the open kernel when

- its loops fit: a pointwise over ``outer`` (an epilogue per outer point) or ``outer + inner``, or
  a reduction over ``inner`` for each outer point; a pure-pointwise kernel becomes a reduction
  kernel when the first reduction over its trailing dims joins; and
- every read of a buffer computed earlier in the same kernel stays within the current outer
  point (its outer index is exactly the current outer variables), so no other pass over memory
  is needed. Anything else starts a new kernel: that is the rule that keeps fusion correct.

"Fit" looks through how loops are grouped (``regroup``): a ``[8, 128, 1]`` mean joins a kernel
over ``[8, 128]``, a ``[1024, 256]`` reshape of its rows joins one over ``[8, 128] x [256]``.
Before a kernel closes, later buffers that fit it and read nothing still pending move up into
it (``_LOOKAHEAD``): same-shaped work with unrelated buffers in between (an optimizer's
per-parameter updates, a value computed between two passes over the same rows) shares a pass.

Softmax (max, sum of exp, normalize) and layer_norm (mean/var, normalize) each become a single
kernel; a chain of pointwise ops is one kernel. Buffers read only inside their kernel at the same
outer point with no inner dims (a row's max) are *locals*: never stored to memory.
Dependencies between steps are recorded as edges (``Schedule.deps``); ``Schedule.dag`` turns
them into a networkx DAG on request (networkx is imported only then: it costs a tenth of a
second, which a warm compile should not pay).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

from ..runtime.symbolic import statically_known_true
from . import sym
from .dependencies import reads_of
from .graph_lowering import LoweredGraph
from .ir import Buffer, ComputedBuffer, ExternBuffer, InputBuffer, Pointwise, Reduction, Scatter

__all__ = ["Kernel", "ExternCall", "ScatterStep", "Schedule", "schedule"]


@dataclass
class Kernel:
    name: str
    outer: tuple
    inner: tuple = ()
    nodes: list = field(default_factory=list)  # ComputedBuffers in execution order
    locals: set = field(default_factory=set)  # buffer names kept in registers (never stored)
    # buffers no other step or output reads: codegen may keep them in registers when every
    # read is in the same loop at the same index (see loop_plan.forward_only)
    internal: set = field(default_factory=set)
    # internal buffer -> a later node of this kernel whose memory it is written into (see
    # ``_alias_within_kernels``): the wrapper allocates nothing for it
    aliases: dict = field(default_factory=dict)

    @property
    def is_reduction(self) -> bool:
        return any(isinstance(n.data, Reduction) for n in self.nodes)

    def node_vars(self, buf: ComputedBuffer, outer_vars, inner_vars):
        """(index, rindex) loop variables of ``buf`` in terms of this kernel's variables.

        A buffer's loops may group the kernel's dimensions differently (``[8, 128, 1]`` in a
        kernel over ``[8, 128]``, ``[1024, 256]`` over ``[8, 128] x [256]``): see ``regroup``."""
        data = buf.data
        outer, inner = tuple(self.outer), tuple(self.inner)
        ranges = tuple(data.ranges)
        if isinstance(data, Reduction):
            return (
                _apply(regroup(outer, ranges), outer_vars),
                _apply(regroup(inner, tuple(data.reduction_ranges)), inner_vars),
            )
        plan = regroup(outer, ranges)
        if plan is not None:
            return _apply(plan, outer_vars), []
        both = list(outer_vars) + list(inner_vars)
        return _apply(regroup(outer + inner, ranges), both), []

    def is_outer_node(self, buf: ComputedBuffer) -> bool:
        """A pointwise buffer computed once per outer point (a row's mean), not per element."""
        return isinstance(buf.data, Pointwise) and (
            regroup(tuple(self.outer), tuple(buf.data.ranges)) is not None
        )

    def describe(self) -> str:
        origins = []
        for n in self.nodes:
            for o in n.origins:
                origins.append(getattr(o, "name", str(o)))
        kind = "reduction" if self.is_reduction else "pointwise"
        return (
            f"{self.name}: {kind} outer={list(self.outer)} inner={list(self.inner)} "
            f"buffers={[n.name for n in self.nodes]} locals={sorted(self.locals)} fused graph nodes={origins}"
        )


@dataclass
class ExternCall:
    buffer: ExternBuffer

    @property
    def name(self) -> str:
        return self.buffer.name

    def describe(self) -> str:
        origins = [getattr(o, "name", str(o)) for o in self.buffer.origins]
        return f"{self.buffer.name}: extern {self.buffer.description} graph nodes={origins}"


@dataclass
class ScatterStep:
    buffer: ComputedBuffer

    @property
    def name(self) -> str:
        return self.buffer.name

    def describe(self) -> str:
        origins = [getattr(o, "name", str(o)) for o in self.buffer.origins]
        return f"{self.buffer.name}: scatter-{self.buffer.data.mode} (single-threaded) graph nodes={origins}"


@dataclass
class Schedule:
    lowered: LoweredGraph
    steps: list  # Kernel | ExternCall, in execution order
    stored: set  # names of buffers that need memory
    last_use: dict  # buffer name -> index of the last step reading it (graph outputs: len(steps))
    reuse: dict = field(
        default_factory=dict
    )  # buffer name -> name of a dead buffer whose memory it takes
    deps: dict = field(default_factory=dict)  # step index -> indices of the steps it reads from
    # buffer names each step reads, in step order (worked out once: reading a kernel's loads
    # runs its loop bodies, which later passes would otherwise repeat per question)
    step_reads: list = field(default_factory=list)

    @property
    def dag(self):
        """The step dependencies as a networkx DiGraph (for analysis and drawing)."""
        import networkx as nx

        g = nx.DiGraph()
        for i, step in enumerate(self.steps):
            g.add_node(i, name=step.name)
        for i, sources in self.deps.items():
            for j in sources:
                g.add_edge(j, i)
        return g

    @property
    def kernels(self) -> list:
        return [s for s in self.steps if isinstance(s, Kernel)]

    def plan_reuse(self, written_elsewhere=frozenset()) -> None:
        """Plan ``reuse`` again, knowing the buffers stored into mutated inputs' memory
        (``reinplace.plan_inplace``, decided on this schedule): they take no other memory."""
        self.reuse = _plan_reuse(
            self.steps, self.stored, self.last_use, self.lowered, written_elsewhere
        )

    def describe(self) -> str:
        lines = [s.describe() for s in self.steps]
        if self.reuse:
            lines.append("buffer reuse: " + ", ".join(f"{a} <- {b}" for a, b in self.reuse.items()))
        return "\n".join(lines)


def regroup(sizes: tuple, ranges: tuple):
    """How loops over ``ranges`` are loops over ``sizes`` with dimensions grouped differently,
    or None: per dimension of ``ranges``, the ``(dimension of sizes, multiplier)`` terms of its
    index. Size-1 dimensions are free; a dimension of ``ranges`` may join consecutive ones of
    ``sizes`` (``[1024, 256]`` over ``[8, 128, 256]``) but never split one (that would need a
    division in every index). Symbolic sizes group only where the products are provably equal
    (and are not cached: their hash is only meaningful while kernels are compiled)."""
    if sym.is_symbolic(sizes) or sym.is_symbolic(ranges):
        return _regroup(sizes, ranges)
    return _regroup_cached(sizes, ranges)


def _regroup(sizes: tuple, ranges: tuple):
    if len(sizes) == len(ranges) and all(map(sym.same_size, sizes, ranges)):
        return tuple(((i, 1),) for i in range(len(sizes)))
    dims = [(i, s) for i, s in enumerate(sizes) if not sym.same_size(s, 1)]
    out = []
    k = 0
    for r in ranges:
        if sym.same_size(r, 1):
            out.append(())
            continue
        group = []
        prod = 1
        while k < len(dims) and not sym.same_size(prod, r) and not _known_above(prod, r):
            group.append(dims[k])
            prod *= dims[k][1]
            k += 1
        if not sym.same_size(prod, r):
            return None
        terms = []
        mult = 1
        for i, s in reversed(group):
            terms.append((i, mult))
            mult *= s
        out.append(tuple(reversed(terms)))
    if k != len(dims):
        return None
    return tuple(out)


_regroup_cached = functools.lru_cache(maxsize=4096)(_regroup)


def _known_above(a, b) -> bool:
    if a.__class__ is int and b.__class__ is int:
        return a > b
    return statically_known_true(">", a, b)


def _apply(plan, variables) -> list:
    out = []
    for terms in plan:
        if len(terms) == 1 and terms[0][1] == 1:
            out.append(variables[terms[0][0]])
            continue
        e = sym.ZERO
        for i, mult in terms:
            e = e + sym.as_expr(variables[i]) * mult
        out.append(e)
    return out


def _ranges(buf: ComputedBuffer) -> tuple:
    return tuple(buf.data.ranges)


def _fits(kernel: Kernel, buf: ComputedBuffer):
    """(new outer, new inner) if ``buf``'s loops fit the kernel, else None."""
    data = buf.data
    ranges = tuple(data.ranges)
    outer, inner = tuple(kernel.outer), tuple(kernel.inner)
    if isinstance(data, Reduction):
        rr = tuple(data.reduction_ranges)
        if inner:
            same = regroup(outer, ranges) is not None and regroup(inner, rr) is not None
            return (outer, inner) if same else None
        # a pointwise kernel over (ranges + rr) becomes a reduction kernel
        if regroup(outer, ranges + rr) is not None and all(
            regroup(ranges + rr, tuple(n.data.ranges)) is not None for n in kernel.nodes
        ):
            return (ranges, rr)
        return None
    if regroup(outer, ranges) is not None or (inner and regroup(outer + inner, ranges) is not None):
        return (outer, inner)
    return None


def _legal(
    kernel: Kernel, buf: ComputedBuffer, outer: tuple, inner: tuple, read_cache: dict | None = None
) -> bool:
    """Every read of a buffer produced in this kernel stays within the current outer point.

    ``read_cache`` keeps each node's reads per kernel shape (they depend on nothing else): a
    kernel growing one buffer at a time would otherwise run every member's body again per try."""
    produced = {n.name: n for n in kernel.nodes}
    if not produced:
        return True
    trial = Kernel(kernel.name, outer, inner, kernel.nodes + [buf])
    outer_vars = [sym.Var(f"o{i}", s) for i, s in enumerate(outer)]
    inner_vars = [sym.Var(f"i{i}", s) for i, s in enumerate(inner)]
    outer_set = set(outer_vars)
    cache = read_cache if read_cache is not None else {}
    # with the kernel's loops unchanged, its members' reads were checked when each joined (and
    # none reads ``buf``, which comes after them): only ``buf``'s reads are new. Checking them
    # all again made filling a kernel quadratic in its size (an optimizer's updates, a few
    # hundred buffers in reach of one kernel)
    same_loops = outer == tuple(kernel.outer) and inner == tuple(kernel.inner)
    for node in [buf] if same_loops else trial.nodes:
        key = (node.name, tuple(outer), tuple(inner))
        reads = cache.get(key)
        if reads is None:
            index, rindex = trial.node_vars(node, outer_vars, inner_vars)
            reads = cache[key] = reads_of(node, index, rindex)
        for read in reads:
            src = produced.get(read.name)
            if src is None or src is node:
                continue
            # where the producer stored the element for the current outer point
            s_index, _ = trial.node_vars(src, outer_vars, inner_vars)
            store = src.layout.offset_expr(s_index[: len(src.data.ranges)])
            load = read.index
            for v in outer_set:
                if load.coeff(v) != store.coeff(v):
                    return False
            for atom in load.atoms():
                if not isinstance(atom, sym.Var) and atom.free_vars() & outer_set:
                    return False
            if trial.is_outer_node(src) and (load.free_vars() - outer_set):
                return False
            # equal coefficients with another constant: a neighbour's element (a roll or a
            # shifted slice of a scan's result reads o0 - 1), not yet computed or already gone
            if _constant(load) != _constant(store):
                return False
    return True


def _constant(index) -> int:
    return index.const if isinstance(index, sym.Expr) else int(index)


def schedule(lowered: LoweredGraph) -> Schedule:
    counter = itertools.count()
    steps: list = []
    open_kernel: Kernel | None = None
    kernel_of: dict[str, object] = {}

    def close():
        nonlocal open_kernel
        if open_kernel is not None:
            steps.append(open_kernel)
            open_kernel = None

    pending = list(lowered.buffers)
    reads: dict = {}

    def direct_reads(b) -> set:
        names = reads.get(b.name)
        if names is None:
            names = reads[b.name] = _buffer_reads(b)
        return names

    read_cache: dict = {}

    def try_join(buf) -> bool:
        fit = _fits(open_kernel, buf)
        if fit is not None and _legal(open_kernel, buf, *fit, read_cache):
            open_kernel.outer, open_kernel.inner = fit
            open_kernel.nodes.append(buf)
            kernel_of[buf.name] = open_kernel
            return True
        return False

    def pull_later(waiting: Buffer):
        """Move later buffers that fit the open kernel into it, ahead of unrelated ones
        (a value computed between two same-shaped pointwise buffers would otherwise split
        them into two passes over memory). A buffer reading anything skipped (``waiting``,
        the buffer that did not fit, included) stays put."""
        skipped: set = {waiting.name}
        i = 0
        while i < len(pending) and i < _LOOKAHEAD:
            cand = pending[i]
            movable = isinstance(cand, ComputedBuffer) and not isinstance(cand.data, Scatter)
            if movable and not (direct_reads(cand) & skipped) and try_join(cand):
                del pending[i]
                continue
            skipped.add(cand.name)
            i += 1

    while pending:
        buf = pending.pop(0)
        if isinstance(buf, ExternBuffer) or isinstance(getattr(buf, "data", None), Scatter):
            close()
            call = ExternCall(buf) if isinstance(buf, ExternBuffer) else ScatterStep(buf)
            steps.append(call)
            kernel_of[buf.name] = call
            continue
        if open_kernel is not None:
            if try_join(buf):
                continue
            pull_later(buf)
            close()
        open_kernel = Kernel(
            f"kernel{next(counter)}",
            _ranges(buf) if isinstance(buf.data, Pointwise) else tuple(buf.data.ranges),
            () if isinstance(buf.data, Pointwise) else tuple(buf.data.reduction_ranges),
            [buf],
        )
        kernel_of[buf.name] = open_kernel
    close()
    steps = _split_independent(steps, direct_reads, _buffer_sizes(lowered))

    # who reads what
    readers: dict[str, set] = {}
    step_reads = [_step_reads(step) for step in steps]
    for step, names in zip(steps, step_reads):
        for n in names:
            readers.setdefault(n, set()).add(id(step))
    output_names = {o[1].name for o in lowered.outputs if o[0] == "buffer"}
    stored: set = set()
    for step in steps:
        if isinstance(step, (ExternCall, ScatterStep)):
            stored.add(step.buffer.name)
            continue
        for node in step.nodes:
            other_readers = readers.get(node.name, set()) - {id(step)}
            if node.name not in output_names and not other_readers:
                step.internal.add(node.name)
            if node.name in output_names or other_readers or not _is_local(step, node):
                stored.add(node.name)
            else:
                step.locals.add(node.name)
    _alias_within_kernels(steps, stored)
    # liveness and reuse of dead buffers' memory
    last_use: dict = {}
    for i, names in enumerate(step_reads):
        for n in names:
            last_use[n] = i
    for n in output_names:
        last_use[n] = len(steps)
    reuse = _plan_reuse(steps, stored, last_use, lowered)
    producer = {}
    for i, step in enumerate(steps):
        for n in _step_writes(step):
            producer[n] = i
    deps: dict = {}
    for i, names in enumerate(step_reads):
        for n in names:
            if n in producer and producer[n] != i:
                deps.setdefault(i, set()).add(producer[n])
    return Schedule(lowered, steps, stored, last_use, reuse, deps, step_reads)


# how many of the following buffers a kernel that cannot take the next one looks through
_LOOKAHEAD = 64

# pointwise parts (an optimizer's updates of small parameters) share a kernel, at most this many
# of one structure, fewer when their loops are longer than _SHARED_LAUNCH_ELEMENTS / parts (see
# ``_split_independent``)
_PARTS_PER_KERNEL = 8
_SHARED_LAUNCH_ELEMENTS = 1 << 15
# a buffer of at most this many elements read by two parts (a learning rate, a step count) does
# not join them: reading it twice costs nothing
_SMALL_SHARED_READ = 64


def _buffer_sizes(lowered: LoweredGraph) -> dict:
    """Element count of every buffer whose size is a known integer."""
    sizes = {}
    for buf in itertools.chain(lowered.inputs, lowered.buffers):
        if buf is None:
            continue
        size = buf.layout.storage_size()
        if isinstance(size, int):
            sizes[buf.name] = size
    return sizes


def _static_elements(dims: tuple) -> int | None:
    total = 1
    for d in dims:
        if not isinstance(d, int):
            return None
        total *= d
    return total


def _split_independent(steps: list, direct_reads, sizes: dict) -> list:
    """Split kernels made of independent parts into kernels of a few equal pointwise parts, or
    of one part holding a reduction.

    Greedy fusion puts every same-shaped buffer in reach into one loop: the updates of all of an
    optimizer's equal-shaped parameters, the norms ``clip_grad_norm_`` takes of them, the same
    recomputation in each of twelve transformer blocks. Such a kernel grows with the model and
    is never equal to another, so its IR is emitted and optimized anew; and LLVM's time grows
    faster than a function's size (GPT-2 small's step took 9.5 s optimizing kernels of up to 63
    parts). Parts are connected by what they share: a buffer one computes and another reads, or
    an input both read (one pass over it). Unconnected parts gain nothing from one loop but a
    launch (a few microseconds of the wrapper's Python): short pointwise ones (an optimizer's
    biases) share one per ``_PARTS_PER_KERNEL`` parts of one structure; nanoGPT's step ran 2%
    slower with a kernel per part. A part with a reduction is a kernel of its own: the greedy
    pass mixes such parts unevenly (a gradient norm's sum with its square root in one kernel,
    without it in the next), so kernels of several made one kernel per mix -- GPT-2 small's
    ``clip_grad_norm_`` over 148 gradients scheduled 36 distinct ones (547 KB of IR at width
    48; 173 KB split so). Equal parts and equal chunks make equal kernels, which the code
    generator emits and compiles once (``codegen.kernel_structure``).
    """
    out = []
    for step in steps:
        if not isinstance(step, Kernel) or len(step.nodes) < 2:
            out.append(step)
            continue
        elements = _static_elements(tuple(step.outer) + tuple(step.inner))
        parts = _independent_parts(step, direct_reads, sizes) if elements else None
        if parts is None or len(parts) < 2:
            out.append(step)
            continue
        shared = max(1, min(_PARTS_PER_KERNEL, _SHARED_LAUNCH_ELEMENTS // elements))
        if len(parts) <= shared:  # one short kernel: a few parts share its launch
            out.append(step)
            continue
        groups: dict = {}
        for part in parts:
            groups.setdefault(_part_signature(part), []).append(part)
        chunks = []
        for same in groups.values():
            reduces = any(isinstance(n.data, Reduction) for n in same[0])
            per_kernel = 1 if reduces else shared
            chunks += [
                [node for part in same[i : i + per_kernel] for node in part]
                for i in range(0, len(same), per_kernel)
            ]
        pieces = [_piece_kernel(step, nodes) for nodes in chunks]
        if any(p is None for p in pieces):
            out.append(step)
            continue
        for n, piece in enumerate(pieces):
            piece.name = step.name if n == 0 else f"{step.name}_{n}"
        out.extend(pieces)
    return out


def _independent_parts(kernel: Kernel, direct_reads, sizes: dict) -> list | None:
    """The kernel's nodes grouped into parts sharing no computed buffer and no input larger than
    ``_SMALL_SHARED_READ`` elements, each in execution order; None when a read's size is unknown
    (a symbolic shape: kept whole)."""
    parent = list(range(len(kernel.nodes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict = {node.name: i for i, node in enumerate(kernel.nodes)}
    first_reader: dict = {}
    for i, node in enumerate(kernel.nodes):
        for name in direct_reads(node):
            if name in owner:
                parent[find(i)] = find(owner[name])
                continue
            size = sizes.get(name)
            if size is None:
                return None
            if size <= _SMALL_SHARED_READ:
                continue
            if name in first_reader:
                parent[find(i)] = find(first_reader[name])
            else:
                first_reader[name] = i
    parts: dict = {}
    for i, node in enumerate(kernel.nodes):
        parts.setdefault(find(i), []).append(node)
    return list(parts.values())


def _part_signature(part: list) -> tuple:
    """What equal parts have in common (only groups parts: a wrong guess costs a kernel, not an
    answer)."""
    return tuple(
        (
            type(n.data).__name__,
            tuple(n.data.ranges),
            tuple(getattr(n.data, "reduction_ranges", ())),
            n.dtype,
            tuple(getattr(o, "target", o) for o in n.origins),
        )
        for n in part
    )


def _piece_kernel(kernel: Kernel, nodes: list) -> Kernel | None:
    """A kernel over ``nodes`` (a subset closed under the kernel's own reads) with the kernel's
    loops, or pointwise loops of its own when the subset has no reduction (a reduction kernel's
    loops need one: its per-row scalars, or its whole space); None when neither fits."""
    if any(isinstance(n.data, Reduction) for n in nodes) or not kernel.inner:
        return Kernel(kernel.name, kernel.outer, kernel.inner, list(nodes))
    for outer in (tuple(kernel.outer), tuple(kernel.outer) + tuple(kernel.inner)):
        if all(regroup(outer, tuple(n.data.ranges)) is not None for n in nodes):
            return Kernel(kernel.name, outer, (), list(nodes))
    return None


def _buffer_reads(buf) -> set:
    if isinstance(buf, ExternBuffer):
        return {b.name for b, _ in (x for x in buf.inputs if isinstance(x, tuple))}
    if isinstance(getattr(buf, "data", None), Scatter):
        return set(_scatter_reads(buf))
    return {r.name for r in reads_of(buf)}


def _is_local(kernel: Kernel, node: ComputedBuffer) -> bool:
    """A per-outer-point scalar (a row's max or sum) read only at the current outer point."""
    return bool(kernel.inner) and (
        kernel.is_outer_node(node)
        or (
            isinstance(node.data, Reduction) and regroup(kernel.outer, node.data.ranges) is not None
        )
    )


def _step_reads(step) -> list:
    if isinstance(step, ExternCall):
        return [b.name for b, _ in (x for x in step.buffer.inputs if isinstance(x, tuple))]
    if isinstance(step, ScatterStep):
        return _scatter_reads(step.buffer)
    names = []
    outer_vars = [sym.Var(f"o{i}", s) for i, s in enumerate(step.outer)]
    inner_vars = [sym.Var(f"i{i}", s) for i, s in enumerate(step.inner)]
    for node in step.nodes:
        index, rindex = step.node_vars(node, outer_vars, inner_vars)
        for r in reads_of(node, index, rindex):
            if r.name not in names:
                names.append(r.name)
    return names


def _scatter_reads(buf) -> list:
    from .dependencies import RecordingHandler
    from .virtualized import set_ops_handler

    data = buf.data
    handler = RecordingHandler()
    index = [sym.Var(f"x{i}", s) for i, s in enumerate(data.ranges)]
    base_index = [sym.Var(f"b{i}", s) for i, s in enumerate(data.base_ranges)]
    with set_ops_handler(handler):
        data.base_fn(base_index)
        data.index_fn(index)
        data.value_fn(index)
    names = []
    for r in handler.reads:
        if r.name not in names:
            names.append(r.name)
    return names


def _step_writes(step) -> list:
    if isinstance(step, (ExternCall, ScatterStep)):
        return [step.buffer.name]
    return [n.name for n in step.nodes]


def _alias_within_kernels(steps, stored: set) -> None:
    """Write an internal buffer of a reduction kernel into the memory of a later node of the
    same kernel: softmax's ``exp`` values go where its output will be, and the normalizing pass
    rewrites them in place (while the row is still in cache). Without it each such kernel writes
    one more full-size buffer to memory and reads it back (softmax over 4096x4096 moved 192 MB
    for its 128 compulsory ones).

    Safe when the two have the same dtype and layout and are stored at the same position, and
    every read of the internal buffer is at that position, by a node up to the later one: each
    element is then read before the later node overwrites it, in every loop order the kernel may
    take. The aliased buffer leaves ``stored`` (nothing to allocate, nothing to hand to reuse).
    """
    for step in steps:
        if not isinstance(step, Kernel) or not step.inner or not step.internal:
            continue
        outer_vars = [sym.Var(f"o{i}", s) for i, s in enumerate(step.outer)]
        inner_vars = [sym.Var(f"i{i}", s) for i, s in enumerate(step.inner)]
        store_at: dict = {}
        reads: list = []
        for node in step.nodes:
            index, rindex = step.node_vars(node, outer_vars, inner_vars)
            if isinstance(node.data, Pointwise) and len(index) == len(node.layout.shape):
                store_at[node.name] = node.layout.offset_expr(index)
            reads.append([(r.name, r.index) for r in reads_of(node, index, rindex)])
        targets = set(step.aliases.values())
        for k, x in enumerate(step.nodes):
            if (
                x.name not in step.internal
                or x.name not in stored
                or x.name not in store_at
                or x.name in targets  # one level: a target's own memory is allocated
            ):
                continue
            at = store_at[x.name]
            later_reads = [q for q in range(k + 1, len(step.nodes)) if _reads(reads[q], x.name)]
            if any(i != at for q in later_reads for n, i in reads[q] if n == x.name):
                continue  # read at another position: the later node may overwrite it first
            last = later_reads[-1] if later_reads else k
            for m in range(max(last, k + 1), len(step.nodes)):
                y = step.nodes[m]
                if (
                    y.name in stored
                    and y.name not in targets
                    and y.name not in step.aliases
                    and store_at.get(y.name) == at
                    and y.dtype is x.dtype
                    and _same_layout(x.layout, y.layout)
                ):
                    step.aliases[x.name] = y.name
                    targets.add(y.name)
                    stored.discard(x.name)
                    break


def _reads(pairs: list, name: str) -> bool:
    return any(n == name for n, _ in pairs)


def _same_layout(a, b) -> bool:
    return (
        len(a.shape) == len(b.shape)
        and all(sym.same_size(p, q) for p, q in zip(a.shape, b.shape))
        and all(sym.same_size(p, q) for p, q in zip(a.stride, b.stride))
        and sym.same_size(a.offset, b.offset)
    )


def _plan_reuse(steps, stored, last_use, lowered, written_elsewhere=frozenset()) -> dict:
    """Give a new buffer the memory of one that died earlier with the same size and dtype, or
    failing that of one its own kernel reads for the last time, only at the elements it
    writes (``reads_only_where_written``): an elementwise ``a + b`` goes into ``a``'s memory.
    Graph outputs take such memory too (a tied weight's summed gradient, GPT-2's 154 MB, went
    to a third buffer while its two parts were alive); ``written_elsewhere`` names the buffers
    stored into mutated inputs' memory (``reinplace``), which need none."""
    free: dict = {}  # (nbytes, dtype) -> [buffer names]
    reuse: dict = {}
    buffers = {b.name: b for b in lowered.buffers}
    outputs = {o[1].name for o in lowered.outputs if o[0] == "buffer"}
    dying: dict = {}  # step -> the buffers it reads last that may lend their memory
    for name, last in last_use.items():
        if name in stored and name in buffers and name not in outputs:
            dying.setdefault(last, []).append(name)
    for i, step in enumerate(steps):
        lent: set = set()  # buffers dying here whose memory a buffer of this step took
        for name in _step_writes(step):
            if name not in stored or name in written_elsewhere:
                continue
            size = (_nbytes(buffers[name]), buffers[name].dtype)
            candidates = free.get(size)
            if candidates:
                reuse[name] = candidates.pop()
                continue
            donor = _inplace_donor(step, buffers[name], dying.get(i, ()), lent, buffers)
            if donor is not None:
                reuse[name] = donor
                lent.add(donor)
        for name in dying.get(i, ()):
            if name not in lent:
                free.setdefault((_nbytes(buffers[name]), buffers[name].dtype), []).append(name)
    return reuse


def _inplace_donor(step, buf, dying, lent: set, buffers: dict):
    """A buffer read last by ``step`` whose memory ``buf`` can be written into as ``step``
    runs (same size and dtype, every read of it at the element ``buf`` stores, none after
    ``buf``'s node), or None."""
    if not isinstance(step, Kernel) or not isinstance(buf.data, Pointwise):
        return None
    if buf.name in step.aliases.values():
        return None  # an internal buffer is written into its memory first
    size = _nbytes(buf)
    for name in dying:
        donor = buffers[name]
        if (
            name not in lent
            and donor.dtype is buf.dtype
            and sym.same_size(_nbytes(donor), size)
            and reads_only_where_written(step, buf, name)
        ):
            return name
    return None


def reads_only_where_written(
    kernel: Kernel, buf: ComputedBuffer, name: str, known: dict | None = None
) -> bool:
    """Whether ``kernel`` reads buffer ``name`` only at the element its node ``buf`` stores
    and only by nodes up to ``buf``'s: ``buf`` may then be stored into ``name``'s memory, in
    every loop order and thread split the kernel may take (each element is read before it is
    overwritten, by the thread that overwrites it). ``known``: each kernel's stores and reads
    kept across calls (an optimizer's kernel is asked once per parameter it updates)."""
    found = known.get(id(kernel)) if known is not None else None
    if found is None or found[0] is not kernel:
        found = (kernel, *_node_accesses(kernel))
        if known is not None:
            known[id(kernel)] = found
    _, stores, reads = found
    store = stores[buf.name]
    seen_buf = False
    for node, node_reads in zip(kernel.nodes, reads):
        for r in node_reads:
            if r.name == name and (seen_buf or r.index != store):
                return False
        if node is buf:
            seen_buf = True
    return True


def _node_accesses(kernel: Kernel) -> tuple[dict, list]:
    """``({node name: store offset}, [reads per node])`` over the kernel's own loop variables."""
    outer = [sym.Var(f"o{i}", s) for i, s in enumerate(kernel.outer)]
    inner = [sym.Var(f"i{i}", s) for i, s in enumerate(kernel.inner)]
    stores, reads = {}, []
    for node in kernel.nodes:
        idx, ridx = kernel.node_vars(node, outer, inner)
        stores[node.name] = node.layout.offset_expr(idx)
        reads.append(reads_of(node, idx, ridx))
    return stores, reads


def _nbytes(buf: Buffer) -> int:
    return buf.layout.storage_size() * buf.dtype.itemsize


def is_input(buf) -> bool:
    return isinstance(buf, InputBuffer)
