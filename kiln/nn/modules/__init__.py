"""``kiln.nn.modules``: every layer class, one file per family (as ``torch.nn.modules``)."""

from __future__ import annotations

from ._hooks import register_module_forward_hook, register_module_forward_pre_hook
from .activation import (
    ELU,
    GELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSoftmax,
    Mish,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)
from .attention import MultiheadAttention
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .dropout import AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout
from .flatten import Flatten, Unflatten
from .linear import Bilinear, Identity, Linear
from .loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .module import Module
from .normalization import GroupNorm, LayerNorm, RMSNorm
from .pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    AvgPool1d,
    AvgPool2d,
    MaxPool1d,
    MaxPool2d,
)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .sparse import Embedding
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "register_module_forward_hook",
    "register_module_forward_pre_hook",
    "Module",
    "Sequential",
    "ModuleList",
    "ModuleDict",
    "ParameterList",
    "ParameterDict",
    "Identity",
    "Linear",
    "Bilinear",
    "Flatten",
    "Unflatten",
    "Embedding",
    "LayerNorm",
    "RMSNorm",
    "GroupNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "SyncBatchNorm",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "AlphaDropout",
    "FeatureAlphaDropout",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "MaxPool1d",
    "MaxPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveMaxPool2d",
    "ReLU",
    "ReLU6",
    "GELU",
    "SiLU",
    "Tanh",
    "Sigmoid",
    "Softmax",
    "LogSoftmax",
    "LeakyReLU",
    "ELU",
    "Softplus",
    "Mish",
    "Hardtanh",
    "Hardsigmoid",
    "Hardswish",
    "MultiheadAttention",
    "RNNBase",
    "RNN",
    "LSTM",
    "GRU",
    "RNNCellBase",
    "RNNCell",
    "LSTMCell",
    "GRUCell",
    "TransformerEncoderLayer",
    "TransformerEncoder",
    "TransformerDecoderLayer",
    "TransformerDecoder",
    "Transformer",
    "L1Loss",
    "MSELoss",
    "SmoothL1Loss",
    "HuberLoss",
    "NLLLoss",
    "CrossEntropyLoss",
    "BCELoss",
    "BCEWithLogitsLoss",
    "KLDivLoss",
]

# the less common layers, one file per family; each file's __all__ extends this one
from . import (  # noqa: E402
    activation_extra,
    distance,
    embedding_bag,
    fold,
    instancenorm,
    lazy,
    padding,
    pixelshuffle,
    pooling_extra,
    upsampling,
)
from .activation_extra import *  # noqa: E402,F403
from .distance import *  # noqa: E402,F403
from .embedding_bag import *  # noqa: E402,F403
from .fold import *  # noqa: E402,F403
from .instancenorm import *  # noqa: E402,F403
from .lazy import *  # noqa: E402,F403
from .padding import *  # noqa: E402,F403
from .pixelshuffle import *  # noqa: E402,F403
from .pooling_extra import *  # noqa: E402,F403
from .upsampling import *  # noqa: E402,F403

__all__ += [
    name
    for family in (activation_extra, distance, embedding_bag, fold, instancenorm, lazy, padding)
    + (pixelshuffle, pooling_extra, upsampling)
    for name in family.__all__
]

from . import loss_extra  # noqa: E402
from .loss_extra import *  # noqa: E402,F403

__all__ += loss_extra.__all__
