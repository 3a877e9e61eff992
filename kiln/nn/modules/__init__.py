"""``kiln.nn.modules``: every layer class, one file per family (as ``torch.nn.modules``).

Each family's file lists its layers in ``__all__``; this package re-exports them all.
"""

from __future__ import annotations

from . import (
    activation,
    adaptive,
    attention,
    batchnorm,
    container,
    conv,
    distance,
    dropout,
    embedding_bag,
    flatten,
    fold,
    instancenorm,
    lazy,
    linear,
    loss,
    module,
    normalization,
    padding,
    pixelshuffle,
    pooling,
    rnn,
    sparse,
    transformer,
    upsampling,
)
from ._hooks import register_module_forward_hook, register_module_forward_pre_hook
from .activation import *  # noqa: F403
from .adaptive import *  # noqa: F403
from .attention import *  # noqa: F403
from .batchnorm import *  # noqa: F403
from .container import *  # noqa: F403
from .conv import *  # noqa: F403
from .distance import *  # noqa: F403
from .dropout import *  # noqa: F403
from .embedding_bag import *  # noqa: F403
from .flatten import *  # noqa: F403
from .fold import *  # noqa: F403
from .instancenorm import *  # noqa: F403
from .lazy import *  # noqa: F403
from .linear import *  # noqa: F403
from .loss import *  # noqa: F403
from .module import *  # noqa: F403
from .normalization import *  # noqa: F403
from .padding import *  # noqa: F403
from .pixelshuffle import *  # noqa: F403
from .pooling import *  # noqa: F403
from .rnn import *  # noqa: F403
from .sparse import *  # noqa: F403
from .transformer import *  # noqa: F403
from .upsampling import *  # noqa: F403

_FAMILIES = (
    module,
    container,
    linear,
    flatten,
    sparse,
    embedding_bag,
    normalization,
    batchnorm,
    instancenorm,
    dropout,
    conv,
    lazy,
    pooling,
    padding,
    pixelshuffle,
    upsampling,
    fold,
    distance,
    activation,
    attention,
    rnn,
    transformer,
    loss,
    adaptive,
)

__all__ = ["register_module_forward_hook", "register_module_forward_pre_hook"]
__all__ += [name for family in _FAMILIES for name in family.__all__]
