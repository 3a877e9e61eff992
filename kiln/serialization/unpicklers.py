"""Reading checkpoint pickles: a restricted interpreter for ``weights_only`` loads, and the
standard unpickler (PyTorch's names mapped to kiln) for trusted ones.

``WeightsOnlyUnpickler`` runs a pickle's opcodes over its own stack, as PyTorch's
``weights_only`` unpickler does: a global resolves only if PyTorch allows it by default or the
user allowlisted it, only such globals may be called, and only containers, tensors and
allowlisted classes may be built or filled. Nothing in the file can import a module or call a
function of its choosing, so a malicious ``__reduce__`` fails with PyTorch's message instead of
running. ``TrustedUnpickler`` (``weights_only=False``) unpickles anything, reading ``torch.X``
names as kiln's own objects (``torch.nn.modules.linear.Linear`` is ``kiln.nn.modules.linear``'s).
"""

from __future__ import annotations

import importlib
import pickle
import pickletools
from collections import Counter, OrderedDict
from collections.abc import Callable

from ..runtime.tensor import Tensor
from .pickled_names import Unsupported, torch_global, weights_only_defaults
from .safe_globals import python3_name, user_allowed

__all__ = ["WeightsOnlyUnpickler", "TrustedUnpickler", "weights_only_message"]

_BLOCKED_MODULES = {"sys", "os", "posix", "nt"}
_UNSAFE = (
    "Re-running `kiln.load` with `weights_only` set to `False` will likely succeed, but it can "
    "result in arbitrary code execution. Do it only if you got the file from a trusted source."
)
_DOCS = (
    "\n\nCheck the documentation of kiln.load to learn more about types accepted by default with "
    "weights_only."
)


class _Refused(pickle.UnpicklingError):
    """A global that is not allowlisted (PyTorch's message gives the two ways out)."""


def weights_only_message(error: pickle.UnpicklingError) -> str:
    """PyTorch's wording around what the weights-only unpickler refused."""
    if isinstance(error, _Refused):
        return (
            "Weights only load failed. This file can still be loaded, to do so you have two "
            "options, \033[1mdo those steps only if you trust the source of the checkpoint"
            f"\033[0m. \n\t(1) {_UNSAFE}\n\t(2) Alternatively, to load with `weights_only=True` "
            "please check the recommended steps in the following error message.\n\t"
            f"WeightsUnpickler error: {error}{_DOCS}"
        )
    return f"Weights only load failed. {_UNSAFE}\n WeightsUnpickler error: {error}{_DOCS}"


def _unsupported(full: str, entry: Unsupported) -> RuntimeError:
    return RuntimeError(
        f"kiln.load: the checkpoint holds {entry.reason} (it names {full}); kiln cannot load it"
    )


def _decode_str(arg, encoding: str):
    """A Python 2 ``str`` (STRING opcodes): bytes decoded with the load's ``encoding``."""
    data = arg.encode("latin-1") if isinstance(arg, str) else arg
    return data if encoding == "bytes" else data.decode(encoding)


