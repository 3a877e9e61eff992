"""Matmuls of compiled CPU graphs: OpenBLAS ``gemm`` calls per block, on the kernels' threads.

numpy's OpenBLAS brings its own thread pool. Next to the threads that run the generated kernels,
that is two pools on the same cores: OpenBLAS's workers keep spinning for ~100 ms after each
call (taking a core from the kernels that follow), and a multithreaded BLAS call waits at
barriers for every worker, so a descheduled worker stalls it — on a shared 2-core machine a
1024x256x1024 product measured 2.2 ms at best but 10-15 ms typically, against ~4 ms typical
with the scheme below. Here a large float32/float64 product is cut into blocks of rows (or
columns, or matrices of a batch): a table of single-threaded row-major ``cblas_?gemm`` calls
(strided and transposed operands and results as they are) that ``codegen.cpu_pool`` runs on the
kernels' threads, claimed block by block in native code. One pool, no barrier inside BLAS.

OpenBLAS's thread count is process-wide: it is lowered to 1 for the duration of a product and
restored after (reference counted, so overlapping products from several Python threads restore
it once), and OpenBLAS's idle workers are stopped rather than left spinning (``runtime/blas.py``);
products too small to split run single-threaded through numpy. Without an ILP64 OpenBLAS that
numpy exposes (another BLAS vendor), products run as numpy runs them.
"""

from __future__ import annotations

import numpy as np

from ..runtime import flags
from ..runtime.blas import BLAS
from ..runtime.storage import data_address

__all__ = ["matmul_out", "matmul_batched_out", "matmul_16bit_out"]

# a split product is cut into this many blocks per thread, each taken by whichever thread is
# free (``cpu_pool``): on a core another process shares, a late thread costs one block
PARTS_PER_THREAD = 2

# split a product of at least this many multiply-adds (~40 us on one core): below, handing
# blocks to another thread gains too little
SPLIT_MACS = 1 << 21


def _threads() -> int:
    return flags.get_num_threads()


_NO, _T = 111, 112  # CblasNoTrans, CblasTrans


def _operand(x: np.ndarray):
    """``(transpose flag, leading dimension)`` of a strided matrix for row-major ``gemm``, or
    None when BLAS cannot read it as it is."""
    item = x.itemsize
    s0, s1 = x.strides[-2:]
    if s0 % item or s1 % item:
        return None
    s0, s1 = s0 // item, s1 // item
    r, c = x.shape[-2:]
    if c == 1:
        s1 = 1
    if r == 1:
        s0 = max(c, 1)
    if s1 == 1 and s0 >= max(c, 1):
        return _NO, s0
    if s0 == 1 and s1 >= max(r, 1):
        return _T, s1
    return None


def _batch_offsets(shape: tuple, strides: tuple) -> np.ndarray:
    """Byte offsets of the matrices of a batch, in ``np.ndindex`` order."""
    offsets = np.zeros(1, np.int64)
    for size, stride in zip(shape, strides):
        offsets = (offsets[:, None] + np.arange(size, dtype=np.int64) * stride).reshape(-1)
    return offsets


# block tables by the operands' shapes and strides (relative to their first elements): a
# program calls the same products again and again, and rebuilding a table costs up to as much
# as a small product; bounded, emptied when full (each holds a few hundred bytes)
_TABLES: dict = {}
TABLES_KEPT = 4096


def _gemm_table(out, a, b, parts: int):
    """The ``gemm`` calls computing ``out = a @ b`` in about ``parts`` blocks (whole matrices of
    a batch, else blocks of rows or columns of at least 64), as a ``cpu_pool`` gemm table; None
    when an operand's strides are not BLAS's. The blocks are worked out once per set of shapes
    and strides (``_block_table``); a call adds its operands' addresses."""
    key = (out.shape, out.strides, a.shape, a.strides, b.shape, b.strides, out.itemsize, parts)
    blocks = _TABLES.get(key)
    if blocks is None:
        blocks = _block_table(out, a, b, parts)
        if len(_TABLES) >= TABLES_KEPT:
            _TABLES.clear()
        _TABLES[key] = blocks
    if blocks is False:
        return None
    relative, swapped = blocks
    pa, pb, pc = (data_address(x) for x in (a, b, out))
    table = relative.copy()
    table[:, 5] += pb if swapped else pa
    table[:, 7] += pa if swapped else pb
    table[:, 9] += pc
    return table


