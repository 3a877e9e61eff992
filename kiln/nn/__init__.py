"""Neural-network building blocks: ``functional`` now; modules, init and losses follow."""

from . import functional  # noqa: F401