class WeightsOnlyUnpickler:
    """Loads a pickle allowing only PyTorch's default globals and the user's allowlist."""

    def __init__(self, data: bytes, persistent_load: Callable, encoding: str = "utf-8"):
        self._data = data
        self._persistent_load = persistent_load
        self._encoding = encoding
        self._callables: dict[int, object] = {}  # every global resolved: the only callables
        self._classes: set[type] = {OrderedDict}  # types BUILD may set state on

    # ---------------------------------------------------------------- globals
    def find_class(self, module: str, name: str):
        module, name = python3_name(module, name)
        full = f"{module}.{name}"
        if module in _BLOCKED_MODULES:
            raise pickle.UnpicklingError(
                f"Trying to load unsupported GLOBAL {full} whose module {module} is blocked."
            )
        if full in weights_only_defaults():
            found = torch_global(full)
        else:
            user = user_allowed()
            if full not in user:
                shown = full.removeprefix("builtins.")
                raise _Refused(
                    f"Unsupported global: GLOBAL {shown} was not an allowed global by default. "
                    f"Please use `kiln.serialization.add_safe_globals([{shown}])` or the "
                    f"`kiln.serialization.safe_globals([{shown}])` context manager to allowlist "
                    "this global if you trust this class/function."
                )
            found = user[full]
        if isinstance(found, Unsupported):
            raise _unsupported(full, found)
        self._callables[id(found)] = found
        if isinstance(found, type):
            self._classes.add(found)
        return found

    # ---------------------------------------------------------------- the interpreter
    def load(self):
        self._stack: list = []
        self._marks: list[list] = []
        self._memo: dict = {}
        position = 0
        try:
            for opcode, arg, position in pickletools.genops(self._data):  # noqa: B007 - the error message reads it
                if opcode.name == "STOP":
                    return self._stack.pop()
                handler = _HANDLERS.get(opcode.name)
                if handler is None:
                    raise pickle.UnpicklingError(f"Unsupported operand {opcode.name}")
                handler(self, arg)
        except pickle.UnpicklingError as error:
            raise pickle.UnpicklingError(weights_only_message(error)) from None
        except (ValueError, IndexError, KeyError, TypeError, AttributeError) as error:
            raise pickle.UnpicklingError(
                weights_only_message(
                    pickle.UnpicklingError(
                        f"malformed pickle at byte {position}: {type(error).__name__}: {error}"
                    )
                )
            ) from None
        raise pickle.UnpicklingError("pickle data was truncated")

    def _pop_mark(self) -> list:
        items = self._stack
        self._stack = self._marks.pop()
        return items

    def _push_marked(self, kind: type) -> None:
        items = self._pop_mark()  # (before naming ``self._stack``: popping replaces it)
        self._stack.append(kind(items))

    def _target(self, kinds: tuple, opcode: str):
        target = self._stack[-1]
        if type(target) not in kinds:
            names = ", ".join(k.__name__ for k in kinds)
            raise pickle.UnpicklingError(
                f"Can only {opcode} for {names}, but got {type(target).__name__}"
            )
        return target

    def _push(self, arg) -> None:
        self._stack.append(arg)

    def _push_str(self, arg) -> None:
        self._stack.append(_decode_str(arg, self._encoding))

    def _global(self, arg) -> None:
        module, name = arg.split(" ", 1)
        self._stack.append(self.find_class(module, name))

    def _stack_global(self, _) -> None:
        name = self._stack.pop()
        module = self._stack.pop()
        if not isinstance(module, str) or not isinstance(name, str):
            raise pickle.UnpicklingError("STACK_GLOBAL requires str")
        self._stack.append(self.find_class(module, name))

    def _reduce(self, _) -> None:
        args = self._stack.pop()
        func = self._stack[-1]
        if self._callables.get(id(func)) is not func:
            raise pickle.UnpicklingError(
                f"Trying to call reduce for unrecognized function {func!r}"
            )
        self._stack[-1] = func(*args)

    def _new_object(self, cls, args, kwargs) -> None:
        if self._callables.get(id(cls)) is not cls or not isinstance(cls, type):
            raise pickle.UnpicklingError(
                "Can only create new object for nn.Parameter or classes allowlisted via "
                f"`add_safe_globals` but got {cls!r}"
            )
        if getattr(cls, "_is_param", False):
            self._stack.append(cls(*args, **kwargs))
        else:
            self._stack.append(cls.__new__(cls, *args, **kwargs))

    def _newobj(self, _) -> None:
        args = self._stack.pop()
        self._new_object(self._stack.pop(), args, {})

    def _newobj_ex(self, _) -> None:
        kwargs = self._stack.pop()
        args = self._stack.pop()
        self._new_object(self._stack.pop(), args, kwargs)

    def _build(self, _) -> None:
        state = self._stack.pop()
        inst = self._stack[-1]
        kind = type(inst)
        if kind is OrderedDict:
            inst.__dict__.update(state)
            return
        if kind not in self._classes or kind is Tensor:
            raise pickle.UnpicklingError(
                "Can only build Tensor, Parameter, OrderedDict or types allowlisted via "
                f"`add_safe_globals`, but got {kind}"
            )
        if hasattr(inst, "__setstate__") and not getattr(kind, "_is_param", False):
            inst.__setstate__(state)
            return
        slots = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
        if state:
            inst.__dict__.update(state)
        for key, value in (slots or {}).items():
            setattr(inst, key, value)

    def _persid(self, arg) -> None:
        self._stack.append(self._persistent_load(arg))

    def _binpersid(self, _) -> None:
        self._stack.append(self._persistent_load(self._stack.pop()))

    def _mark(self, _) -> None:
        self._marks.append(self._stack)
        self._stack = []

    def _pop(self, _) -> None:
        if self._stack:
            self._stack.pop()
        else:
            self._pop_mark()

    def _append(self, _) -> None:
        item = self._stack.pop()
        self._target((list,), "append").append(item)

    def _appends(self, _) -> None:
        items = self._pop_mark()
        self._target((list,), "extend").extend(items)

    def _setitem(self, _) -> None:
        value = self._stack.pop()
        key = self._stack.pop()
        self._target((dict, OrderedDict, Counter), "SETITEM")[key] = value

    def _setitems(self, _) -> None:
        items = self._pop_mark()
        target = self._target((dict, OrderedDict, Counter), "SETITEMS")
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]

    def _additems(self, _) -> None:
        items = self._pop_mark()
        self._target((set,), "ADDITEMS").update(items)

    def _dict(self, _) -> None:
        items = self._pop_mark()
        self._stack.append({items[i]: items[i + 1] for i in range(0, len(items), 2)})

    def _put(self, arg) -> None:
        self._memo[arg] = self._stack[-1]

    def _memoize(self, _) -> None:
        self._memo[len(self._memo)] = self._stack[-1]

    def _get(self, arg) -> None:
        self._stack.append(self._memo[arg])


