"""The Triton matmul template (``tl.dot``), with the following pointwise kernel fused as epilogue.

A scheduled ``mm``/``bmm`` extern call becomes a tiled matmul kernel when its operands are
float32, float16 or bfloat16. If the very next kernel is pointwise over the matmul's output
shape and reads the product only at the element it computes (bias add, activation, residual
add, a cast), that kernel's nodes are printed after the K loop, reading the accumulator from
registers: the product is then stored only if something else needs it. Block sizes come from a
small config list, clamped to the problem and autotuned on the GPU by the runtime.
"""

from __future__ import annotations

from ...runtime import dtypes as dt
from .. import sym
from ..dependencies import reads_of
from ..scheduler import ExternCall, Kernel
from ..virtualized import set_ops_handler
from .triton import KernelPrinter, Produced, SizeArgs, TritonConfig, next_power_of_2
from .triton_kernels import GeneratedKernel, print_node

__all__ = ["MATMUL_CONFIGS", "matmul_shapes", "fusable_epilogue", "generate_matmul"]

MATMUL_CONFIGS = [
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
]
_TEMPLATE_DTYPES = (dt.float32, dt.float16, dt.bfloat16)


def matmul_shapes(call: ExternCall):
    """(batch, M, N, K, layout_a, layout_b) when the template can compute ``call``, else None."""
    buf = call.buffer
    if buf.description != "matmul" or len(buf.inputs) != 2:
        return None
    if not all(isinstance(x, tuple) for x in buf.inputs):
        return None
    (a, la), (b, lb) = buf.inputs
    if not (la.dtype is lb.dtype is buf.dtype and buf.dtype in _TEMPLATE_DTYPES):
        return None
    if len(la.shape) != len(lb.shape) or len(la.shape) not in (2, 3):
        return None
    if not buf.layout.is_contiguous():
        return None
    batch = la.shape[0] if len(la.shape) == 3 else 1
    m, k = la.shape[-2:]
    k2, n = lb.shape[-2:]
    if not sym.same_size(k, k2) or (len(la.shape) == 3 and not sym.same_size(lb.shape[0], batch)):
        return None
    if any(s.__class__ is int and s == 0 for s in (m, n, batch)):
        return None
    return batch, m, n, k, la, lb


def _outer_vars(shape: tuple) -> list:
    return [
        sym.ZERO if s.__class__ is int and s == 1 else sym.Var(f"x{i}", s)
        for i, s in enumerate(shape)
    ]


def fusable_epilogue(call: ExternCall, kernel: Kernel) -> bool:
    """Whether ``kernel`` can run as the epilogue of the matmul ``call``."""
    buf = call.buffer
    shape = tuple(buf.layout.shape)
    if kernel.inner or len(kernel.outer) != len(shape):
        return False
    if not all(sym.same_size(a, b) for a, b in zip(kernel.outer, shape)):
        return False
    outer = _outer_vars(tuple(kernel.outer))
    here = buf.layout.offset_expr(outer)
    for node in kernel.nodes:
        index, rindex = kernel.node_vars(node, outer, [])
        for read in reads_of(node, index, rindex):
            if read.name == buf.name and read.index != here:
                return False
    return True


def tuning_configs(m: int, n: int, k: int, dtype: dt.dtype) -> list[dict]:
    """The config list clamped to the problem (tiny problems need no 128-wide tiles); float32
    (no tensor cores for IEEE products) skips the widest tile. A symbolic size is not clamped
    (the blocks serve every size; the masks cut the tails)."""
    out = []
    for c in MATMUL_CONFIGS:
        if dtype is dt.float32 and c["BLOCK_M"] * c["BLOCK_N"] > 128 * 128:
            continue
        c = dict(c)
        for block, size in (("BLOCK_M", m), ("BLOCK_N", n), ("BLOCK_K", k)):
            if size.__class__ is int:
                c[block] = min(c[block], max(16, next_power_of_2(size)))
        if c not in out:
            out.append(c)
    return out


