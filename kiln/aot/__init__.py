"""AOT autograd: functionalization, decomposition to prims, joint forward+backward graphs and
partitioning into a forward graph and a backward graph (see DESIGN.md, "aot")."""

from .aot_autograd import aot_function, aot_module, partition_report
from .decompositions import decomposition_table, list_decompositions, prim_ops
from .functionalize import functionalize
from .partitioners import default_partition, min_cut_partition

__all__ = [
    "aot_function",
    "aot_module",
    "partition_report",
    "decomposition_table",
    "list_decompositions",
    "prim_ops",
    "functionalize",
    "default_partition",
    "min_cut_partition",
]
