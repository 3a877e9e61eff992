"""Code generators: LLVM (CPU) kernels through llvmlite, Triton (GPU) kernels."""
