"""Control-flow ops: ``cond``, the conditional node whose branches are graphs."""
