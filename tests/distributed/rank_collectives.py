"""Run inside each rank (``mpiexec -n N python rank_collectives.py``): every collective, sync
and async, against a numpy reference computed from all ranks' inputs.

Each rank's input for a check is a deterministic function of (rank, check), so every rank can
compute what all ranks hold and apply the numpy reference itself. Values are small integers
(exact in every dtype, whatever the reduction order), plus one float32 check with random values.
Results go to the test through ``emit``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import kiln
import kiln.distributed as dist
import kiln.distributed.nn.functional as dfn
from tests.distributed.launch import Checks, emit

dist.init_process_group("gloo")  # accepted on CPU: runs on the MPI backend
rank, world = dist.get_rank(), dist.get_world_size()
check = Checks()

DTYPES = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16, "int8": np.int8, "int16": np.int16, "int32": np.int32,
    "int64": np.int64, "uint8": np.uint8, "bool": np.bool_, "complex64": np.complex64,
    "complex128": np.complex128,
}  # fmt: skip


def values(r: int, shape, dtype: str, key: int) -> np.ndarray:
    """Rank r's input: small integers (non-negative for uint8, True/False for bool)."""
    g = np.random.default_rng(1000 * key + r)
    ints = g.integers(0 if dtype == "uint8" else -3, 4, size=shape)
    if dtype == "bool":
        return ints > 0
    if dtype.startswith("complex"):
        return (ints + 1j * g.integers(-3, 4, size=shape)).astype(DTYPES[dtype])
    return ints.astype(DTYPES[dtype])


def tensor(a: np.ndarray) -> kiln.Tensor:
    return kiln.tensor(a) if a.dtype != ml_dtypes.bfloat16 else kiln.from_numpy(a.copy())


def same(t: kiln.Tensor, expected: np.ndarray) -> None:
    got = t.numpy()
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    np.testing.assert_array_equal(got.astype(np.float64) if got.dtype == ml_dtypes.bfloat16 else got,
                                  expected.astype(np.float64) if got.dtype == ml_dtypes.bfloat16
                                  else expected)  # fmt: skip


def wait(work, async_op: bool) -> None:
    if async_op:
        assert work is not None and work.wait() is True and work.is_completed()
    else:
        assert work is None


REDUCE = {
    "SUM": lambda xs: np.sum(xs, axis=0, dtype=xs.dtype),
    "PRODUCT": lambda xs: np.prod(xs, axis=0, dtype=xs.dtype),
    "MAX": lambda xs: np.max(xs, axis=0),
    "MIN": lambda xs: np.min(xs, axis=0),
}


def reference(op: str, dtype: str, stacked: np.ndarray) -> np.ndarray:
    if dtype == "bool":
        logical = {"SUM": np.any, "MAX": np.any, "PRODUCT": np.all, "MIN": np.all}[op]
        return logical(stacked, axis=0)
    if dtype in ("float16", "bfloat16"):  # MPI has no half arithmetic: float32, rounded once
        wide = stacked.astype(np.float32)
        out = np.mean(wide, axis=0) if op == "AVG" else REDUCE[op](wide)
        return out.astype(DTYPES[dtype])
    if op == "AVG":
        return (np.sum(stacked, axis=0) / world).astype(stacked.dtype)
    return REDUCE[op](stacked)


OPS_FOR = {
    "bool": ["SUM", "PRODUCT", "MAX", "MIN"],
    "complex64": ["SUM", "PRODUCT", "AVG"],
    "complex128": ["SUM", "AVG"],
}
key = 0
for dtype in DTYPES:
    floating = dtype.startswith(("float", "bfloat", "complex"))
    ops = OPS_FOR.get(dtype, ["SUM", "PRODUCT", "MAX", "MIN"] + (["AVG"] if floating else []))
    for op in ops:
        for async_op in (False, True):
            key += 1

            @check(f"all_reduce {op} {dtype} {'async' if async_op else 'sync'}")
            def _(op=op, dtype=dtype, async_op=async_op, key=key):
                t = tensor(values(rank, (3, 5), dtype, key))
                work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=async_op)
                wait(work, async_op)
                everyone = np.stack([values(r, (3, 5), dtype, key) for r in range(world)])
                same(t, reference(op, dtype, everyone))