def generate_matmul(
    call: ExternCall,
    epilogue: Kernel | None,
    name: str,
    must_store: set,
    buffers: dict,
    cfg: TritonConfig,
    comment: str = "",
) -> GeneratedKernel:
    """Print the matmul template for ``call`` with ``epilogue``'s nodes fused after the K loop."""
    batch, m, n, k, la, lb = matmul_shapes(call)
    buf = call.buffer
    out_shape = tuple(buf.layout.shape)
    batched = len(out_shape) == 3
    outer = _outer_vars(out_shape)
    xvars = {v for v in outer[-2:] if isinstance(v, sym.Var)}
    size_args = SizeArgs()
    z = size_args.text  # symbolic sizes, strides and offsets: integer arguments
    p = KernelPrinter(2, xvars, set(), must_store, buffers, size_args)
    p.outer_shape = p.full_shape = "[BLOCK_M, BLOCK_N]"
    p.rmask = None
    a_arg = p.arg(buf.inputs[0][0].name, la.dtype)
    b_arg = p.arg(buf.inputs[1][0].name, lb.dtype)
    sam, sak = la.stride[-2:]
    sbk, sbn = lb.stride[-2:]
    a_base = z(la.offset) + (f" + xb * {z(la.stride[0])}" if batched else "")
    b_base = z(lb.offset) + (f" + xb * {z(lb.stride[0])}" if batched else "")
    m_, n_, k_ = z(m), z(n), z(k)
    sam, sak, sbk, sbn = z(sam), z(sak), z(sbk), z(sbn)
    i64 = ".to(tl.int64)" if cfg.int64_indexing else ""
    precision = ""
    if la.dtype is dt.float32:
        precision = ', input_precision="tf32"' if cfg.matmul_tf32 else ', input_precision="ieee"'
    head = [
        "pid = tl.program_id(0)",
        f"num_pid_m = ({m_} + BLOCK_M - 1) // BLOCK_M",
        f"num_pid_n = ({n_} + BLOCK_N - 1) // BLOCK_N",
        "group_size = GROUP_M * num_pid_n",
        "first_m = (pid // group_size) * GROUP_M",
        "group_m = tl.minimum(num_pid_m - first_m, GROUP_M)",
        "pid_m = first_m + (pid % group_size) % group_m",
        "pid_n = (pid % group_size) // group_m",
        f"rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M){i64}",
        f"rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N){i64}",
        "rk = tl.arange(0, BLOCK_K)",
    ]
    if batched:
        head.append(f"xb = tl.program_id(1){i64}")
    head += [
        f"a_ptrs = {a_arg} + ({a_base}) + rm[:, None] * {sam} + rk[None, :] * {sak}",
        f"b_ptrs = {b_arg} + ({b_base}) + rk[:, None] * {sbk} + rn[None, :] * {sbn}",
        "acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)",
        f"for k in range(0, {k_}, BLOCK_K):",
        f"    a = tl.load(a_ptrs, mask=(rm[:, None] < {m_}) & (rk[None, :] < {k_} - k), other=0.0)",
        f"    b = tl.load(b_ptrs, mask=(rk[:, None] < {k_} - k) & (rn[None, :] < {n_}), other=0.0)",
        "    if UPCAST:",
        "        a = a.to(tl.float32)",
        "        b = b.to(tl.float32)",
        f"    acc = tl.dot(a, b, acc{precision})",
        f"    a_ptrs += BLOCK_K * {sak}",
        f"    b_ptrs += BLOCK_K * {sbk}",
    ]
    names = ["xb", "rm[:, None]", "rn[None, :]"][3 - len(out_shape) :]
    for v, text in zip(outer, names):
        if isinstance(v, sym.Var):
            head.append(f"{v.name} = {text}")
    head += [f"mmask = rm[:, None] < {m_}", f"nmask = rn[None, :] < {n_}", "xmask = mmask & nmask"]
    p.var_masks = {}
    for v, mask in zip(outer[-2:], ("mmask", "nmask")):
        if isinstance(v, sym.Var):
            p.var_masks[v.name] = mask
    for h in head:
        p.line(h)
    with set_ops_handler(p):
        value = p.emit("acc", dt.float32, True, False)
        value = p.to_dtype(value, buf.dtype)
        store_index = buf.layout.offset_expr(outer)
        p.store(buf.name, store_index, value, buf.dtype, False)
    p.pass_id = 1
    p.produced[buf.name] = Produced(value, store_index, 1, False, 0, False)
    origins = []
    if epilogue is not None:
        for node in epilogue.nodes:
            index, rindex = epilogue.node_vars(node, outer, [])
            print_node(p, node, index, rindex, "outer", False)
            origins.append(node.name)
    body = p.render()
    extra = size_args.used("\n".join(body))
    params = (
        list(p.args.values())
        + [name for name, _ in extra]
        + [f"{c}: tl.constexpr" for c in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "UPCAST")]
    )
    src = ["@triton.jit", f"def {name}({', '.join(params)}):"]
    what = f"{'b' if batched else ''}mm [{m}, {k}] x [{k}, {n}]" + (
        f" + epilogue {origins}" if origins else ""
    )
    what += f"; {comment}" if comment else ""  # the user's lines: in errors too
    src.append(f"    # {what}")
    src += ["    " + line for line in body]
    configs = tuning_configs(m, n, k, la.dtype)
    return GeneratedKernel(
        name=name,
        source="\n".join(src) + "\n",
        args=list(p.args.keys()),
        arg_dtypes=dict(p.arg_dtypes),
        sizes=[m, n, batch] + [v for _, v in extra],
        constexprs={},
        num_warps=4,
        grid=(),
        stored=set(p.stored),
        helpers=set(p.helpers),
        kind="matmul",
        comment=what,
        tune_configs=configs,
    )
