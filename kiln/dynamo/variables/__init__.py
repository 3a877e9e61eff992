"""Variable trackers: what the symbolic evaluator knows about each Python value it meets."""

from . import control_flow  # noqa: F401 - registers the capture of kiln.cond
from .base import ConstantVariable, NullVariable, VariableTracker
from .builder import wrap
from .dicts import DictVariable
from .functions import NestedFunctionVariable, UserFunctionVariable, UserMethodVariable
from .lists import ListVariable, TupleVariable
from .nn_module import NNModuleVariable
from .tensor import TensorVariable

__all__ = [
    "VariableTracker",
    "ConstantVariable",
    "NullVariable",
    "TensorVariable",
    "ListVariable",
    "TupleVariable",
    "DictVariable",
    "UserFunctionVariable",
    "NestedFunctionVariable",
    "UserMethodVariable",
    "NNModuleVariable",
    "wrap",
]