@check("all_reduce float32 random values")
def _():
    g = [
        np.random.default_rng(77 + r).standard_normal(1000).astype(np.float32) for r in range(world)
    ]
    t = kiln.tensor(g[rank])
    dist.all_reduce(t)
    np.testing.assert_allclose(t.numpy(), np.sum(g, axis=0), rtol=1e-6, atol=1e-6)


@check("all_reduce of a non-contiguous view writes through")
def _():
    base = values(rank, (4, 6), "float32", 500)
    t = kiln.tensor(base)
    view = t.t()[1:5]  # strided
    work = dist.all_reduce(view, op=dist.ReduceOp.MAX, async_op=True)
    work.wait()
    expected = base.copy()
    expected.T[1:5] = np.max([values(r, (4, 6), "float32", 500).T[1:5] for r in range(world)], 0)
    np.testing.assert_array_equal(t.numpy(), expected)
    assert work.result()[0] is view


@check("all_reduce bumps the version counter (autograd sees the in-place write)")
def _():
    t = kiln.ones(3)
    before = t._version
    dist.all_reduce(t)
    assert t._version > before


for async_op in (False, True):
    mode = "async" if async_op else "sync"

    @check(f"broadcast every dtype from the last rank, {mode}")
    def _(async_op=async_op):
        for k, dtype in enumerate(DTYPES):
            t = tensor(values(rank, (2, 3), dtype, 600 + k))
            wait(dist.broadcast(t, src=world - 1, async_op=async_op), async_op)
            same(t, values(world - 1, (2, 3), dtype, 600 + k))

    @check(f"reduce to rank 1 (others unchanged), {mode}")
    def _(async_op=async_op):
        dst = 1 % world
        t = tensor(values(rank, (5,), "int64", 700))
        wait(dist.reduce(t, dst=dst, op=dist.ReduceOp.SUM, async_op=async_op), async_op)
        everyone = np.stack([values(r, (5,), "int64", 700) for r in range(world)])
        same(t, everyone.sum(0) if rank == dst else everyone[rank])

    @check(f"all_gather into a list, bfloat16, {mode}")
    def _(async_op=async_op):
        out = [kiln.zeros(2, 2, dtype=kiln.bfloat16) for _ in range(world)]
        inp = tensor(values(rank, (2, 2), "bfloat16", 800))
        wait(dist.all_gather(out, inp, async_op=async_op), async_op)
        for r in range(world):
            same(out[r], values(r, (2, 2), "bfloat16", 800))

    @check(f"all_gather_into_tensor, concatenated and stacked, {mode}")
    def _(async_op=async_op):
        inp = tensor(values(rank, (2, 3), "int32", 900))
        everyone = [values(r, (2, 3), "int32", 900) for r in range(world)]
        cat = kiln.zeros(2 * world, 3, dtype=kiln.int32)
        wait(dist.all_gather_into_tensor(cat, inp, async_op=async_op), async_op)
        same(cat, np.concatenate(everyone))
        stacked = kiln.zeros(world, 2, 3, dtype=kiln.int32).transpose(1, 2)  # non-contiguous
        stacked = stacked.transpose(1, 2)
        wait(dist.all_gather_into_tensor(stacked, inp, async_op=async_op), async_op)
        same(stacked, np.stack(everyone))

    @check(f"reduce_scatter_tensor SUM and AVG, {mode}")
    def _(async_op=async_op):
        inp = tensor(values(rank, (world * 2, 3), "float64", 1000))
        everyone = np.stack([values(r, (world * 2, 3), "float64", 1000) for r in range(world)])
        for op, ref in (("SUM", everyone.sum(0)), ("AVG", everyone.sum(0) / world)):
            out = kiln.zeros(2, 3, dtype=kiln.float64)
            work = dist.reduce_scatter_tensor(
                out, inp, op=getattr(dist.ReduceOp, op), async_op=async_op
            )
            wait(work, async_op)
            same(out, ref[2 * rank : 2 * rank + 2])

    @check(f"reduce_scatter of a list, {mode}")
    def _(async_op=async_op):
        ins = [tensor(values(rank, (4,), "int16", 1100 + j)) for j in range(world)]
        out = kiln.zeros(4, dtype=kiln.int16)
        wait(dist.reduce_scatter(out, ins, async_op=async_op), async_op)
        same(
            out,
            np.sum([values(r, (4,), "int16", 1100 + rank) for r in range(world)], 0).astype(
                np.int16
            ),
        )

    @check(f"gather to rank 0 and scatter from the last rank, {mode}")
    def _(async_op=async_op):
        inp = tensor(values(rank, (3,), "float16", 1200))
        bucket = [kiln.zeros(3, dtype=kiln.float16) for _ in range(world)] if rank == 0 else None
        wait(dist.gather(inp, bucket, dst=0, async_op=async_op), async_op)
        if rank == 0:
            for r in range(world):
                same(bucket[r], values(r, (3,), "float16", 1200))
        src = world - 1
        pieces = [tensor(values(j, (2, 2), "uint8", 1300)) for j in range(world)]
        out = kiln.zeros(2, 2, dtype=kiln.uint8)
        wait(
            dist.scatter(out, pieces if rank == src else None, src=src, async_op=async_op), async_op
        )
        same(out, values(rank, (2, 2), "uint8", 1300))

    @check(f"all_to_all_single, even and uneven splits, {mode}")
    def _(async_op=async_op):
        inp = kiln.tensor(np.arange(world * 2 * 3).reshape(world * 2, 3) + 100 * rank)
        out = kiln.zeros(world * 2, 3, dtype=kiln.int64)
        wait(dist.all_to_all_single(out, inp, async_op=async_op), async_op)
        expected = np.concatenate(
            [(np.arange(world * 2 * 3).reshape(world * 2, 3) + 100 * r)[2 * rank : 2 * rank + 2]
             for r in range(world)]
        )  # fmt: skip
        same(out, expected)
        # rank r sends j + 1 rows to rank j
        sends = [j + 1 for j in range(world)]
        inp = kiln.tensor(np.full((sum(sends), 2), rank, np.float32))
        receives = [rank + 1] * world
        out = kiln.zeros(sum(receives), 2)
        work = dist.all_to_all_single(out, inp, receives, sends, async_op=async_op)
        wait(work, async_op)
        same(out, np.repeat(np.arange(world, dtype=np.float32), rank + 1)[:, None].repeat(2, 1))

    @check(f"barrier, {mode}")
    def _(async_op=async_op):
        wait(dist.barrier(async_op=async_op), async_op)


