"""Tunable limits of the capture frontend (module attributes, like ``torch._dynamo.config``)."""

from __future__ import annotations

import sys
import types

# compiled versions kept per code object before it runs eagerly (with one warning)
recompile_limit = 8
# the same when the guard that failed is a tensor's shape (sizes that change become symbolic, so
# this is rarely reached): past this many entries a new shape runs eagerly without a warning
# (and without giving up on the shapes already compiled); with ``kiln.compile(...,
# dynamic=False)`` shapes count against ``recompile_limit`` like anything else
shape_recompile_limit = 8
# recompiles one int/float input may cause by changing value; after that it is no longer baked
# into graphs (a graph break where its value is needed) instead of recompiling on every value
scalar_recompiles = 2
# user-function calls inlined inside each other before the innermost runs on its own
inline_depth_limit = 32
# instructions evaluated in one capture (a long constant loop unrolls into this many)
instruction_limit = 200_000
# capture attempts per frame (each graph break found restarts the capture once)
restart_limit = 32
# an internal error while capturing runs the frame eagerly (logged) instead of raising
suppress_errors = True
# PyTorch's automatic dynamic shapes: a size that changed between calls is symbolic in the next
# capture, so the second graph serves every size (False: every new shape compiles)
automatic_dynamic_shapes = True
# Python's cyclic garbage collector is paused while a frame is captured and compiled: capture
# allocates hundreds of thousands of objects, and each full collection walks every object the
# process holds (after a first compile, a second one spent most of its time there); the
# garbage of the compile is collected after it, as usual
pause_gc_while_compiling = True
# regional compilation (``regional_split``): a graph the inductor compiles is cut around the
# calls of a module class made at least ``regional_min_repeats`` times, each over at least
# ``regional_min_ops`` ops, and identical pieces are compiled once (a transformer's blocks)
regional_compile = True
regional_min_repeats = 3
regional_min_ops = 16

# PyTorch knobs scripts set or print, with PyTorch's defaults: kiln reads none of them (no DDP
# graph splitting; .item() of an integer tensor and nonzero/unique are always captured as
# data-dependent sizes), they only have to exist
verbose = False
assume_static_by_default = True
capture_scalar_outputs = False
capture_dynamic_output_shape_ops = False
optimize_ddp = True
accumulated_recompile_limit = 256
specialize_int = False
specialize_float = False
inline_inbuilt_nn_modules = True
guard_nn_modules = True
skip_nnmodule_hook_guards = True
force_parameter_static_shapes = True
dynamic_shapes = True
allow_rnn = False
raise_on_ctx_manager_usage = True
replay_record_enabled = False
fail_on_recompile_limit_hit = False


class _ConfigModule(types.ModuleType):
    """PyTorch code sets ``torch._dynamo.config.cache_size_limit``, the older name of
    ``recompile_limit``: both names read and write one value."""

    @property
    def cache_size_limit(self) -> int:
        return self.recompile_limit

    @cache_size_limit.setter
    def cache_size_limit(self, value: int) -> None:
        self.recompile_limit = value

    @property
    def accumulated_cache_size_limit(self) -> int:
        return self.accumulated_recompile_limit

    @accumulated_cache_size_limit.setter
    def accumulated_cache_size_limit(self, value: int) -> None:
        self.accumulated_recompile_limit = value

    # ``disable`` and ``error_on_recompile`` act through the compiler's stance (read on every
    # call at no extra cost): compiled functions run eagerly, or a recompile raises
    @property
    def disable(self) -> bool:
        return _stance_is("force_eager")

    @disable.setter
    def disable(self, value: bool) -> None:
        _set_stance("force_eager" if value else "default")

    @property
    def error_on_recompile(self) -> bool:
        return _stance_is("fail_on_recompile")

    @error_on_recompile.setter
    def error_on_recompile(self, value: bool) -> None:
        _set_stance("fail_on_recompile" if value else "default")


def _stance_is(name: str) -> bool:
    from .stance import current

    return current().stance == name


def _set_stance(name: str) -> None:
    from .stance import set_stance

    set_stance(name)


sys.modules[__name__].__class__ = _ConfigModule
