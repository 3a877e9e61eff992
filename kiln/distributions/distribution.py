"""``Distribution``: the shapes (sample = sample_shape + batch_shape + event_shape), argument
and sample validation, and the derived quantities every distribution shares."""

from __future__ import annotations

import warnings

from kiln.runtime.tensor import Size

from ..ops.public import Tensor, exp, no_grad
from ..runtime.compiling import is_compiling
from . import constraints
from .utils import lazy_property

_EMPTY = Size()  # the default sample/batch shape (a tuple: safe to share)

__all__ = ["Distribution"]


def _fmt(value):
    """How PyTorch formats a tensor in these messages: a 0-d tensor as its number."""
    return value.item() if value.dim() == 0 else value


class Distribution:
    """Base class of probability distributions (PyTorch's ``torch.distributions`` API)."""

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        if value not in (True, False):
            raise ValueError("validate_args must be True or False")
        Distribution._validate_args = value

    def __init__(self, batch_shape=_EMPTY, event_shape=_EMPTY, validate_args: bool | None = None):
        self._batch_shape = Size(batch_shape)
        self._event_shape = Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args and not is_compiling():
            arg_constraints = self.arg_constraints
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue
                if param not in self.__dict__ and isinstance(
                    getattr(type(self), param, None), (property, lazy_property)
                ):
                    continue  # a derived parameter (probs from logits) is not checked
                value = getattr(self, param)
                valid = constraint.check(value)
                if not bool(valid.all()):
                    raise ValueError(
                        f"Expected parameter {param} ({type(value).__name__} of shape "
                        f"{tuple(value.shape)}) of distribution {self!r} to satisfy the "
                        f"constraint {constraint!r}, but found invalid values:\n{_fmt(value)}"
                    )
        super().__init__()

    # ------------------------------------------------------------------ shapes
    @property
    def batch_shape(self) -> Size:
        return self._batch_shape

    @property
    def event_shape(self) -> Size:
        return self._event_shape

    def _extended_shape(self, sample_shape=_EMPTY) -> Size:
        if not isinstance(sample_shape, Size):
            sample_shape = Size(sample_shape)
        return Size(sample_shape + self._batch_shape + self._event_shape)

    def expand(self, batch_shape, _instance=None):
        raise NotImplementedError

    def _expand_params(self, cls, batch_shape, names, _instance=None, event_dims: int = 0):
        """``expand`` for distributions whose state is parameter tensors: each of ``names``
        present on ``self`` is expanded to ``batch_shape`` (plus its ``event_dims`` trailing
        dims), the shapes are reset and validation is inherited."""
        new = self._get_checked_instance(cls, _instance)
        batch_shape = Size(batch_shape)
        for name in names:
            if name in self.__dict__:
                value = self.__dict__[name]
                tail = tuple(value.shape[value.dim() - event_dims :]) if event_dims else ()
                setattr(new, name, value.expand(batch_shape + tail))
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {type(self).__name__} of {cls.__name__} that defines a custom "
                "__init__ method must also define a custom .expand() method."
            )
        return self.__new__(type(self)) if _instance is None else _instance

    # ------------------------------------------------------------------ interface
    @property
    def arg_constraints(self) -> dict:
        raise NotImplementedError

    @property
    def support(self):
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError(f"{type(self)} does not implement mean")

    @property
    def mode(self):
        raise NotImplementedError(f"{type(self)} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError(f"{type(self)} does not implement variance")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def sample(self, sample_shape=_EMPTY):
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=_EMPTY):
        raise NotImplementedError

    def sample_n(self, n: int):
        warnings.warn(
            "sample_n will be deprecated. Use .sample((n,)) instead", UserWarning, stacklevel=2
        )
        return self.sample(Size((n,)))

    def log_prob(self, value):
        raise NotImplementedError

    def cdf(self, value):
        raise NotImplementedError

    def icdf(self, value):
        raise NotImplementedError

    def enumerate_support(self, expand: bool = True):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def perplexity(self):
        return exp(self.entropy())

    # ------------------------------------------------------------------ validation
    def _validate_sample(self, value) -> None:
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        if is_compiling():
            return
        event_dim_start = len(value.shape) - len(self._event_shape)
        if tuple(value.shape[event_dim_start:]) != tuple(self._event_shape):
            raise ValueError(
                f"The right-most size of value must match event_shape: {tuple(value.shape)} "
                f"vs {tuple(self._event_shape)}."
            )
        actual = value.shape
        expected = self._batch_shape + self._event_shape
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(
                    f"Value is not broadcastable with batch_shape+event_shape: {tuple(actual)} "
                    f"vs {tuple(expected)}."
                )
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(
                f"{type(self)} does not define `support` to enable sample validation. Please "
                "initialize the distribution with `validate_args=False` to turn off validation.",
                stacklevel=2,
            )
            return
        valid = support.check(value)
        if not bool(valid.all()):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape {tuple(value.shape)}) "
                f"to be within the support ({support!r}) of the distribution {self!r}, but found "
                f"invalid values:\n{_fmt(value)}"
            )

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        parts = []
        for k in names:
            v = self.__dict__[k]
            # a one-element tensor as PyTorch formats it: a 0-d one as its number
            shown = (v.item() if v.dim() == 0 else v) if v.numel() == 1 else v.size()
            parts.append(f"{k}: {shown}")
        return f"{type(self).__name__}({', '.join(parts)})"