@check("send/recv and isend/irecv around a ring, recv from any rank")
def _():
    right, left = (rank + 1) % world, (rank - 1) % world
    if world == 1:
        return
    out = kiln.tensor(values(rank, (4,), "float32", 1400))
    got = kiln.zeros(4)
    sent = dist.isend(out, dst=right)
    received = dist.irecv(got, src=left)
    sent.wait()
    received.wait()
    same(got, values(left, (4,), "float32", 1400))
    if rank == 0:
        for _ in range(world - 1):
            got = kiln.zeros(1, dtype=kiln.int64)
            sender = dist.recv(got)
            assert got.item() == 10 * sender, (got.item(), sender)
    else:
        dist.send(kiln.tensor([10 * rank]), dst=0)


@check("object collectives")
def _():
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "items": list(range(rank))})
    assert gathered == [{"rank": r, "items": list(range(r))} for r in range(world)]
    objects = [f"from {rank}", rank * 1.5, None] if rank == world - 1 else [None, None, None]
    dist.broadcast_object_list(objects, src=world - 1)
    assert objects == [f"from {world - 1}", (world - 1) * 1.5, None]
    collected = [None] * world if rank == 0 else None
    dist.gather_object(("x" * rank, rank), collected, dst=0)
    if rank == 0:
        assert collected == [("x" * r, r) for r in range(world)]


