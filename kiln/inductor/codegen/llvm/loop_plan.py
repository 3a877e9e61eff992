"""How a scheduled kernel's loops are laid out for code generation.

A kernel runs over *rows* (the outer iteration space, flattened; threads take row ranges) and,
per row, one or more *inner loops* (the reduction space, or the last dimension of a pointwise
kernel). Before choosing the loops, adjacent dimensions that every memory access walks as one
(stride of dim k equals stride of dim k+1 times its size) are merged, so a contiguous
4096x4096 pointwise kernel becomes one flat loop. A flat loop's rows are its elements: a call
over rows ``[start, end)`` walks them in pieces that end at multiples of ``CHUNK`` (threads take
element ranges), so its element count is the caller's ``end`` and never a constant of the kernel:
flat kernels equal but for their size (an optimizer's update of each parameter) have equal IR,
which LLVM compiles once.

Each node gets its loop index as expressions of the kernel variables (``row_vars`` after
unflattening the row index, and ``j`` for the inner loop). A loop is *vectorizable* when every
access moves by 0 or 1 element per step of ``j`` and ``j`` never appears inside a division,
modulo or indirect index.

Before merging, a pointwise dimension that the accesses take apart by division (a reshape of
``[.., 768]`` into heads of 64) is split at those divisors (``_split_dims``), so that each
piece is indexed affinely. A reduction over a strided dimension (the column sums of a linear
layer's bias gradient) runs column by column instead (``_column_plan``): vector lanes over
contiguous outputs, the reduction in the loop around them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ....runtime.symbolic import hint_int
from ... import sym
from ...dependencies import RecordingHandler, reads_of
from ...ir import ComputedBuffer, Pointwise, Reduction
from ...scheduler import Kernel
from ...virtualized import set_ops_handler

__all__ = ["LoopPlan", "plan_kernel", "CHUNK", "InnerLoop"]

CHUNK = 4096  # a flat loop's elements are taken in pieces ending at multiples of this
# a flat loop shorter than this keeps its element count in the kernel (one row, a constant
# count): a scalar needs no vector loop, nor pieces, and is rarely shared by another size
FLAT_MIN = 16


@dataclass
class InnerLoop:
    nodes: list  # ComputedBuffers computed in this loop, in order
    vectorize: bool = True


@dataclass
class LoopPlan:
    kernel: Kernel
    row_sizes: tuple  # sizes of the row dims (after merging); rows = prod
    inner_size: int  # elements of the inner loop (1 for per-row scalar work)
    chunked: bool  # a flat pointwise loop whose rows are its elements, taken CHUNK at a time
    total: int  # elements of the flat loop when chunked (the rows; read by bounds proofs only)
    node_index: dict = field(default_factory=dict)  # name -> (index exprs, rindex exprs)
    row_vars: list = field(default_factory=list)
    j: sym.Var | None = None
    steps: list = field(default_factory=list)  # ("scalar", node) | InnerLoop, in order
    # internal buffers whose every read is in their own loop at their own index: never stored
    forward_only: set = field(default_factory=set)
    # column reductions (see ``_column_plan``): (size of the contiguous outer dim, block width);
    # then ``j`` walks the columns of a block (vector lanes) and ``rvar`` the reduction
    columns: tuple | None = None
    rvar: sym.Var | None = None
    # nested reduction loops (see ``_nest_reduction``): variables of the leading reduction dims,
    # outermost first, looped around the inner loops; ``j`` then walks the last dim only
    rq: list = field(default_factory=list)

    @property
    def rows(self) -> int:
        n = 1
        for s in self.row_sizes:
            n *= s
        return n


def _accesses(buf: ComputedBuffer, index, rindex) -> list:
    handler = RecordingHandler()
    with set_ops_handler(handler):
        if isinstance(buf.data, Pointwise):
            buf.data.inner_fn(index)
        else:
            buf.data.inner_fn(index, rindex)
    exprs = [r.index for r in handler.reads]
    exprs.append(buf.layout.offset_expr(index))
    return exprs, handler.indirect


def _mergeable(dims_vars, k, exprs) -> bool:
    a, b = dims_vars[k], dims_vars[k + 1]
    if sym.known("==", a.size, 1) or sym.known("==", b.size, 1):
        return True
    for e in exprs:
        for atom in e.atoms():
            if not isinstance(atom, sym.Var) and (atom.free_vars() & {a, b}):
                return False
        if not sym.same_size(e.coeff(a), e.coeff(b) * b.size):
            return False
    return True


def _merge_dims(sizes, index_fn):
    """Greedy merge of adjacent dims.

    ``index_fn(exprs)`` gets one index expression per *original* dim (in terms of the current
    merged variables) and returns the memory accesses that must stay affine.
    """
    original = tuple(sizes)
    sizes = list(sizes)
    if _empty(sizes):  # nothing runs (or only identities are written): keep the loops as they are
        return tuple(sizes)
    changed = True
    while changed and len(sizes) > 1:
        changed = False
        vars_ = [sym.Var(f"m{i}", s) for i, s in enumerate(sizes)]
        exprs = index_fn(_expand(original, tuple(sizes), [sym.as_expr(v) for v in vars_]))
        for k in range(len(sizes) - 1):
            if _mergeable(vars_, k, exprs):
                sizes[k : k + 2] = [sizes[k] * sizes[k + 1]]
                changed = True
                break
    return tuple(sizes)


def _empty(sizes) -> bool:
    """Whether a loop nest provably runs no iteration (a symbolic size that is 0 for some values
    only, ``s0 // 3``, is planned like any other: its loops then simply run no iteration)."""
    return any(sym.known("==", s, 0) for s in sizes)


def _split_dims(sizes, index_fn):
    """Split loop dimensions at the divisors the accesses take them apart by.

    A view that reshapes a dimension (``[.., 768]`` read as ``[.., 3, 4, 64]`` through ``c // 256``,
    ``c // 64 % 4`` and ``c % 64``) divides the loop variable in every index, which makes each
    vector lane's address a division (a gather). Looping over ``(3, 4, 64)`` instead gives plain
    affine indices (``_merge_dims`` joins back any of the pieces that every access walks as one).
    Returns the new sizes and ``join(exprs)``: one expression per original dimension from one
    per new dimension.
    """
    sizes = tuple(sizes)
    if not sizes or _empty(sizes):
        return sizes, list
    variables = [sym.Var(f"s{i}", s) for i, s in enumerate(sizes)]
    factors: dict = {v: set() for v in variables}

    def add_factor(v, c, d):
        if v not in factors or sym.is_symbolic((v.size, c, d)):
            return  # no split of a symbolic dim, nor at a divisor that is a symbol's
        if c > 0 and d % c == 0:
            f = d // c
            if 1 < f < v.size and v.size % f == 0:
                factors[v].add(f)

    for e in index_fn([sym.as_expr(v) for v in variables]):
        for atom in _atoms_deep(e):
            d = atom.div if isinstance(atom, sym.FloorDiv) else atom.mod
            for v, c in atom.expr.terms.items():
                add_factor(v, c, d)
                # ``(v % m) // d`` with ``d`` dividing ``m`` (a cat's part read through a
                # reshape) takes ``v`` apart at ``d`` too
                if isinstance(v, sym.Mod) and not sym.is_symbolic((v.mod, c, d)):
                    if c > 0 and d % c == 0 and v.mod % (d // c) == 0:
                        for w, cw in v.expr.terms.items():
                            add_factor(w, cw * c, d)
    if not any(factors.values()):
        return sizes, list
    groups = []  # per original dim: radix sizes, outermost first
    for v in variables:
        chain = []
        for f in sorted(factors[v]):
            if not chain or f % chain[-1] == 0:
                chain.append(f)
        radix = []
        prev = 1
        for f in chain:
            radix.append(f // prev)
            prev = f
        radix.append(v.size // prev)
        groups.append(tuple(reversed(radix)))
    new_sizes = tuple(s for g in groups for s in g)

    def join(exprs):
        out = []
        k = 0
        for g in groups:
            e = sym.ZERO
            for size in g:
                e = e * size + exprs[k]
                k += 1
            out.append(e)
        return out

    return new_sizes, join


def _atoms_deep(e: sym.Expr):
    for atom in e.atoms():
        if isinstance(atom, (sym.FloorDiv, sym.Mod)):
            yield atom
            yield from _atoms_deep(atom.expr)


def _expand(original_sizes, merged_sizes, merged_exprs):
    """Map merged loop variables back to one expression per original dimension."""
    out = []
    k = 0
    for m_size, m_expr in zip(merged_sizes, merged_exprs):
        group = []
        prod = 1
        while k < len(original_sizes) and (not group or not sym.known("==", prod, m_size)):
            group.append(original_sizes[k])
            prod *= original_sizes[k]
            k += 1
        # peel the group's dims off the merged index, innermost last
        strides = []
        acc = 1
        for s in reversed(group):
            strides.append(acc)
            acc *= s
        strides.reverse()
        for s, st in zip(group, strides):
            if sym.known("==", st, 0):
                out.append(sym.ZERO)  # a later dim of the group is empty: the loop never runs
                continue
            e = m_expr // st if not sym.known("==", st, 1) else m_expr
            out.append(e % s if not sym.known("==", st * s, m_size) else e)
    while k < len(original_sizes):  # trailing size-1 dims
        out.append(sym.ZERO)
        k += 1
    return out


def _join_short_inner(sizes: tuple) -> tuple:
    """Join a pointwise kernel's last dims while the last is shorter than a vector.

    A loop of fewer than eight elements runs scalar (``_vectorizable``): the columns of a
    convolution over a 4x4 output, an image upsampled from 4x4, read with a stride or a
    division that keeps ``_merge_dims`` from joining the dims. Joined, the loop indexes them
    by division and modulo (gathers where the accesses are not affine) but runs as vectors:
    a DCGAN discriminator layer's columns (32 to 64 channels, 8x8 to 4x4) took 418 -> 325 us,
    a nearest 2x upsampling of 4x4 images 66 -> 34 us."""
    sizes = tuple(sizes)
    while (
        len(sizes) > 1
        and sizes[-1].__class__ is int
        and sizes[-2].__class__ is int
        and sizes[-1] < 8
    ):
        sizes = sizes[:-2] + (sizes[-2] * sizes[-1],)
    return sizes


def plan_kernel(kernel: Kernel) -> LoopPlan:
    # a size a guard pinned (``s1 == 3``) is planned as its constant, as the emitter writes it
    # and ``kernel_structure`` describes it: planned as a symbol, a kernel got rows of
    # (s0, s1) and no vectors where its twin over plain (16, 3, 7) merged them into vectors
    outer = tuple(sym.size_value(s) for s in kernel.outer)
    inner = tuple(sym.size_value(s) for s in kernel.inner)
    nodes = kernel.nodes

    def node_exprs(outer_vars, inner_vars):
        exprs = []
        for n in nodes:
            index, rindex = kernel.node_vars(n, outer_vars, inner_vars)
            e, _ = _accesses(n, index, rindex)
            exprs.extend(e)
        return exprs

    if inner or kernel.is_reduction:
        # reduction kernel: merge inner dims (and outer dims) where accesses allow
        inner_vars_fixed = [sym.Var(f"i{i}", s) for i, s in enumerate(inner)]
        merged_outer = (
            _merge_dims(outer, lambda vs: node_exprs(vs, inner_vars_fixed)) if outer else ()
        )
        outer_vars_fixed = [sym.Var(f"o{i}", s) for i, s in enumerate(outer)]
        merged_inner = _merge_dims(inner, lambda vs: node_exprs(outer_vars_fixed, vs))
        row_vars = [sym.Var(f"x{i}", s) for i, s in enumerate(merged_outer)]
        total = 1
        for size in merged_inner:
            total *= size
        j = sym.Var("r0", total)
        outer_exprs = (
            _expand(outer, merged_outer, [sym.as_expr(v) for v in row_vars]) if outer else []
        )
        full_inner = _expand(inner, (j.size,), [sym.as_expr(j)])
        plan = LoopPlan(kernel, tuple(merged_outer), j.size, False, 0, row_vars=row_vars, j=j)
        for n in nodes:
            index, rindex = kernel.node_vars(n, outer_exprs, full_inner)
            plan.node_index[n.name] = (index, rindex)
        plan.steps = _group_loops(kernel, plan)
        plan.forward_only = _find_forward_only(plan)
        columns = _column_plan(kernel, plan, outer, inner, merged_outer)
        if columns is not None:
            return columns
        nested = _nest_reduction(kernel, plan, outer_exprs, inner, merged_inner)
        return nested if nested is not None else plan
    # pointwise kernel over `outer` (a 0-d result is one element)
    if not outer:
        plan = LoopPlan(kernel, (1,), 1, False, 0, row_vars=[sym.Var("x0", 1)], j=sym.Var("r0", 1))
        for n in nodes:
            plan.node_index[n.name] = (kernel.node_vars(n, [], [])[0], [])
        plan.steps = [InnerLoop(list(nodes), False)]
        return plan
    split, join = _split_dims(outer, lambda vs: node_exprs(vs, []))
    merged = _merge_dims(split, lambda vs: node_exprs(join(vs), []))
    merged = _join_short_inner(merged)
    inner = _concrete_inner(split) if len(merged) == 1 and sym.is_symbolic(merged[0]) else 1
    if inner >= 8:
        # a symbolic flat loop: rows of its concrete trailing elements, so that every index is
        # provably inside its buffer (chunks of CHUNK would end past it for some sizes)
        row = sym.Var("x0", merged[0] // inner)
        j = sym.Var("r0", inner)
        exprs = join(_expand(split, merged, [sym.as_expr(row) * inner + j]))
        plan = LoopPlan(kernel, (row.size,), inner, False, 0, row_vars=[row], j=j)
    elif len(merged) == 1 and (sym.is_symbolic(merged[0]) or merged[0] >= FLAT_MIN):
        # one flat loop: the row variable is the element a piece starts at, ``j`` walks the
        # piece (see the module docstring)
        total = merged[0]
        row = sym.Var("x0", total)
        j = sym.Var("r0", CHUNK)
        exprs = join(_expand(split, merged, [sym.as_expr(row) + j]))
        plan = LoopPlan(kernel, (total,), CHUNK, True, total, row_vars=[row], j=j)
    else:
        row_vars = [sym.Var(f"x{i}", s) for i, s in enumerate(merged[:-1])]
        j = sym.Var("r0", merged[-1])
        exprs = join(_expand(split, merged, [sym.as_expr(v) for v in row_vars] + [sym.as_expr(j)]))
        plan = LoopPlan(kernel, tuple(merged[:-1]), merged[-1], False, 0, row_vars=row_vars, j=j)
    for n in nodes:
        plan.node_index[n.name] = (kernel.node_vars(n, exprs, [])[0], [])
    plan.steps = [InnerLoop(list(nodes), _vectorizable(plan, nodes))]
    plan.forward_only = _find_forward_only(plan)
    return plan


# the innermost reduction dim must have at least this many elements (for the sizes seen) for the
# reduction to loop over it nested in the others rather than over one flat index
NEST_INNER_MIN = 16


def _nest_reduction(kernel: Kernel, plan: LoopPlan, outer_exprs, inner, merged_inner):
    """The plan with nested reduction loops, or None.

    A reduction over dims that do not merge into one (a batch norm's sums over ``N, H, W`` of
    ``[N, C, H, W]``: ``H*W`` is contiguous, ``N`` steps over the channels) runs one flat index
    ``j`` by default, and every access splits it with a division and a modulo: per vector lane
    (a gather), and by a run-time divisor when the sizes are symbolic (eight integer divisions
    per vector; a dynamic batch norm ran 3.5x slower than the static one). Nested instead, the
    leading dims are scalar loop variables around the inner loops, which walk the last dim as
    plain vectors; each pass reduces into a fresh accumulator merged into the row's running one
    (kernel.py). argmax/argmin keep the flat loop: their index is ``j``'s."""
    if len(merged_inner) < 2 or any(
        n.data.reduction_type in ("argmax", "argmin")
        for n in kernel.nodes
        if isinstance(n.data, Reduction)
    ):
        return None
    last = merged_inner[-1]
    if hint_int(last) < NEST_INNER_MIN:
        return None
    rq = [sym.Var(f"q{i}", s) for i, s in enumerate(merged_inner[:-1])]
    j = sym.Var("r0", last)
    full_inner = _expand(inner, merged_inner, [sym.as_expr(v) for v in rq] + [sym.as_expr(j)])
    out = LoopPlan(kernel, plan.row_sizes, last, False, 0, row_vars=plan.row_vars, j=j, rq=rq)
    for n in kernel.nodes:
        out.node_index[n.name] = kernel.node_vars(n, outer_exprs, full_inner)
    out.steps = _group_loops(kernel, out)
    out.forward_only = _find_forward_only(out)
    return out


def _concrete_inner(sizes: tuple) -> int:
    """The element count of the trailing dims after the last symbolic one."""
    n = 1
    for size in reversed(sizes):
        if sym.is_symbolic(size):
            break
        n *= size
    return n


def _find_forward_only(plan: LoopPlan) -> set:
    """Internal pointwise buffers read only inside their own inner loop, at the index they are
    stored at: their values can be passed along in registers and never written to memory."""
    kernel = plan.kernel
    out: set = set()
    loop_of = {}
    for k, step in enumerate(plan.steps):
        if isinstance(step, InnerLoop):
            for n in step.nodes:
                loop_of[n.name] = k
    candidates = {
        n.name: n
        for n in kernel.nodes
        if n.name in kernel.internal and isinstance(n.data, Pointwise) and n.name in loop_of
    }
    ok = dict.fromkeys(candidates, True)
    for n in kernel.nodes:
        index, rindex = plan.node_index[n.name]
        for r in reads_of(n, index, rindex):
            src = candidates.get(r.name)
            if src is None:
                continue
            s_index, _ = plan.node_index[src.name]
            same_loop = loop_of.get(n.name) == loop_of[src.name]
            if not same_loop or r.index != src.layout.offset_expr(s_index):
                ok[r.name] = False
    for name, good in ok.items():
        if good:
            out.add(name)
    return out


def _vectorizable(plan: LoopPlan, nodes) -> bool:
    """Vector code handles any access (strided ones become gathers); it only skips tiny loops
    and loops where a value written is read back at another position of the same loop."""
    if sym.is_symbolic(plan.inner_size):  # vector loops with a scalar tail suit every size
        return True
    return plan.inner_size >= 8 or plan.chunked


def _group_loops(kernel: Kernel, plan: LoopPlan) -> list:
    """Split a reduction kernel's nodes into per-row scalar work and shared inner loops."""
    steps: list = []
    current: list = []
    produced_in_loop: set = set()
    reductions_in_loop: set = set()

    def flush():
        nonlocal current
        if current:
            steps.append(InnerLoop(current, _vectorizable(plan, current)))
            current = []
            produced_in_loop.clear()
            reductions_in_loop.clear()

    for n in kernel.nodes:
        is_row_scalar = kernel.is_outer_node(n)
        index, rindex = plan.node_index[n.name]
        reads, _ = _accesses(n, index, rindex)
        read_names = {r.name for r in reads_of(n, index, rindex)}
        if is_row_scalar:
            flush()
            steps.append(("scalar", n))
            continue
        # a value reduced in this loop is only complete after it: start a new loop
        if read_names & reductions_in_loop:
            flush()
        elif read_names & produced_in_loop:
            # reading a pointwise value of this loop is fine at the same inner index only
            flush_needed = False
            for r in reads_of(n, index, rindex):
                if r.name in produced_in_loop:
                    src = next(x for x in current if x.name == r.name)
                    s_index, _ = plan.node_index[src.name]
                    if r.index != src.layout.offset_expr(s_index):
                        flush_needed = True
            if flush_needed:
                flush()
        current.append(n)
        produced_in_loop.add(n.name)
        if isinstance(n.data, Reduction):
            reductions_in_loop.add(n.name)
    flush()
    return steps


# columns per block of a column reduction (accumulators stay in L1; wider blocks measured faster:
# 1024x1024 sum(0) 0.19 ms with 64, 0.12 with 128, 0.10 with 256 on 2 threads)
COLUMN_BLOCK = 256
_COLUMN_REDUCTIONS = frozenset({"sum", "prod", "max", "min"})


def _column_plan(kernel: Kernel, plan: LoopPlan, outer, inner, merged_outer):
    """A plan that reduces over a strided dimension column by column, or None.

    ``x.sum(0)`` of a row-major ``[n, m]`` tensor (the bias gradient of a linear layer) walks
    memory by ``m`` elements per reduction step: one reduction per output is a gather per
    element and, across outputs, reads every cache line ``m / 16`` times. When the outputs'
    innermost dimension is the contiguous one instead, each row is split into blocks of
    ``COLUMN_BLOCK`` outputs whose accumulators are vector lanes: for each reduction step, one
    contiguous vector load per ``LANES`` outputs. Per-output pointwise work after the reductions
    (a bias gradient's cast) runs vectorized over the block too. Reductions whose value is
    combined in another order than the eager one are left alone (argmax/argmin, welford).
    """
    if not merged_outer or plan.j is None or sym.is_symbolic(tuple(merged_outer)):
        return None  # symbolic columns: their blocks would depend on the sizes
    if plan.j.size.__class__ is int and plan.j.size < 2:
        return None
    n_last = merged_outer[-1]
    if n_last < 8:
        return None
    row_vars = plan.row_vars
    x_last, j = row_vars[-1], plan.j
    prefix_rows = 1
    for size in merged_outer[:-1]:
        prefix_rows *= size
    # loads that need one scalar load per vector lane: along the reduction (the usual loops)
    # or along the columns (column loops); loads constant along the vector are splats in both
    gathers_r = gathers_x = 0
    for step in plan.steps:
        nodes = step.nodes if isinstance(step, InnerLoop) else [step[1]]
        for n in nodes:
            if n.dtype.is_floating_point is False and n.dtype.itemsize == 1:
                return None  # bool/byte values live as i1 in registers: keep the usual loops
            if isinstance(step, InnerLoop):
                if not isinstance(n.data, Reduction):
                    return None
                if n.data.reduction_type not in _COLUMN_REDUCTIONS:
                    return None
                if n.name in kernel.locals and n.data.dtype is not n.dtype:
                    return None
            elif isinstance(n.data, Reduction):
                return None
            index, rindex = plan.node_index[n.name]
            reads, indirect = _accesses(n, index, rindex)
            if indirect:
                return None
            for e in reads[:-1]:
                nonaffine = {
                    v for a in e.atoms() if not isinstance(a, sym.Var) for v in a.free_vars()
                }
                free = e.free_vars()
                # (a symbolic stride counts as a gather: it is 1 for some sizes at most)
                if j in free and (not sym.known("==", e.coeff(j), 1) or j in nonaffine):
                    gathers_r += 1
                if x_last in free and (
                    not sym.known("==", e.coeff(x_last), 1) or x_last in nonaffine
                ):
                    gathers_x += 1
    if gathers_x >= gathers_r:
        return None
    block = COLUMN_BLOCK
    while block > 64 and -(-n_last // block) * prefix_rows < 2:
        block //= 2  # two blocks at least, so that two threads share the work
    block = min(block, n_last)
    blocks = (n_last + block - 1) // block
    prefix = [sym.Var(f"x{i}", s) for i, s in enumerate(merged_outer[:-1])]
    xb = sym.Var(f"x{len(prefix)}", blocks)
    c = sym.Var("c0", block)
    r = sym.Var("r0", plan.j.size)
    outer_exprs = _expand(
        outer, merged_outer, [sym.as_expr(v) for v in prefix] + [sym.as_expr(xb) * block + c]
    )
    full_inner = _expand(inner, (r.size,), [sym.as_expr(r)])
    out = LoopPlan(
        kernel,
        tuple(merged_outer[:-1]) + (blocks,),
        block,
        False,
        0,
        row_vars=prefix + [xb],
        j=c,
        steps=plan.steps,
        columns=(n_last, block),
        rvar=r,
    )
    for n in kernel.nodes:
        out.node_index[n.name] = kernel.node_vars(n, outer_exprs, full_inner)
    return out
