"""Why capture stopped: graph-break reasons, their categories and hints, and the user-facing errors.

Every graph break is an ``Unsupported`` raised somewhere in the symbolic evaluator; it carries a
``BreakReason`` naming a *kind* from the table below (category + one-line hint), a message and the
user's ``file:line``. ``fullgraph=True`` turns a break into ``GraphBreakError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "USER_ERROR",
    "UNSUPPORTED",
    "FUNDAMENTAL",
    "BREAK_KINDS",
    "BreakReason",
    "TorchDynamoException",
    "Unsupported",
    "GraphBreakError",
    "TorchRuntimeError",
    "InternalTorchDynamoError",
    "BackendCompilerFailed",
    "RecompileError",
    "InvalidBackend",
    "SkipFrame",
    "UserError",
    "unsupported",
]

USER_ERROR = "user error"
UNSUPPORTED = "unsupported-but-fixable"
FUNDAMENTAL = "fundamental"

# kind -> (category, one-line hint for the user)
BREAK_KINDS: dict[str, tuple[str, str]] = {
    "overlapping_inputs": (
        UNSUPPORTED,
        "pass separate tensors (or one tensor and slice it inside): inputs that view overlapping "
        "memory run eagerly, since a write through one must show in the other",
    ),
    "data_dependent_branch": (
        FUNDAMENTAL,
        "branch on shapes or Python values, or use kiln.where(cond, a, b) to keep both sides",
    ),
    "data_dependent_value": (
        FUNDAMENTAL,
        "keep the value as a tensor (avoid .item()/.tolist()/bool()/int() inside compiled code)",
    ),
    "data_dependent_shape": (
        FUNDAMENTAL,
        "ops like nonzero or boolean-mask indexing have value-dependent shapes; use kiln.where",
    ),
    "unbacked_branch": (
        FUNDAMENTAL,
        "a branch (or a Python int) needs a size only known when the graph runs (nonzero's "
        "count, .item()); state what you know with kiln._check(n >= 0) / "
        "kiln.sym_constrain_range(n, min=, max=), or keep the value as a tensor",
    ),
    "unbacked_value": (
        FUNDAMENTAL,
        "a size computed by the graph is needed as a Python value outside it; return the "
        "tensor instead",
    ),
    "opaque_function": (
        FUNDAMENTAL,
        "this function is implemented in C (or has side effects kiln cannot see); "
        "move the call outside the compiled function",
    ),
    "higher_order_grad": (
        FUNDAMENTAL,
        "a gradient taken with create_graph=True: the graph before it runs with the eager ops, "
        "so that gradient can be differentiated again (a compiled region's backward cannot be)",
    ),
    "print": (
        UNSUPPORTED,
        "print() runs eagerly between graphs; remove it from hot code to get a single graph",
    ),
    "user_exception": (
        USER_ERROR,
        "the code raises an exception; it runs eagerly so the same error reaches the caller",
    ),
    "unsupported_bytecode": (
        UNSUPPORTED,
        "this Python construct is not captured yet; the surrounding code runs eagerly",
    ),
    "unsupported_object": (
        UNSUPPORTED,
        "kiln cannot model this object's behaviour; pass tensors and plain Python values instead",
    ),
    "op_not_implemented": (
        UNSUPPORTED,
        "the op lacks a piece capture needs (a meta/fake function): register it (a custom op's "
        "register_fake) or call the op outside the compiled function",
    ),
    "unsupported_tensor_op": (
        UNSUPPORTED,
        "this tensor operation changes Python-level state (hooks, requires_grad, .grad)",
    ),
    "inline_failed": (
        UNSUPPORTED,
        "a called function could not be inlined; it is compiled on its own instead",
    ),
    "side_effect": (
        UNSUPPORTED,
        "this mutation cannot be replayed after the graph; do it outside the compiled function",
    ),
    "module_hooks": (
        UNSUPPORTED,
        "modules with forward/backward hooks are called eagerly; remove the hooks to capture them",
    ),
    "dynamic_scalar": (
        UNSUPPORTED,
        "a Python number that changes between calls is computed with eagerly instead of "
        "recompiling each time; pass it as a tensor to keep it in the graph",
    ),
    "recursion": (
        UNSUPPORTED,
        "call nesting is too deep to inline; the innermost call runs on its own",
    ),
}


@dataclass
class BreakReason:
    """One graph break: what, where (user file:line and function) and how to avoid it."""

    kind: str
    message: str
    filename: str = "<unknown>"
    lineno: int = 0
    function: str = ""
    user_stack: list[str] = field(default_factory=list)

    @property
    def category(self) -> str:
        return BREAK_KINDS[self.kind][0]

    @property
    def hint(self) -> str:
        return BREAK_KINDS[self.kind][1]

    @property
    def location(self) -> str:
        return f"{self.filename}:{self.lineno}"

    @property
    def reason(self) -> str:
        """PyTorch's name for the message (``explain(...).break_reasons[i].reason``)."""
        return self.message

    def __str__(self) -> str:
        return f"{self.message} [{self.category}] at {self.location}"


