"""``torch._inductor.config``: the knobs PyTorch scripts set before compiling.

kiln's compiler has few settings of its own (``kiln.compile(options=...)``: ``cpu_codegen``,
``partitioner``, and the kiln-only knobs at the top here); the other module attributes exist so
scripts that tune PyTorch's Inductor run unchanged. They are read by nothing unless noted: kiln
picks its own fusion, tiling and thread counts. Assigning a name not listed here works too (it is
a module).
"""

from __future__ import annotations

from types import SimpleNamespace

# kiln's own (read): how many bytes the in-memory compiled-graph index may hold, machine code of
# the graphs' kernels included, before dropping the least recently used. Code a live compiled
# function still runs is never freed; this bounds what a process keeps for graphs it may compile
# again, so one that compiles many distinct graphs stays flat.
compiled_graph_cache_bytes = 16 * 2**20

# kiln's own (read): until kernels take sizes as arguments, a graph with symbolic sizes gets a
# static kernel set for each concrete size that comes a second time (``specialize.py``), at most
# this many per graph; other sizes then run with the eager ops, so a loop over ever-new shapes
# (a growing context called again) never compiles without bound.
static_kernel_sets_per_graph = 8

# kiln's own (read): a graph whose kernels serve every size from 2 up runs a call with a size of 1
# with the eager ops this many times before compiling a static kernel set for it. A sequence length
# of 1 coming twice among 200 lengths cost a whole static compile (1-3 s) to save two eager calls
# of a few ms; a loop that keeps returning to it still gets its kernels.
unserved_size_eager_calls = 16

# kiln's own (read): compiled CPU code hands work to its helper threads only while the machine's
# load average leaves a core for them (OpenMP's ``OMP_DYNAMIC``; ``codegen/cpu_pool.py``). False:
# always, as ``set_num_threads`` says.
threads_follow_load = True

# kiln's own (read): a kernel that only copies one buffer in another layout (a permute made
# contiguous, a convolution's operand reordered) runs one kernel compiled for every size
# (``codegen/llvm/transposing_copy.py``) instead of a kernel of its own per size. False: each
# copy is emitted at its sizes (an A/B switch; part of the compiled-graph cache key).
copies_for_every_size = True

# kiln's own (read): float32 2-d convolutions of few channels (small CNNs' layers) run the
# direct register-tiled loops eager mode uses (``extern_convolution.py``) where those pay,
# forward, input and weight gradients, instead of columns copies and a BLAS product. False: the
# columns lowering for every convolution (an A/B switch; part of the compiled-graph cache key).
direct_convolutions = True

debug = False
verbose_progress = False
# read: False (or ``force_disable_caches``) compiles every graph afresh instead of rebuilding it
# from the compiled-graph cache (``graph_cache.py``)
fx_graph_cache = True
fx_graph_remote_cache = False
autotune_local_cache = True
autotune_remote_cache = False
force_disable_caches = False
max_autotune = False
max_autotune_gemm = False
max_autotune_pointwise = False
max_autotune_gemm_backends = "ATEN,TRITON,CPP"
coordinate_descent_tuning = False
coordinate_descent_check_all_directions = False
search_autotune_cache = False
epilogue_fusion = True
aggressive_fusion = False
benchmark_kernel = False
benchmark_fusion = False
freezing = False
freezing_discard_parameters = False
shape_padding = True
permute_fusion = False
layout_optimization = True
keep_output_stride = True
split_reductions = True
conv_1x1_as_mm = False
allow_buffer_reuse = True
inplace_buffers = True
memory_planning = False
size_asserts = True
nan_asserts = False
fallback_random = False
implicit_fallbacks = True
emulate_precision_casts = False
cpp_wrapper = False
compile_threads = 1
unroll_reductions_threshold = 8
realize_opcount_threshold = 30
use_mixed_mm = True
force_fuse_int_mm_with_mul = False
group_fusion = False
pattern_matcher = True
reorder_for_compute_comm_overlap = False
generate_intermediate_hooks = False
pre_grad_fusion_options: dict = {}
post_grad_fusion_options: dict = {}

triton = SimpleNamespace(
    cudagraphs=False,
    cudagraph_trees=True,
    cudagraph_skip_dynamic_graphs=False,
    unique_kernel_names=False,
    descriptive_names="original_aten",
    autotune_pointwise=True,
    autotune_cublasLt=True,
    max_tiles=2,
    tiling_prevents_pointwise_fusion=True,
    tiling_prevents_reduction_fusion=True,
    use_block_ptr=False,
    multi_kernel=0,
    persistent_reductions=True,
    divisible_by_16=True,
    store_cubin=False,
    spill_threshold=16,
)
cpp = SimpleNamespace(
    threads=-1,
    simdlen=None,
    dynamic_threads=False,
    enable_kernel_profile=False,
    vec_isa_ok=None,
    max_horizontal_fusion_size=16,
    fallback_scatter_reduce_sum=True,
    enable_unsafe_math_opt_flag=False,
    enable_floating_point_contract_flag=False,
    weight_prepack=True,
)
trace = SimpleNamespace(
    enabled=False,
    debug_log=False,
    info_log=False,
    fx_graph=True,
    fx_graph_transformed=True,
    ir_pre_fusion=True,
    ir_post_fusion=True,
    output_code=True,
    graph_diagram=False,
    compile_profile=False,
)
aot_inductor = SimpleNamespace(output_path="", debug_compile=False, package=False)
cuda = SimpleNamespace(arch=None, version=None, compile_opt_level="-O1")
