"""The machinery every op goes through: the registry (``Op`` records), the one dispatch
function, fake tensors, and the binding of ops to ``Tensor`` methods and ``kiln.*`` names.
"""