@check("new_group of the first and last rank")
def _():
    members = sorted({0, world - 1})
    group = dist.new_group(members)
    if rank not in members:
        assert group is dist.GroupMember.NON_GROUP_MEMBER
        assert dist.all_reduce(kiln.ones(1), group=group) is None
        return
    assert dist.get_world_size(group) == len(members)
    assert dist.get_rank(group) == members.index(rank)
    t = kiln.tensor([float(rank)])
    dist.all_reduce(t, group=group)
    assert t.item() == sum(members)
    t = kiln.tensor([float(rank)])
    dist.broadcast(t, src=members[-1], group=group)  # src is a global rank
    assert t.item() == members[-1]


@check("argument errors name the problem")
def _():
    def raises(kind, fn, words):
        try:
            fn()
        except kind as e:
            assert all(w in str(e) for w in words), str(e)
            return
        raise AssertionError(f"expected {kind.__name__}")

    raises(ValueError, lambda: dist.all_gather([kiln.zeros(1)] * (world + 1), kiln.zeros(1)),
           ["tensor_list", str(world + 1)])  # fmt: skip
    raises(ValueError, lambda: dist.broadcast(kiln.zeros(1), src=world), ["src", str(world)])
    raises(ValueError, lambda: dist.all_gather_into_tensor(kiln.zeros(world + 1), kiln.zeros(1)),
           ["output tensor"])  # fmt: skip
    raises(RuntimeError, lambda: dist.all_reduce(kiln.ones(2, dtype=kiln.int64),
           op=dist.ReduceOp.AVG), ["AVG", "int64"])  # fmt: skip
    raises(ValueError, lambda: dist.all_reduce(kiln.ones(2, dtype=kiln.complex64),
           op=dist.ReduceOp.MAX), ["complex"])  # fmt: skip
    raises(TypeError, lambda: dist.all_reduce([1.0]), ["tensor"])


@check("autograd-aware collectives: values and gradients")
def _():
    c = [float(r + 1) for r in range(world)]
    x = kiln.tensor(values(rank, (3,), "float64", 1500), requires_grad=True)
    (dfn.all_reduce(x * 2.0) * c[rank]).sum().backward()
    # d/dx_rank of sum_r c_r * sum_s 2 x_s = 2 * sum(c)
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 2.0 * sum(c)))
    x.grad = None
    pieces = dfn.all_gather(x)
    for r in range(world):
        np.testing.assert_array_equal(pieces[r].detach().numpy(), values(r, (3,), "float64", 1500))
    sum(p * (r + 1) for r, p in enumerate(pieces)).sum().backward()
    # every rank's loss uses x_rank with weight rank+1: the gradient sums over ranks
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, world * (rank + 1.0)))
    x.grad = None
    y = dfn.broadcast(x, src=0)
    (y * c[rank]).sum().backward()
    expected = np.full(3, sum(c)) if rank == 0 else np.zeros(3)
    np.testing.assert_allclose(x.grad.numpy(), expected)
    x.grad = None
    stacked = [x * float(j + 1) for j in range(world)]
    mine = dfn.reduce_scatter(kiln.zeros(3, dtype=kiln.float64), stacked)
    np.testing.assert_allclose(
        mine.detach().numpy(),
        (rank + 1) * np.sum([values(r, (3,), "float64", 1500) for r in range(world)], 0),
    )
    mine.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, world * (world + 1) / 2))


@check("a compiled function calling collectives breaks its graph there and runs them eagerly")
def _():
    def f(x):
        y = x * 2.0
        dist.all_reduce(y)
        return dfn.all_reduce(y + 1.0).sum()

    x = kiln.tensor(values(rank, (3,), "float32", 1600))
    got = kiln.compile(f, backend="eager")(x)
    total = np.sum([values(r, (3,), "float32", 1600) for r in range(world)], 0)
    np.testing.assert_allclose(got.item(), np.sum(world * (2.0 * total + 1.0)), rtol=1e-6)


dist.destroy_process_group()
assert not dist.is_initialized()
emit({"rank": rank, "world": world, "checks": check.results})
