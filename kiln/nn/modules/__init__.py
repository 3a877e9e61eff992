"""``kiln.nn.modules``: every layer class, one file per family (as ``torch.nn.modules``)."""

from __future__ import annotations

from . import (
    activation,
    adaptive,
    batchnorm,
    channelshuffle,
    container,
    conv,
    distance,
    dropout,
    flatten,
    fold,
    instancenorm,
    lazy,  # noqa: F401 - LazyModuleMixin and the placeholders, as torch.nn.modules.lazy
    linear,
    linear_cross_entropy_options,
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
    utils,  # noqa: F401 - _pair and consume_prefix_in_state_dict_if_present, as torch's
)
from ._hooks import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
    register_module_full_backward_hook,
    register_module_full_backward_pre_hook,
)
from .activation import *  # noqa: F403
from .adaptive import *  # noqa: F403
from .batchnorm import *  # noqa: F403
from .channelshuffle import *  # noqa: F403
from .container import *  # noqa: F403
from .conv import *  # noqa: F403
from .distance import *  # noqa: F403
from .dropout import *  # noqa: F403
from .flatten import *  # noqa: F403
from .fold import *  # noqa: F403
from .instancenorm import *  # noqa: F403
from .linear import *  # noqa: F403
from .linear_cross_entropy_options import *  # noqa: F403
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

# one file per family, named as ``torch.nn.modules``'s (``nn.modules.activation.PReLU`` ...)
FAMILIES = (
    activation, adaptive, batchnorm, channelshuffle, container, conv, distance, dropout, flatten,
    fold, instancenorm, linear, linear_cross_entropy_options, loss, module, normalization, padding,
    pixelshuffle, pooling, rnn, sparse, transformer, upsampling,
)  # fmt: skip

__all__ = [
    "register_module_forward_hook",
    "register_module_forward_pre_hook",
    "register_module_full_backward_hook",
    "register_module_full_backward_pre_hook",
] + [name for family in FAMILIES for name in family.__all__]
