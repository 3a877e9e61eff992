"""The LLVM code generator for CPU kernels (llvmlite IR, JIT-compiled for the host).

A scheduled kernel goes through these modules in order: ``loop_plan`` lays out its loops,
``kernel`` emits one IR function for it (``KernelEmitter``, whose column-reduction half is the
base class in ``columns``), running the loop bodies against the ops handler in ``ops_handler``
(``LLVMOps``); ``math_library`` supplies vectorized float math, ``values`` the IR types and the
vector width, and ``jit`` compiles the module to machine code (cached on disk).
``codegen.cpu`` drives them per graph. Imports point one way, in that order: ``kernel`` >
``columns`` > ``ops_handler`` > ``values``/``math_library``/``jit`` (checked by the import
contract in pyproject.toml).
"""