def _block_table(out, a, b, parts: int):
    """``(table, swapped)``: the gemm table of ``_gemm_table`` with every operand starting at
    address 0, and whether its A and B columns hold ``b`` and ``a`` (a transposed result is
    computed as ``b^T a^T``); False when an operand's strides are not BLAS's.

    Built with array arithmetic, a column at a time (a Python loop over the blocks took ~200 us
    for the 16 matrices of a GPT attention product, as long as the product on one core)."""
    from .codegen.cpu_pool import GEMM_FIELDS

    batch = out.shape[:-2]
    a = np.broadcast_to(a, batch + a.shape[-2:]) if a.shape[:-2] != batch else a
    b = np.broadcast_to(b, batch + b.shape[-2:]) if b.shape[:-2] != batch else b
    oa, ob, oc = _operand(a), _operand(b), _operand(out)
    if oa is None or ob is None or oc is None:
        return False
    m, n = out.shape[-2:]
    k = a.shape[-1]
    item = out.itemsize
    (ta, lda), (tb, ldb), (tc, ldc) = oa, ob, oc
    count = 1
    for s in batch:
        count *= s
    per = max(1, -(-parts // count))
    split_rows = m >= n
    size = m if split_rows else n
    per = max(1, min(per, size // 64))
    step = -(-size // per)
    # each matrix of the batch is a row of blocks; each block starts at row or column ``lo``,
    # which advances an operand by its leading dimension when it is stored that way round
    ba, bb, bc = (_batch_offsets(batch, x.strides[:-2])[:, None] for x in (a, b, out))
    lo = np.arange(0, size, step, dtype=np.int64)[None, :]
    extent = np.minimum(lo + step, size) - lo
    if split_rows:
        ca = ba + lo * item * (lda if ta == _NO else 1)
        cb = bb
        cc = bc + lo * item * (ldc if tc == _NO else 1)
        mm, nn = extent, n
    else:
        ca = ba
        cb = bb + lo * item * (1 if tb == _NO else ldb)
        cc = bc + lo * item * (1 if tc == _NO else ldc)
        mm, nn = m, extent
    swapped = tc != _NO
    if not swapped:
        fields = (ta, tb, mm, nn, k, ca, lda, cb, ldb, cc, ldc)
    else:  # a transposed result: its transpose is b^T a^T, row-major
        flip = {_NO: _T, _T: _NO}
        fields = (flip[tb], flip[ta], nn, mm, k, cb, ldb, ca, lda, cc, ldc)
    table = np.empty((count, lo.shape[1], GEMM_FIELDS), np.int64)
    for column, value in enumerate(fields):
        table[:, :, column] = value
    return table.reshape(-1, GEMM_FIELDS), swapped


def _parallel(out, a, b) -> bool:
    """Compute ``a @ b`` into ``out`` as blocks of BLAS calls shared by the kernel threads;
    False when it should not be split (small, one thread, a dtype or strides BLAS's ``gemm``
    does not take, or no ILP64 OpenBLAS to call)."""
    threads = _threads()
    if threads < 2 or out.size == 0 or out.dtype not in (np.float32, np.float64):
        return False
    if a.dtype != out.dtype or b.dtype != out.dtype:
        return False
    if out.size * a.shape[-1] < SPLIT_MACS or not BLAS.load() or not BLAS.gemm:
        return False
    from .codegen.cpu_pool import DGEMM, SGEMM, Pool, thread_pool

    pool = thread_pool()
    if not pool.parallel:
        return False
    table = _gemm_table(out, a, b, threads * PARTS_PER_THREAD)
    if table is None or len(table) < 2:
        return False
    single = out.dtype == np.float32
    job = Pool.gemm_job(SGEMM if single else DGEMM, BLAS.gemm[0 if single else 1], table)
    with BLAS:
        pool.run_job(job)
    return True


def matmul_out(out, a, b) -> None:
    """``out[...] = a @ b`` (2-d or batched). A product too small to split runs on this thread
    alone: OpenBLAS would hand a mid-sized one (64x64x192) to its second thread, and on a busy
    machine wait milliseconds at the barrier for it."""
    if _parallel(out, a, b):
        return
    if out.dtype.kind == "f" and out.size and BLAS.load():
        with BLAS:
            np.matmul(a, b, out=out)
    else:
        np.matmul(a, b, out=out)


def matmul_batched_out(out, a, b) -> None:
    """Operands with the batch split in several dims (``[8, 4, 128, 64]`` for a ``bmm`` over 32
    matrices): the result is the contiguous ``[32, m, n]`` buffer seen with the same split."""
    matmul_out(out.reshape(a.shape[:-2] + out.shape[-2:]), a, b)


def matmul_16bit_out(out, a, b) -> None:
    """16-bit floats multiply in float32, rounded once (numpy has no bfloat16 matmul)."""
    np.copyto(out, np.matmul(a.astype(np.float32), b.astype(np.float32)), casting="unsafe")
