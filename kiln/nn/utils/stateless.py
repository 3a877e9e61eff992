"""Calling a module with some parameters and buffers replaced: ``functional_call``.

The replacements are swapped into the module (and its submodules, by dotted name) for the
duration of the call and the originals put back afterwards, even if the call raises. With
``tie_weights`` a tensor registered under several names (a tied embedding and output layer)
is replaced under all of them when one is given. ``kiln.func.functional_call`` is the
non-deprecated entry point; this module's ``functional_call`` warns like PyTorch's.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

from ...runtime.tensor import Tensor

__all__ = ["functional_call"]

_MISSING: Any = object()


def _check_name(name: str) -> None:
    if "." in name:
        raise KeyError('tensor name can\'t contain "."')
    if name == "":
        raise KeyError('tensor name can\'t be empty string ""')


def _submodule(module, path: str, memo: dict):
    """``module.<path>`` for a dotted path of submodules (cached per call in ``memo``)."""
    from ..modules.module import Module

    if not path:
        return module
    if path in memo:
        return memo[path]
    parent_path, _, attr = path.rpartition(".")
    parent = _submodule(module, parent_path, memo)
    try:
        sub = getattr(parent, attr)
    except AttributeError as ex:
        raise AttributeError(f"{parent._get_name()} has no attribute `{attr}`") from ex
    if not isinstance(sub, Module):
        raise TypeError(f"submodule `{path}`: {sub} is not an instance of kiln.nn.Module")
    memo[path] = sub
    return sub


def _swap_tensor(module, name: str, tensor):
    """Put ``tensor`` (or remove the attribute, for ``_MISSING``) at ``module.<name>``;
    returns what was there (``_MISSING`` when nothing was)."""
    if tensor is not _MISSING and tensor is not None and not isinstance(tensor, Tensor):
        raise TypeError(f"{tensor} is not an instance of kiln.Tensor")
    _check_name(name)
    for table_name in ("_parameters", "_buffers"):
        table = module.__dict__[table_name]
        if name in table:
            original = table[name]
            if tensor is _MISSING:
                del table[name]
            else:
                table[name] = tensor
            return original
    original = getattr(module, name) if hasattr(module, name) else _MISSING
    if original is not _MISSING and original is not None and not isinstance(original, Tensor):
        raise TypeError(f"attribute `{name}`: {original} is not an instance of kiln.Tensor")
    if tensor is not _MISSING:
        setattr(module, name, tensor)
    elif hasattr(module, name):
        delattr(module, name)
    return original


def _untie(module, tensors: dict) -> dict:
    """Extend ``tensors`` to every name a given tensor is tied to in ``module``."""
    named = dict(module.named_parameters(remove_duplicate=False))
    named.update(module.named_buffers(remove_duplicate=False))
    names_of: dict[int, set] = {}
    for name, t in named.items():
        names_of.setdefault(id(t), set()).add(name)
    tied = {name: names for names in names_of.values() if len(names) > 1 for name in names}
    given_tied = [name for name in tensors if name in tied]
    for name in given_tied:
        group = tied[name]
        values = {id(tensors[n]) for n in group if n in tensors}
        if len(group.intersection(given_tied)) > 1 and len(values) != 1:
            raise ValueError(
                f"functional_call got multiple values for keys {sorted(group)}, which are tied. "
                "Consider using tie_weights=False"
            )
    untied = dict(tensors)
    for name in given_tied:
        for other in tied[name]:
            untied[other] = tensors[name]
    return untied


def _check_keys(module, names) -> None:
    valid = {n for n, _ in module.named_parameters(remove_duplicate=False)}
    valid.update(n for n, _ in module.named_buffers(remove_duplicate=False))
    missing = sorted(valid - set(names))
    unexpected = sorted(set(names) - valid)
    errors = []
    if unexpected:
        errors.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
    if missing:
        errors.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
    if errors:
        raise RuntimeError(
            f"Error(s) in reparametrizing for {module._get_name()}:\n\t" + "\n\t".join(errors)
        )


@contextlib.contextmanager
def _reparametrize_module(module, parameters_and_buffers: dict, tie_weights=False, strict=False):
    """Within the block, ``module.<name>`` is ``parameters_and_buffers[name]`` for every name."""
    tensors = _untie(module, parameters_and_buffers) if tie_weights else parameters_and_buffers
    if strict:
        _check_keys(module, tensors)
    memo: dict = {}
    originals: dict = {}

    def swap(name, value):
        path, _, attr = name.rpartition(".")
        return _swap_tensor(_submodule(module, path, memo), attr, value)

    try:
        for name, value in tensors.items():
            originals[name] = swap(name, value)
        yield
    finally:
        # a forward that reassigns a buffer leaves the new value in the caller's dict
        current = {name: swap(name, original) for name, original in originals.items()}
        for name in parameters_and_buffers:
            if name in current:
                parameters_and_buffers[name] = current[name]


def _functional_call(
    module,
    parameters_and_buffers: dict,
    args=None,
    kwargs: dict | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrize_module(module, parameters_and_buffers, tie_weights, strict):
        return module(*args, **(kwargs or {}))


def functional_call(
    module,
    parameters_and_buffers: dict[str, Tensor],
    args=None,
    kwargs: dict | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    """Deprecated alias of ``kiln.func.functional_call`` (one dict only)."""
    warnings.warn(
        "`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 and will be "
        "removed in a future version of PyTorch. Please use `torch.func.functional_call` "
        "instead which is a drop-in replacement.",
        FutureWarning,
        stacklevel=2,
    )
    return _functional_call(
        module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict
    )
