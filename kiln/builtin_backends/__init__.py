"""The backends ``kiln.compile`` ships with: ``"eager"`` (the captured graph run op by op),
``"aot_eager"`` (AOT autograd, eager ops), ``"inductor"`` (AOT autograd + fused kernels, the
default) and ``"cudagraphs"``. They register with the registry in ``kiln.dynamo.backends`` exactly
as a user's backend does; this package sits above the compiler layers it assembles.
"""

from __future__ import annotations

from . import compiled, eager  # noqa: F401  (registering is importing)