class TorchDynamoException(RuntimeError):  # noqa: N818 - PyTorch's name
    """Base of the capture frontend's errors (PyTorch's name: ``except
    torch._dynamo.exc.TorchDynamoException`` in user code catches kiln's too)."""


class Unsupported(TorchDynamoException):  # noqa: N818 - Dynamo's name for the same idea
    """Raised inside the symbolic evaluator: this instruction cannot be captured (a graph break).
    ``fullgraph=True`` raises its subclass ``GraphBreakError``, so user code catching
    ``torch._dynamo.exc.Unsupported`` around a compiled call sees it, as with PyTorch."""

    def __init__(self, kind: str, message: str):
        if kind not in BREAK_KINDS:
            raise ValueError(f"unknown graph-break kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.reason: BreakReason | None = None  # filled in with the user location when caught
        # raised before the instruction changed anything but its popped operands (no graph
        # node, guard, input or side effect): the root frame can stop right there instead of
        # being captured again up to a planned break
        self.clean = False


def unsupported(kind: str, message: str, *, clean: bool = False) -> Unsupported:
    """Build the exception to raise for a graph break of ``kind``; ``clean``: raised before the
    call or instruction had any effect (see ``Unsupported.clean``)."""
    error = Unsupported(kind, message)
    error.clean = clean
    return error


class GraphBreakError(Unsupported):
    """``fullgraph=True`` and the function cannot be captured in one graph."""

    def __init__(self, reason: BreakReason):
        message = (
            f"{reason.location}: graph break in {reason.function or 'compiled code'}: "
            f"{reason.message} [{reason.category}]. Hint: {reason.hint}"
        )
        RuntimeError.__init__(self, message)
        self.kind = reason.kind
        self.message = message
        self.reason = reason


# PyTorch's other error classes, for user code that names them in ``except`` clauses: kiln
# raises ``TorchRuntimeError`` for none of its own (an error in captured code runs the frame
# eagerly, which raises the op's own error, e.g. RuntimeError), the rest where they fit
class TorchRuntimeError(TorchDynamoException):
    """An op failed while capturing (PyTorch: on fake tensors)."""


class InternalTorchDynamoError(TorchDynamoException):
    """A bug of the capture frontend itself."""


class BackendCompilerFailed(TorchDynamoException):
    """The backend raised while compiling a graph."""


class InvalidBackend(TorchDynamoException, ValueError):  # noqa: N818 - PyTorch's name
    """``kiln.compile(backend=name)`` with a name no backend is registered under (also a
    ValueError, what kiln raised before)."""

    def __init__(self, name: str):
        super().__init__(
            f"Invalid backend: {name!r}, see `kiln._dynamo.list_backends()` for available backends."
        )


class RecompileError(TorchDynamoException):
    """A recompile was not allowed."""


class SkipFrame(TorchDynamoException):
    """The frame is not captured and runs eagerly."""


class CreatesOptimizerState(Exception):  # noqa: N818 - a decision, like Unsupported
    """Raised inside the symbolic evaluator when the captured code adds a parameter to a live
    optimizer's ``state``: that call is the optimizer's first step, whose graph never runs
    again (its guards name the parameters that have state), so the frame runs eagerly this once
    and the next call captures the steady step. Raised at the first new entry, it spares the
    tracing of the rest of the step too. Internal: ``convert_frame`` catches it."""


class UserError(TorchDynamoException):
    """The user's code is wrong in a way capture detects."""

    def __init__(self, error_type, msg: str, case_name: str | None = None):
        super().__init__(msg)
        self.error_type = error_type
        self.case_name = case_name
