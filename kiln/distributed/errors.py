"""The exceptions ``torch.distributed`` raises, under the same names.

``DistBackendError`` is what a rank sees when the collective it waits in cannot finish: a peer
failed, died or timed out. Like PyTorch's, they are ``RuntimeError`` subclasses, so code that
catches ``RuntimeError`` around a training step keeps working.
"""

from __future__ import annotations

__all__ = ["DistError", "DistBackendError", "DistNetworkError", "DistStoreError"]


class DistError(RuntimeError):
    """Base class of the errors the distributed package raises."""


class DistBackendError(DistError):
    """A collective could not complete: a peer rank failed, exited or did not arrive in time.

    ``failed_rank`` names the rank at fault when it is known (None after a plain timeout);
    ``exit_code`` is the status that rank reported, used to end the job with the same code.
    """

    def __init__(self, message: str, failed_rank: int | None = None, exit_code: int = 1):
        super().__init__(message)
        self.failed_rank = failed_rank
        self.exit_code = exit_code


class DistNetworkError(DistError):
    """Raised by PyTorch for socket errors; kept for code that catches it by name."""


class DistStoreError(DistError):
    """Raised by PyTorch for key-value store errors; kept for code that catches it by name."""