def _constant(value):
    return lambda self, _: self._stack.append(value)


def _tuple_of(n: int):
    def handler(self, _):
        items = tuple(self._stack[-n:]) if n else ()
        del self._stack[len(self._stack) - n :]
        self._stack.append(items)

    return handler


_W = WeightsOnlyUnpickler
_HANDLERS: dict[str, Callable] = {
    "PROTO": lambda self, _: None,
    "FRAME": lambda self, _: None,
    "MARK": _W._mark,
    "POP": _W._pop,
    "POP_MARK": lambda self, _: self._pop_mark(),
    "DUP": lambda self, _: self._stack.append(self._stack[-1]),
    "NONE": _constant(None),
    "NEWTRUE": _constant(True),
    "NEWFALSE": _constant(False),
    "EMPTY_LIST": lambda self, _: self._stack.append([]),
    "EMPTY_DICT": lambda self, _: self._stack.append({}),
    "EMPTY_SET": lambda self, _: self._stack.append(set()),
    "EMPTY_TUPLE": _tuple_of(0),
    "TUPLE1": _tuple_of(1),
    "TUPLE2": _tuple_of(2),
    "TUPLE3": _tuple_of(3),
    "TUPLE": lambda self, _: self._push_marked(tuple),
    "LIST": lambda self, _: self._push_marked(list),
    "FROZENSET": lambda self, _: self._push_marked(frozenset),
    "DICT": _W._dict,
    "APPEND": _W._append,
    "APPENDS": _W._appends,
    "SETITEM": _W._setitem,
    "SETITEMS": _W._setitems,
    "ADDITEMS": _W._additems,
    "BYTEARRAY8": lambda self, arg: self._stack.append(bytearray(arg)),
    "GLOBAL": _W._global,
    "STACK_GLOBAL": _W._stack_global,
    "REDUCE": _W._reduce,
    "NEWOBJ": _W._newobj,
    "NEWOBJ_EX": _W._newobj_ex,
    "BUILD": _W._build,
    "PERSID": _W._persid,
    "BINPERSID": _W._binpersid,
    "MEMOIZE": _W._memoize,
}
for _name in ("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT",
              "BINFLOAT", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "UNICODE", "BINUNICODE",
              "SHORT_BINUNICODE", "BINUNICODE8"):  # fmt: skip
    _HANDLERS[_name] = _W._push
for _name in ("STRING", "BINSTRING", "SHORT_BINSTRING"):
    _HANDLERS[_name] = _W._push_str
for _name in ("PUT", "BINPUT", "LONG_BINPUT"):
    _HANDLERS[_name] = _W._put
for _name in ("GET", "BINGET", "LONG_BINGET"):
    _HANDLERS[_name] = _W._get


class TrustedUnpickler(pickle.Unpickler):
    """``weights_only=False``: unpickles anything; ``torch.X`` globals are kiln's objects."""

    def __init__(self, file, persistent_load: Callable, encoding: str = "utf-8"):
        super().__init__(file, encoding=encoding)
        self._persistent = persistent_load

    def persistent_load(self, pid):
        return self._persistent(pid)

    def find_class(self, module: str, name: str):
        module, name = python3_name(module, name)
        full = f"{module}.{name}"
        found = torch_global(full)
        if isinstance(found, Unsupported):
            raise _unsupported(full, found)
        if found is not None:
            return found
        if module == "torch" or module.startswith("torch."):
            return _kiln_counterpart(module, name)
        return super().find_class(module, name)


def _kiln_counterpart(module: str, name: str):
    """``torch.nn.modules.linear.Linear`` read as ``kiln.nn.modules.linear.Linear``."""
    kiln_module = "kiln" + module[len("torch") :]
    try:
        found = importlib.import_module(kiln_module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        raise pickle.UnpicklingError(
            f"kiln.load: the checkpoint names {module}.{name}, and kiln has no "
            f"{kiln_module}.{name} to stand for it"
        ) from None
    return found
