"""LLVM optimization and machine code for kernels, in this process or in a helper process.

llvmlite drives LLVM under one lock per process, so a process compiles one module at a time
however many threads ask: while the calling thread emits a graph's IR, the JIT's background
thread compiles what it has been handed, and once emission is done that thread alone is left
working (on a 2-core machine LLVM was then half of a cold compile's wall time, with a core
idle). A helper process, started with nothing but llvmlite, takes pieces too: the machine's
other core runs LLVM beside the background thread, and the objects come back over a pipe.

The module is both halves. ``jit`` imports the shared steps (target machine, pipeline, linking)
so that an object is the same wherever it was made; run as a script (``python object_worker.py
TRIPLE CPU FEATURES``) it serves requests on stdin/stdout until stdin closes, which is when its
parent exits or lets it go. It imports no part of kiln, so it starts in a fraction of a second.

Framing: a request is a count, then per kernel its function name and IR text (each a 4-byte
length and UTF-8 bytes); the answer is one status byte (0: object, 1: error text) and an 8-byte
length before the bytes.
"""

from __future__ import annotations

import struct
import sys

from llvmlite import binding as llvm

KERNEL_NAME = "kernel"  # every kernel's function name in its own IR

# LLVM command-line options every kiln compile runs under, in this process and the helper (they
# are LLVM's process-wide settings, so another llvmlite user in the process gets them too; the
# object cache's key includes them). Loop strength reduction rewrites a loop's address
# arithmetic into pointer increments: it was a fifth of code generation's time on the kernels
# of resnet18's and GPT-2 small's training steps (0.2 s of CPU each, about 8% of LLVM's time),
# and without it their compiled steps, and nanoGPT's, ran as fast (one thread's CPU time, A/B
# interleaved: within 1%). kiln's kernels index with plain multiplies that x86 addressing folds.
LLVM_OPTIONS = ("-disable-lsr",)


def set_llvm_options() -> None:
    """Apply ``LLVM_OPTIONS`` (once per process, before the first compile)."""
    for option in LLVM_OPTIONS:
        llvm.set_option("kiln", option)


def target_machine(triple: str, cpu: str, features: str, opt_level: int) -> llvm.TargetMachine:
    """The host's TargetMachine, as the JIT's engines and every object use."""
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(
        cpu=cpu,
        features=features,
        opt=min(max(opt_level, 0), 3),
        reloc="default",
        codemodel="jitdefault",
        jit=True,
    )


def optimize(
    module: llvm.ModuleRef, machine: llvm.TargetMachine, opt_level: int, vectorize: bool
) -> None:
    """LLVM's default new-pass-manager pipeline at ``opt_level`` over ``module``, in place
    (kernels are written with explicit vector types: LLVM's vectorizers only when asked)."""
    tuning = llvm.create_pipeline_tuning_options(speed_level=min(max(opt_level, 0), 3))
    tuning.loop_vectorization = vectorize
    tuning.slp_vectorization = vectorize
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)


def parsed(ir_text: str, triple: str, data_layout: str) -> llvm.ModuleRef:
    """Parse and verify IR, retargeted to the host (llvmlite.ir leaves the triple unknown)."""
    try:
        module = llvm.parse_assembly(ir_text)
        module.verify()
    except RuntimeError as error:
        raise RuntimeError(f"invalid LLVM IR: {error}") from None
    module.triple = triple
    module.data_layout = data_layout
    return module


def linked(parts: list[tuple[str, str]], triple: str, data_layout: str) -> llvm.ModuleRef:
    """One module of the kernels ``(function name, IR)``, each kernel's function renamed; the
    linker keeps each kernel's own copies of internal helpers apart."""
    module = None
    for name, text in parts:
        part = parsed(text, triple, data_layout)
        part.get_function(KERNEL_NAME).name = name
        if module is None:
            module = part
        else:
            module.link_in(part)
    return module


def kernels_object(
    parts: list[tuple[str, str]], machine: llvm.TargetMachine, opt_level: int = 3
) -> bytes:
    """The optimized object of the kernels ``parts``."""
    module = linked(parts, machine.triple, str(machine.target_data))
    optimize(module, machine, opt_level, False)
    return machine.emit_object(module)


# ---------------------------------------------------------------------- the pipe's framing
def write_request(stream, parts: list[tuple[str, str]]) -> None:
    chunks = [struct.pack("<I", len(parts))]
    for name, text in parts:
        for field in (name.encode(), text.encode()):
            chunks += [struct.pack("<I", len(field)), field]
    stream.write(b"".join(chunks))
    stream.flush()


def read_request(stream) -> list[tuple[str, str]] | None:
    """The next request's kernels, or None at the end of the stream."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    (count,) = struct.unpack("<I", head)
    parts = []
    for _ in range(count):
        name, text = (_read_exact(stream, _read_length(stream, 4)).decode() for _ in range(2))
        parts.append((name, text))
    return parts


def write_answer(stream, ok: bool, payload: bytes) -> None:
    stream.write(struct.pack("<BQ", 0 if ok else 1, len(payload)) + payload)
    stream.flush()


def read_answer(stream) -> tuple[bool, bytes]:
    head = _read_exact(stream, 9)
    status, length = struct.unpack("<BQ", head)
    return status == 0, _read_exact(stream, length)


def _read_length(stream, size: int) -> int:
    return struct.unpack("<I", _read_exact(stream, size))[0]


def _read_exact(stream, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError(f"the pipe closed after {len(data)} of {size} bytes")
    return data


def serve(triple: str, cpu: str, features: str) -> None:
    """Answer requests from stdin on stdout until stdin closes."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    set_llvm_options()
    machine = target_machine(triple, cpu, features, 3)
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        parts = read_request(source)
        if parts is None:
            return
        try:
            write_answer(sink, True, kernels_object(parts, machine))
        except Exception as error:  # noqa: BLE001 - reported to the parent, which compiles itself
            write_answer(sink, False, f"{type(error).__name__}: {error}".encode())


if __name__ == "__main__":
    serve(*sys.argv[1:4])
