"""AOT autograd: functionalization, decomposition to prims, joint forward+backward graphs and
partitioning into a forward graph and a backward graph (see DESIGN.md, "aot")."""

from ..dynamo.explain import set_saved_bytes_report
from .aot_autograd import aot_function, aot_module, partition_report, saved_bytes_report
from .decompositions import decomposition_table, list_decompositions, prim_ops
from .functionalize import functionalize
from .partitioners import default_partition, min_cut_partition

set_saved_bytes_report(saved_bytes_report)  # explain() prints it; dynamo is below AOT

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
