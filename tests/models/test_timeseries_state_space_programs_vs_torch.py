"""Time-series and state-space programs as their reference repositories write them (PatchTST,
Autoformer, TimesNet, S4D, DeepAR, the Temporal Fusion Transformer), written once for both
libraries and run eagerly, under ``kiln.compile`` and under ``kiln.compile(dynamic=True)``
against PyTorch (probe round 18, first part).

The harness is ``test_hf_vision_sequence_programs_vs_torch``'s: kiln's model starts from
PyTorch's weights, and every step's outputs, parameters, gradients and buffers are compared.
Each program runs two batches of different sizes on a model cut to what its features need.
All of them match PyTorch; nothing in the library needed fixing. Parameters whose gradient is
rounding noise by construction (a bias that a softmax, a BatchNorm or the series decomposition
removes) are left out by name: Adam turns such noise into steps of the learning rate's size.
"""

from __future__ import annotations

import math

import numpy as np

from tests.models.test_hf_vision_sequence_programs_vs_torch import ALL_MODES, Program, _check
from tests.oracle import needs_torch

pytestmark = needs_torch


def _scheduled_step(lib, model, opt, scheduler, *inputs):
    """The usual step of a model returning ``(loss, *logged)``, its scheduler stepped per batch."""
    loss, *logged = model(*inputs)
    opt.zero_grad()
    loss.backward()
    opt.step()
    scheduler.step()
    return (loss, *logged)


def _series(rng, sizes=(3, 5), length=16, channels=2, horizon=4):
    """(n, length, channels) histories and (n, horizon, channels) targets of noisy sines."""
    batches = []
    for n in sizes:
        t = np.arange(length + horizon, dtype=np.float32)
        phase = rng.uniform(0, 2 * np.pi, (n, 1, channels)).astype(np.float32)
        wave = np.sin(t[None, :, None] * 0.7 + phase) + 0.3 * np.sin(t[None, :, None] * 1.9)
        wave = wave + 0.1 * rng.standard_normal(wave.shape)
        wave = wave.astype(np.float32)
        batches.append((wave[:, :length], wave[:, length:]))
    return batches


# ------------------------------------------------------------------------------ PatchTST


def _patchtst(lib, c_in=2, context_window=16, target_window=4, patch_len=4, stride=2,
              n_layers=2, d_model=8, n_heads=2, d_ff=16):  # fmt: skip
    """yuqinie98/PatchTST's backbone: RevIN statistics kept on the module, patches by
    ``nn.ReplicationPad1d((0, stride))`` and ``Tensor.unfold(dimension=-1, size, step)``, a
    ``W_pos`` drawn by ``nn.init.uniform_``, residual attention (each layer's pre-softmax scores
    added to the next's), a scale that is a frozen ``Parameter``, BatchNorm over a ``Transpose``
    module, a flatten head, and ``OneCycleLR`` stepped per batch."""
    nn, F = lib.nn, lib.nn.functional

    class RevIN(nn.Module):
        def __init__(self, num_features, eps=1e-5):
            super().__init__()
            self.eps = eps
            self.affine_weight = nn.Parameter(lib.ones(num_features))
            self.affine_bias = nn.Parameter(lib.zeros(num_features))

        def forward(self, x, mode):
            if mode == "norm":
                dim2reduce = tuple(range(1, x.ndim - 1))
                self.mean = lib.mean(x, dim=dim2reduce, keepdim=True).detach()
                var = lib.var(x, dim=dim2reduce, keepdim=True, unbiased=False)
                self.stdev = lib.sqrt(var + self.eps).detach()
                x = (x - self.mean) / self.stdev
                return x * self.affine_weight + self.affine_bias
            x = x - self.affine_bias
            x = x / (self.affine_weight + self.eps * self.eps)
            return x * self.stdev + self.mean

    class Transpose(nn.Module):
        def __init__(self, *dims, contiguous=False):
            super().__init__()
            self.dims, self.contiguous = dims, contiguous

        def forward(self, x):
            if self.contiguous:
                return x.transpose(*self.dims).contiguous()
            return x.transpose(*self.dims)

    class _ScaledDotProductAttention(nn.Module):
        def __init__(self, d_model, n_heads, lsa=False):
            super().__init__()
            head_dim = d_model // n_heads
            self.scale = nn.Parameter(lib.tensor(head_dim**-0.5), requires_grad=lsa)

        def forward(self, q, k, v, prev=None):
            attn_scores = lib.matmul(q, k) * self.scale
            if prev is not None:
                attn_scores = attn_scores + prev
            attn_weights = F.softmax(attn_scores, dim=-1)
            output = lib.matmul(attn_weights, v)
            return output, attn_weights, attn_scores

    class _MultiheadAttention(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            d_k = d_v = d_model // n_heads
            self.n_heads, self.d_k, self.d_v = n_heads, d_k, d_v
            self.W_Q = nn.Linear(d_model, d_k * n_heads, bias=True)
            self.W_K = nn.Linear(d_model, d_k * n_heads, bias=True)
            self.W_V = nn.Linear(d_model, d_v * n_heads, bias=True)
            self.sdp_attn = _ScaledDotProductAttention(d_model, n_heads)
            self.to_out = nn.Sequential(nn.Linear(n_heads * d_v, d_model), nn.Dropout(0.0))

        def forward(self, Q, prev=None):
            bs = Q.size(0)
            q_s = self.W_Q(Q).view(bs, -1, self.n_heads, self.d_k).transpose(1, 2)
            k_s = self.W_K(Q).view(bs, -1, self.n_heads, self.d_k).permute(0, 2, 3, 1)
            v_s = self.W_V(Q).view(bs, -1, self.n_heads, self.d_v).transpose(1, 2)
            output, attn_weights, attn_scores = self.sdp_attn(q_s, k_s, v_s, prev=prev)
            output = output.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * self.d_v)
            return self.to_out(output), attn_weights, attn_scores

    class TSTEncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = _MultiheadAttention(d_model, n_heads)
            self.dropout_attn = nn.Dropout(0.0)
            self.norm_attn = nn.Sequential(
                Transpose(1, 2), nn.BatchNorm1d(d_model), Transpose(1, 2)
            )
            self.ff = nn.Sequential(
                nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(0.0), nn.Linear(d_ff, d_model)
            )
            self.dropout_ffn = nn.Dropout(0.0)
            self.norm_ffn = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(d_model), Transpose(1, 2))

        def forward(self, src, prev=None):
            src2, attn, scores = self.self_attn(src, prev)
            src = self.norm_attn(src + self.dropout_attn(src2))
            src2 = self.ff(src)
            src = self.norm_ffn(src + self.dropout_ffn(src2))
            return src, scores

    class PatchTST(nn.Module):
        def __init__(self):
            super().__init__()
            self.revin_layer = RevIN(c_in)
            self.patch_len, self.stride = patch_len, stride
            self.padding_patch_layer = nn.ReplicationPad1d((0, stride))
            patch_num = int((context_window - patch_len) / stride + 1) + 1
            self.W_P = nn.Linear(patch_len, d_model)
            W_pos = lib.empty((patch_num, d_model))
            nn.init.uniform_(W_pos, -0.02, 0.02)
            self.W_pos = nn.Parameter(W_pos, requires_grad=True)
            self.dropout = nn.Dropout(0.0)
            self.layers = nn.ModuleList([TSTEncoderLayer() for _ in range(n_layers)])
            self.flatten = nn.Flatten(start_dim=-2)
            self.linear = nn.Linear(d_model * patch_num, target_window)

        def forward(self, z, target):  # z: [bs x seq_len x nvars]
            z = self.revin_layer(z, "norm")
            z = z.permute(0, 2, 1)
            z = self.padding_patch_layer(z)
            z = z.unfold(dimension=-1, size=self.patch_len, step=self.stride)
            z = z.permute(0, 1, 3, 2)  # z: [bs x nvars x patch_len x patch_num]
            n_vars = z.shape[1]
            x = z.permute(0, 1, 3, 2)
            x = self.W_P(x)
            u = lib.reshape(x, (x.shape[0] * x.shape[1], x.shape[2], x.shape[3]))
            u = self.dropout(u + self.W_pos)
            scores = None
            for mod in self.layers:
                u, scores = mod(u, prev=scores)
            z = lib.reshape(u, (-1, n_vars, u.shape[-2], u.shape[-1]))
            z = z.permute(0, 1, 3, 2)
            z = self.linear(self.flatten(z))
            z = z.permute(0, 2, 1)
            z = self.revin_layer(z, "denorm")
            return F.mse_loss(z, target), z

    model = PatchTST()
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = lib.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=1e-2, steps_per_epoch=2, epochs=2, pct_start=0.3
    )
    return model, opt, scheduler


def test_patchtst_unfold_patches_residual_attention_and_one_cycle_train_like_torch():
    # a key bias shifts every score of a query alike (softmax ignores it), and the value, output
    # and feed-forward biases shift every position alike (the BatchNorm after them removes it):
    # their gradients are rounding noise, which Adam turns into steps of the learning rate's size
    noise = tuple(
        f"layers.{i}.{name}.bias"
        for i in range(2)
        for name in ("self_attn.W_K", "self_attn.W_V", "self_attn.to_out.0", "ff.3")
    )
    # (atol: the second layer's running mean averages a BatchNorm output, zero up to rounding)
    _check(
        Program(
            _patchtst,
            _scheduled_step,
            _series,
            modes=ALL_MODES,
            rtol=2e-4,
            atol=1e-4,
            skip=noise,
            recompiles=1,
        )
    )


# ------------------------------------------------------------------------------ Autoformer


def _autoformer(lib, enc_in=2, seq_len=12, label_len=6, pred_len=4, d_model=8, n_heads=2,
                d_ff=8, moving_avg=5, factor=1):  # fmt: skip
    """thuml/Autoformer: series decomposition by a moving average (ends padded by ``repeat``
    of the first and last steps, ``nn.AvgPool1d``), auto-correlation by ``torch.fft.rfft`` of
    queries and keys, ``q_fft * torch.conj(k_fft)`` and ``irfft(n=L)``, the top delays picked
    by ``topk`` of the batch-mean correlation and rolled in one at a time with
    ``torch.roll(values, -int(index[i]), -1)``, a seasonal ``my_Layernorm``, a circular
    ``Conv1d`` token embedding with ``kaiming_normal_(mode='fan_in',
    nonlinearity='leaky_relu')`` and a decoder accumulating the trend through a circular
    projection."""
    nn, F = lib.nn, lib.nn.functional

    class MovingAvg(nn.Module):
        def __init__(self, kernel_size, stride):
            super().__init__()
            self.kernel_size = kernel_size
            self.avg = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=0)

        def forward(self, x):
            front = x[:, 0:1, :].repeat(1, (self.kernel_size - 1) // 2, 1)
            end = x[:, -1:, :].repeat(1, (self.kernel_size - 1) // 2, 1)
            x = lib.cat([front, x, end], dim=1)
            x = self.avg(x.permute(0, 2, 1))
            return x.permute(0, 2, 1)

    class SeriesDecomp(nn.Module):
        def __init__(self, kernel_size):
            super().__init__()
            self.moving_avg = MovingAvg(kernel_size, stride=1)

        def forward(self, x):
            moving_mean = self.moving_avg(x)
            return x - moving_mean, moving_mean

    class AutoCorrelation(nn.Module):
        def time_delay_agg_training(self, values, corr):
            head, channel, length = values.shape[1], values.shape[2], values.shape[3]
            top_k = int(factor * math.log(length))
            mean_value = lib.mean(lib.mean(corr, dim=1), dim=1)
            index = lib.topk(lib.mean(mean_value, dim=0), top_k, dim=-1)[1]
            weights = lib.stack([mean_value[:, index[i]] for i in range(top_k)], dim=-1)
            tmp_corr = lib.softmax(weights, dim=-1)
            tmp_values = values
            delays_agg = lib.zeros_like(values).float()
            for i in range(top_k):
                pattern = lib.roll(tmp_values, -int(index[i]), -1)
                delays_agg = delays_agg + pattern * (
                    tmp_corr[:, i]
                    .unsqueeze(1)
                    .unsqueeze(1)
                    .unsqueeze(1)
                    .repeat(1, head, channel, length)
                )
            return delays_agg

        def forward(self, queries, keys, values):
            B, L, H, E = queries.shape
            _, S, _, D = values.shape
            if L > S:
                zeros = lib.zeros_like(queries[:, : (L - S), :]).float()
                values = lib.cat([values, zeros], dim=1)
                keys = lib.cat([keys, zeros], dim=1)
            else:
                values = values[:, :L, :, :]
                keys = keys[:, :L, :, :]
            q_fft = lib.fft.rfft(queries.permute(0, 2, 3, 1).contiguous(), dim=-1)
            k_fft = lib.fft.rfft(keys.permute(0, 2, 3, 1).contiguous(), dim=-1)
            res = q_fft * lib.conj(k_fft)
            corr = lib.fft.irfft(res, n=L, dim=-1)
            V = self.time_delay_agg_training(values.permute(0, 2, 3, 1).contiguous(), corr)
            return V.permute(0, 3, 1, 2).contiguous()

    class AutoCorrelationLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner_correlation = AutoCorrelation()
            self.query_projection = nn.Linear(d_model, d_model)
            self.key_projection = nn.Linear(d_model, d_model)
            self.value_projection = nn.Linear(d_model, d_model)
            self.out_projection = nn.Linear(d_model, d_model)
            self.n_heads = n_heads

        def forward(self, queries, keys, values):
            B, L, _ = queries.shape
            _, S, _ = keys.shape
            H = self.n_heads
            queries = self.query_projection(queries).view(B, L, H, -1)
            keys = self.key_projection(keys).view(B, S, H, -1)
            values = self.value_projection(values).view(B, S, H, -1)
            out = self.inner_correlation(queries, keys, values)
            return self.out_projection(out.view(B, L, -1))

    class MyLayernorm(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.layernorm = nn.LayerNorm(channels)

        def forward(self, x):
            x_hat = self.layernorm(x)
            bias = lib.mean(x_hat, dim=1).unsqueeze(1).repeat(1, x.shape[1], 1)
            return x_hat - bias

    class TokenEmbedding(nn.Module):
        def __init__(self, c_in):
            super().__init__()
            self.tokenConv = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1,
                                       padding_mode="circular", bias=False)  # fmt: skip
            for m in self.modules():
                if isinstance(m, nn.Conv1d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="leaky_relu")

        def forward(self, x):
            return self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)

    class EncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = AutoCorrelationLayer()
            self.conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1, bias=False)
            self.conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1, bias=False)
            self.decomp1, self.decomp2 = SeriesDecomp(moving_avg), SeriesDecomp(moving_avg)
            self.dropout = nn.Dropout(0.0)
            self.activation = F.relu

        def forward(self, x):
            x = x + self.dropout(self.attention(x, x, x))
            x, _ = self.decomp1(x)
            y = self.dropout(self.activation(self.conv1(x.transpose(-1, 1))))
            y = self.dropout(self.conv2(y).transpose(-1, 1))
            res, _ = self.decomp2(x + y)
            return res

    class DecoderLayer(nn.Module):
        def __init__(self, c_out):
            super().__init__()
            self.self_attention = AutoCorrelationLayer()
            self.cross_attention = AutoCorrelationLayer()
            self.conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1, bias=False)
            self.conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1, bias=False)
            self.decomp1, self.decomp2 = SeriesDecomp(moving_avg), SeriesDecomp(moving_avg)
            self.decomp3 = SeriesDecomp(moving_avg)
            self.projection = nn.Conv1d(d_model, c_out, kernel_size=3, stride=1, padding=1,
                                        padding_mode="circular", bias=False)  # fmt: skip

        def forward(self, x, cross):
            x = x + self.self_attention(x, x, x)
            x, trend1 = self.decomp1(x)
            x = x + self.cross_attention(x, cross, cross)
            x, trend2 = self.decomp2(x)
            y = F.relu(self.conv1(x.transpose(-1, 1)))
            y = self.conv2(y).transpose(-1, 1)
            x, trend3 = self.decomp3(x + y)
            residual_trend = trend1 + trend2 + trend3
            residual_trend = self.projection(residual_trend.permute(0, 2, 1)).transpose(1, 2)
            return x, residual_trend

    class Autoformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.pred_len, self.label_len = pred_len, label_len
            self.decomp = SeriesDecomp(moving_avg)
            self.enc_embedding = TokenEmbedding(enc_in)
            self.dec_embedding = TokenEmbedding(enc_in)
            self.encoder = EncoderLayer()
            self.encoder_norm = MyLayernorm(d_model)
            self.decoder = DecoderLayer(enc_in)
            self.decoder_norm = MyLayernorm(d_model)
            self.decoder_projection = nn.Linear(d_model, enc_in, bias=True)

        def forward(self, x_enc, target):
            mean = lib.mean(x_enc, dim=1).unsqueeze(1).repeat(1, self.pred_len, 1)
            zeros = lib.zeros([x_enc.shape[0], self.pred_len, x_enc.shape[2]])
            seasonal_init, trend_init = self.decomp(x_enc)
            trend_init = lib.cat([trend_init[:, -self.label_len :, :], mean], dim=1)
            seasonal_init = lib.cat([seasonal_init[:, -self.label_len :, :], zeros], dim=1)
            enc_out = self.encoder_norm(self.encoder(self.enc_embedding(x_enc)))
            seasonal_part, trend_part = self.decoder(self.dec_embedding(seasonal_init), enc_out)
            seasonal_part = self.decoder_projection(self.decoder_norm(seasonal_part))
            dec_out = trend_init + trend_part + seasonal_part
            outputs = dec_out[:, -self.pred_len :, :]
            return F.mse_loss(outputs, target), outputs

    model = Autoformer()
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    # Autoformer's adjust_learning_rate('type1'): halve the rate after each epoch
    scheduler = lib.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.5**epoch)
    return model, opt, scheduler


def test_autoformer_fft_auto_correlation_with_rolled_delays_trains_like_torch():
    _check(
        Program(
            _autoformer,
            _scheduled_step,
            lambda rng: _series(rng, length=12),
            modes=ALL_MODES,
            rtol=2e-4,
            skip=_AUTOFORMER_NOISE,
            recompiles=1,  # the halved learning rate's first change, as in PyTorch
        )
    )


# softmax ignores query and key biases (a shift of every score of a query), the series
# decomposition after each block removes what shifts every time step alike (value and output
# biases), and ``my_Layernorm`` subtracts its mean over time: these gradients are rounding noise,
# which Adam turns into steps of the learning rate's size
_AUTOFORMER_NOISE = (
    *(
        f"{block}.{proj}_projection.bias"
        for block in ("encoder.attention", "decoder.self_attention", "decoder.cross_attention")
        for proj in ("query", "key", "value", "out")
    ),
    "encoder_norm.layernorm.bias",
    "decoder_norm.layernorm.bias",
)


# ------------------------------------------------------------------------------ S4D


def _s4d(lib, d_input=3, d_model=4, d_state=8, n_layers=2, d_output=3):
    """state-spaces/s4's ``s4d.py`` and its ``example.py``: ``C`` a complex parameter stored as
    ``nn.Parameter(torch.view_as_real(C))`` and read back by ``view_as_complex``, ``A`` built as
    ``-exp(log_A_real) + 1j * A_imag``, the kernel ``2 * einsum('hn, hnl -> hl', C,
    exp(dtA.unsqueeze(-1) * arange(L))).real``, an FFT convolution (``rfft(n=2L)``,
    ``irfft(...)[..., :L]``), a ``Conv1d`` + ``GLU(dim=-2)`` output, post-norm residual layers
    and ``setup_optimizer``'s parameter groups from each parameter's ``_optim`` attribute
    (``hasattr``, ``dict.fromkeys`` of ``frozenset``s) with ``CosineAnnealingLR``."""
    nn, F = lib.nn, lib.nn.functional

    class S4DKernel(nn.Module):
        def __init__(self, d_model, N=64, dt_min=0.001, dt_max=0.1, lr=None):
            super().__init__()
            H = d_model
            log_dt = lib.rand(H) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
            C = lib.randn(H, N // 2, dtype=lib.cfloat)
            self.C = nn.Parameter(lib.view_as_real(C))
            self.register("log_dt", log_dt, lr)
            log_A_real = lib.log(0.5 * lib.ones(H, N // 2))
            A_imag = math.pi * lib.arange(N // 2).unsqueeze(0).repeat(H, 1)
            self.register("log_A_real", log_A_real, lr)
            self.register("A_imag", A_imag, lr)

        def forward(self, L):
            dt = lib.exp(self.log_dt)  # (H)
            C = lib.view_as_complex(self.C)  # (H N)
            A = -lib.exp(self.log_A_real) + 1j * self.A_imag  # (H N)
            dtA = A * dt.unsqueeze(-1)  # (H N)
            K = dtA.unsqueeze(-1) * lib.arange(L)  # (H N L)
            C = C * (lib.exp(dtA) - 1.0) / A
            return 2 * lib.einsum("hn, hnl -> hl", C, lib.exp(K)).real

        def register(self, name, tensor, lr=None):
            if lr == 0.0:
                self.register_buffer(name, tensor)
            else:
                self.register_parameter(name, nn.Parameter(tensor))
                optim = {"weight_decay": 0.0}
                if lr is not None:
                    optim["lr"] = lr
                setattr(getattr(self, name), "_optim", optim)

    class S4D(nn.Module):
        def __init__(self, d_model, d_state, transposed=True, **kernel_args):
            super().__init__()
            self.h, self.n = d_model, d_state
            self.transposed = transposed
            self.D = nn.Parameter(lib.randn(self.h))
            self.kernel = S4DKernel(self.h, N=self.n, **kernel_args)
            self.activation = nn.GELU()
            self.dropout = nn.Identity()
            self.output_linear = nn.Sequential(
                nn.Conv1d(self.h, 2 * self.h, kernel_size=1), nn.GLU(dim=-2)
            )

        def forward(self, u):
            if not self.transposed:
                u = u.transpose(-1, -2)
            L = u.size(-1)
            k = self.kernel(L=L)  # (H L)
            k_f = lib.fft.rfft(k, n=2 * L)  # (H L)
            u_f = lib.fft.rfft(u, n=2 * L)  # (B H L)
            y = lib.fft.irfft(u_f * k_f, n=2 * L)[..., :L]  # (B H L)
            y = y + u * self.D.unsqueeze(-1)
            y = self.dropout(self.activation(y))
            y = self.output_linear(y)
            if not self.transposed:
                y = y.transpose(-1, -2)
            return y, None

    class S4Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Linear(d_input, d_model)
            self.s4_layers = nn.ModuleList()
            self.norms = nn.ModuleList()
            self.dropouts = nn.ModuleList()
            for _ in range(n_layers):
                self.s4_layers.append(S4D(d_model, d_state, transposed=True, lr=1e-3))
                self.norms.append(nn.LayerNorm(d_model))
                self.dropouts.append(nn.Dropout1d(0.0))
            self.decoder = nn.Linear(d_model, d_output)

        def forward(self, x, targets):
            x = self.encoder(x)  # (B, L, d_input) -> (B, L, d_model)
            x = x.transpose(-1, -2)  # (B, L, d_model) -> (B, d_model, L)
            for layer, norm, dropout in zip(self.s4_layers, self.norms, self.dropouts):
                z = x
                z, _ = layer(z)
                z = dropout(z)
                x = z + x
                x = norm(x.transpose(-1, -2)).transpose(-1, -2)
            x = x.transpose(-1, -2)
            x = x.mean(dim=1)
            logits = self.decoder(x)
            return F.cross_entropy(logits, targets), logits

    model = S4Model()
    all_parameters = list(model.parameters())
    params = [p for p in all_parameters if not hasattr(p, "_optim")]
    optimizer = lib.optim.AdamW(params, lr=1e-2, weight_decay=0.01)
    hps = [getattr(p, "_optim") for p in all_parameters if hasattr(p, "_optim")]
    hps = [dict(s) for s in sorted(list(dict.fromkeys(frozenset(hp.items()) for hp in hps)))]
    for hp in hps:
        params = [p for p in all_parameters if getattr(p, "_optim", None) == hp]
        optimizer.add_param_group({"params": params, **hp})
    scheduler = lib.optim.lr_scheduler.CosineAnnealingLR(optimizer, 4)
    return model, optimizer, scheduler


def _labelled_sequences(rng, sizes=(5, 7), length=10, d_input=3, classes=3):
    return [
        (
            rng.standard_normal((n, length, d_input), dtype=np.float32),
            rng.integers(0, classes, n),
        )
        for n in sizes
    ]


def test_s4d_complex_kernel_fft_convolution_and_optim_attribute_groups_train_like_torch():
    # the cosine schedule's first change of the learning rate recompiles once (as in PyTorch)
    _check(
        Program(
            _s4d, _scheduled_step, _labelled_sequences, modes=ALL_MODES, rtol=2e-4, recompiles=1
        )
    )


# ------------------------------------------------------------------------------ TimesNet


def _timesnet(lib, enc_in=2, seq_len=12, pred_len=4, d_model=4, d_ff=4, top_k=2,
              num_kernels=2):  # fmt: skip
    """thuml/Time-Series-Library's TimesNet: ``FFT_for_Period`` (``abs(rfft(x, dim=1))``
    averaged, ``frequency_list[0] = 0``, ``topk``, the indices through ``.detach().cpu()
    .numpy()`` and the periods as ``x.shape[1] // top_list``, a numpy array), each period's
    series zero-padded (``torch.zeros([...]).to(x.device)``) and folded into 2-d, an
    Inception block of ``Conv2d``s averaged by ``stack(...).mean(-1)`` with
    ``kaiming_normal_(mode='fan_out')``, the periods' outputs weighted by a softmax
    ``repeat``ed over time and channels, and the non-stationary normalisation around the
    forecast."""
    nn, F = lib.nn, lib.nn.functional

    def FFT_for_Period(x, k=2):
        xf = lib.fft.rfft(x, dim=1)
        frequency_list = abs(xf).mean(0).mean(-1)
        frequency_list[0] = 0
        _, top_list = lib.topk(frequency_list, k)
        top_list = top_list.detach().cpu().numpy()
        period = x.shape[1] // top_list
        return period, abs(xf).mean(-1)[:, top_list]

    class Inception_Block_V1(nn.Module):
        def __init__(self, in_channels, out_channels, num_kernels=6, init_weight=True):
            super().__init__()
            self.num_kernels = num_kernels
            kernels = [
                nn.Conv2d(in_channels, out_channels, kernel_size=2 * i + 1, padding=i)
                for i in range(num_kernels)
            ]
            self.kernels = nn.ModuleList(kernels)
            if init_weight:
                for m in self.modules():
                    if isinstance(m, nn.Conv2d):
                        nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                        if m.bias is not None:
                            nn.init.constant_(m.bias, 0)

        def forward(self, x):
            res_list = [self.kernels[i](x) for i in range(self.num_kernels)]
            return lib.stack(res_list, dim=-1).mean(-1)

    class TimesBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.seq_len, self.pred_len, self.k = seq_len, pred_len, top_k
            self.conv = nn.Sequential(
                Inception_Block_V1(d_model, d_ff, num_kernels=num_kernels),
                nn.GELU(),
                Inception_Block_V1(d_ff, d_model, num_kernels=num_kernels),
            )

        def forward(self, x):
            B, T, N = x.size()
            period_list, period_weight = FFT_for_Period(x, self.k)
            res = []
            for i in range(self.k):
                period = period_list[i]
                if (self.seq_len + self.pred_len) % period != 0:
                    length = (((self.seq_len + self.pred_len) // period) + 1) * period
                    padding = lib.zeros(
                        [x.shape[0], (length - (self.seq_len + self.pred_len)), x.shape[2]]
                    ).to(x.device)
                    out = lib.cat([x, padding], dim=1)
                else:
                    length = self.seq_len + self.pred_len
                    out = x
                out = out.reshape(B, length // period, period, N).permute(0, 3, 1, 2).contiguous()
                out = self.conv(out)
                out = out.permute(0, 2, 3, 1).reshape(B, -1, N)
                res.append(out[:, : (self.seq_len + self.pred_len), :])
            res = lib.stack(res, dim=-1)
            period_weight = F.softmax(period_weight, dim=1)
            period_weight = period_weight.unsqueeze(1).unsqueeze(1).repeat(1, T, N, 1)
            res = lib.sum(res * period_weight, -1)
            return res + x

    class PositionalEmbedding(nn.Module):
        def __init__(self, max_len=64):
            super().__init__()
            pe = lib.zeros(max_len, d_model).float()
            pe.require_grad = False  # sic: the reference's typo, a plain attribute
            position = lib.arange(0, max_len).float().unsqueeze(1)
            div_term = (lib.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
            pe[:, 0::2] = lib.sin(position * div_term)
            pe[:, 1::2] = lib.cos(position * div_term)
            self.register_buffer("pe", pe.unsqueeze(0))

        def forward(self, x):
            return self.pe[:, : x.size(1)]

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.seq_len, self.pred_len = seq_len, pred_len
            self.model = nn.ModuleList([TimesBlock()])
            self.value_embedding = nn.Conv1d(enc_in, d_model, kernel_size=3, padding=1,
                                             padding_mode="circular", bias=False)  # fmt: skip
            self.position_embedding = PositionalEmbedding()
            self.layer_norm = nn.LayerNorm(d_model)
            self.predict_linear = nn.Linear(self.seq_len, self.pred_len + self.seq_len)
            self.projection = nn.Linear(d_model, enc_in, bias=True)

        def forward(self, x_enc, target):
            means = x_enc.mean(1, keepdim=True).detach()
            x_enc = x_enc - means
            stdev = lib.sqrt(lib.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
            x_enc /= stdev
            enc_out = self.value_embedding(x_enc.permute(0, 2, 1)).transpose(1, 2)
            enc_out = enc_out + self.position_embedding(x_enc)
            enc_out = self.predict_linear(enc_out.permute(0, 2, 1)).permute(0, 2, 1)
            for layer in self.model:
                enc_out = self.layer_norm(layer(enc_out))
            dec_out = self.projection(enc_out)
            dec_out = dec_out * (
                stdev[:, 0, :].unsqueeze(1).repeat(1, self.pred_len + self.seq_len, 1)
            )
            dec_out = dec_out + (
                means[:, 0, :].unsqueeze(1).repeat(1, self.pred_len + self.seq_len, 1)
            )
            outputs = dec_out[:, -self.pred_len :, :]
            return F.mse_loss(outputs, target), outputs

    model = Model()
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    return model, opt, lib.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.5**epoch)


def test_timesnet_fft_periods_through_numpy_and_inception_blocks_train_like_torch():
    _check(
        Program(
            _timesnet,
            _scheduled_step,
            lambda rng: _series(rng, length=12),
            modes=ALL_MODES,
            rtol=2e-4,
            recompiles=1,  # the halved learning rate's first change, as in PyTorch
        )
    )


# ------------------------------------------------------------------------------ DeepAR


def _deepar(lib, num_class=3, embedding_dim=2, cov_dim=1, hidden=5, lstm_layers=2):
    """zhykoties/TimeSeries' DeepAR: an ``nn.LSTM`` whose forget-gate biases are set through
    ``_all_weights`` and ``bias.data[start:end].fill_(1.)``, the hidden state flattened by
    ``permute(1, 2, 0).contiguous().view(...)``, ``Softplus`` scales, the loss a
    ``Normal(mu[zero_index], sigma[zero_index]).log_prob`` over the non-zero labels, and the
    training loop's teacher forcing: missing inputs filled in place with the last prediction
    (``train_batch[t, zero_index, 0] = mu[zero_index]`` when ``torch.sum(zero_index) > 0``),
    each step's input taken as ``train_batch[t].unsqueeze_(0).clone()``, and the loss summed
    into ``torch.zeros(1)`` with ``+=``."""
    nn = lib.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm_layers, self.lstm_hidden_dim = lstm_layers, hidden
            self.embedding = nn.Embedding(num_class, embedding_dim)
            self.lstm = nn.LSTM(input_size=1 + cov_dim + embedding_dim, hidden_size=hidden,
                                num_layers=lstm_layers, bias=True, batch_first=False,
                                dropout=0.0)  # fmt: skip
            # forget gate biases to 1, as Jozefowicz et al. recommend
            for names in self.lstm._all_weights:
                for name in filter(lambda n: "bias" in n, names):
                    bias = getattr(self.lstm, name)
                    n = bias.size(0)
                    start, end = n // 4, n // 2
                    bias.data[start:end].fill_(1.0)
            self.distribution_mu = nn.Linear(hidden * lstm_layers, 1)
            self.distribution_presigma = nn.Linear(hidden * lstm_layers, 1)
            self.distribution_sigma = nn.Softplus()

        def forward(self, x, idx, hidden, cell):
            onehot_embed = self.embedding(idx)
            lstm_input = lib.cat((x, onehot_embed), dim=2)
            output, (hidden, cell) = self.lstm(lstm_input, (hidden, cell))
            hidden_permute = hidden.permute(1, 2, 0).contiguous().view(hidden.shape[1], -1)
            pre_sigma = self.distribution_presigma(hidden_permute)
            mu = self.distribution_mu(hidden_permute)
            sigma = self.distribution_sigma(pre_sigma)
            return lib.squeeze(mu), lib.squeeze(sigma), hidden, cell

        def init_hidden(self, input_size):
            return lib.zeros(self.lstm_layers, input_size, self.lstm_hidden_dim)

    model = Net()
    return model, lib.optim.Adam(model.parameters(), lr=1e-2)


def _deepar_step(lib, model, optimizer, train_batch, idx, labels_batch):
    """DeepAR's ``train`` for one batch (``train_window`` steps)."""

    def loss_fn(mu, sigma, labels):
        zero_index = labels != 0
        distribution = lib.distributions.normal.Normal(mu[zero_index], sigma[zero_index])
        likelihood = distribution.log_prob(labels[zero_index])
        return -lib.mean(likelihood)

    batch_size = train_batch.shape[0]
    train_window = train_batch.shape[1]
    optimizer.zero_grad()
    train_batch = train_batch.permute(1, 0, 2).to(lib.float32)  # not scaled
    labels_batch = labels_batch.permute(1, 0).to(lib.float32)
    idx = idx.unsqueeze(0)
    loss = lib.zeros(1)
    mu = None  # the first step's input is never missing
    hidden = model.init_hidden(batch_size)
    cell = model.init_hidden(batch_size)
    for t in range(train_window):
        # if z_t is missing, replace it by output mu from the last time step
        zero_index = train_batch[t, :, 0] == 0
        if t > 0 and lib.sum(zero_index) > 0:
            train_batch[t, zero_index, 0] = mu[zero_index]
        mu, sigma, hidden, cell = model(train_batch[t].unsqueeze_(0).clone(), idx, hidden, cell)
        loss += loss_fn(mu, sigma, labels_batch[t])
    loss.backward()
    optimizer.step()
    return loss, loss.item() / train_window, mu, sigma


def _windows(rng, sizes=(5, 7), window=6, num_class=3):
    """Each series' lagged values (zero where missing) and a covariate, its class id and the
    next values as labels (zero where missing)."""
    batches = []
    for n in sizes:
        values = rng.uniform(0.5, 2.0, (n, window + 1)).astype(np.float32)
        values[rng.uniform(size=values.shape) < 0.25] = 0.0
        values[:, 0] = 1.0  # the first input is never filled from a prediction
        covariate = rng.standard_normal((n, window, 1), dtype=np.float32)
        inputs = np.concatenate([values[:, :-1, None], covariate], axis=2)
        batches.append((inputs, rng.integers(0, num_class, n), values[:, 1:]))
    return batches


def test_deepar_in_place_teacher_forcing_and_masked_normal_likelihood_trains_like_torch():
    # the data-dependent ``if`` breaks the graph at each step; each break's resume function
    # sees the in-place fills of the step before
    _check(Program(_deepar, _deepar_step, _windows, modes=ALL_MODES, rtol=2e-4, recompiles=2))


# ------------------------------------------------------------------------------ TFT


def _tft(lib, num_inputs=3, input_size=2, static_size=3, hidden=6, n_head=2, encode_length=5,
         quantiles=(0.1, 0.5, 0.9)):  # fmt: skip
    """A Temporal Fusion Transformer as the PyTorch ports of Google's reference write it:
    ``GatedLinearUnit`` (``xavier_uniform_`` weights by a ``named_parameters`` loop),
    ``GatedResidualNetwork`` with an optional static context, a variable selection network
    (``softmax`` weights ``unsqueeze(2)``, per-variable GRNs on slices of the embedding,
    ``torch.stack(..., axis=-1)`` and ``.sum(axis=-1)``), LSTM encoder and decoder started from
    the static context, the interpretable multi-head attention (one shared value projection,
    per-head query and key layers, ``bmm`` with a ``triu`` causal mask by ``masked_fill``, heads
    averaged) and the quantile loss by ``torch.max((q - 1) * errors, q * errors)``."""
    nn, F = lib.nn, lib.nn.functional

    class GatedLinearUnit(nn.Module):
        def __init__(self, input_size, hidden_layer_size, dropout_rate=None):
            super().__init__()
            self.dropout_rate = dropout_rate
            self.W4 = nn.Linear(input_size, hidden_layer_size)
            self.W5 = nn.Linear(input_size, hidden_layer_size)
            self.sigmoid = nn.Sigmoid()
            for n, p in self.named_parameters():
                if "bias" not in n:
                    nn.init.xavier_uniform_(p)
                elif "bias" in n:
                    nn.init.zeros_(p)

        def forward(self, x):
            return self.sigmoid(self.W4(x)) * self.W5(x)

    class GateAddNormNetwork(nn.Module):
        def __init__(self, input_size, hidden_layer_size):
            super().__init__()
            self.GLU = GatedLinearUnit(input_size, hidden_layer_size)
            self.LayerNorm = nn.LayerNorm(hidden_layer_size)

        def forward(self, x, skip):
            return self.LayerNorm(self.GLU(x) + skip)

    class GatedResidualNetwork(nn.Module):
        def __init__(self, input_size, hidden_layer_size, output_size=None,
                     additional_context=None):  # fmt: skip
            super().__init__()
            self.output_size = output_size
            self.additional_context = additional_context
            self.W1 = nn.Linear(hidden_layer_size, hidden_layer_size)
            self.W2 = nn.Linear(input_size, hidden_layer_size)
            if self.additional_context:
                self.W3 = nn.Linear(additional_context, hidden_layer_size, bias=False)
            if self.output_size:
                self.skip_linear = nn.Linear(input_size, self.output_size)
                self.glu_add_norm = GateAddNormNetwork(hidden_layer_size, self.output_size)
            else:
                self.glu_add_norm = GateAddNormNetwork(hidden_layer_size, hidden_layer_size)
            self.elu1 = nn.ELU()

        def forward(self, x, c=None):
            skip = self.skip_linear(x) if self.output_size else x
            if self.additional_context:
                eta2 = self.elu1(self.W2(x) + self.W3(c))
            else:
                eta2 = self.elu1(self.W2(x))
            return self.glu_add_norm(self.W1(eta2), skip)

    class VariableSelectionNetwork(nn.Module):
        def __init__(self, input_size, num_inputs, hidden_size, context=None):
            super().__init__()
            self.input_size, self.num_inputs = input_size, num_inputs
            self.flattened_inputs = GatedResidualNetwork(
                num_inputs * input_size, hidden_size, num_inputs, additional_context=context
            )
            self.single_variable_grns = nn.ModuleList(
                [
                    GatedResidualNetwork(input_size, hidden_size, hidden_size)
                    for _ in range(num_inputs)
                ]
            )
            self.softmax = nn.Softmax(dim=-1)

        def forward(self, embedding, context=None):
            sparse_weights = self.flattened_inputs(embedding, context)
            sparse_weights = self.softmax(sparse_weights).unsqueeze(2)
            var_outputs = []
            for i in range(self.num_inputs):
                piece = embedding[..., (i * self.input_size) : (i + 1) * self.input_size]
                var_outputs.append(self.single_variable_grns[i](piece))
            var_outputs = lib.stack(var_outputs, axis=-1)
            outputs = var_outputs * sparse_weights
            return outputs.sum(axis=-1), sparse_weights

    class ScaledDotProductAttention(nn.Module):
        def forward(self, q, k, v, mask=None):
            attn = lib.bmm(q, k.permute(0, 2, 1)) / math.sqrt(q.size(-1))
            if mask is not None:
                attn = attn.masked_fill(mask, -1e9)
            attn = F.softmax(attn, dim=-1)
            return lib.bmm(attn, v), attn

    class InterpretableMultiHeadAttention(nn.Module):
        def __init__(self, n_head, d_model):
            super().__init__()
            self.n_head = n_head
            self.d_k = self.d_v = d_k = d_model // n_head
            self.v_layer = nn.Linear(d_model, self.d_v)
            self.q_layers = nn.ModuleList([nn.Linear(d_model, d_k) for _ in range(n_head)])
            self.k_layers = nn.ModuleList([nn.Linear(d_model, d_k) for _ in range(n_head)])
            self.attention = ScaledDotProductAttention()
            self.w_o = nn.Linear(self.d_v, d_model)

        def forward(self, q, k, v, mask=None):
            heads, attns = [], []
            vs = self.v_layer(v)
            for i in range(self.n_head):
                qs = self.q_layers[i](q)
                ks = self.k_layers[i](k)
                head, attn = self.attention(qs, ks, vs, mask)
                heads.append(head)
                attns.append(attn)
            head = lib.stack(heads, dim=2) if self.n_head > 1 else heads[0]
            attn = lib.stack(attns, dim=2)
            outputs = lib.mean(head, dim=2) if self.n_head > 1 else head
            return self.w_o(outputs), attn

    class TFT(nn.Module):
        def __init__(self):
            super().__init__()
            self.encode_length = encode_length
            self.static_encoder = GatedResidualNetwork(static_size, hidden, hidden)
            self.static_context_h = GatedResidualNetwork(hidden, hidden)
            self.static_context_c = GatedResidualNetwork(hidden, hidden)
            self.static_context_variable_selection = GatedResidualNetwork(hidden, hidden)
            self.encoder_variable_selection = VariableSelectionNetwork(
                input_size, num_inputs, hidden, context=hidden
            )
            self.decoder_variable_selection = VariableSelectionNetwork(
                input_size, num_inputs - 1, hidden, context=hidden
            )
            self.lstm_encoder = nn.LSTM(hidden, hidden, batch_first=True)
            self.lstm_decoder = nn.LSTM(hidden, hidden, batch_first=True)
            self.post_lstm_gate = GateAddNormNetwork(hidden, hidden)
            self.static_enrichment = GatedResidualNetwork(hidden, hidden,
                                                          additional_context=hidden)  # fmt: skip
            self.multihead_attn = InterpretableMultiHeadAttention(n_head, hidden)
            self.post_attn_gate = GateAddNormNetwork(hidden, hidden)
            self.pos_wise_ff = GatedResidualNetwork(hidden, hidden)
            self.pre_output_gate = GateAddNormNetwork(hidden, hidden)
            self.output_layer = nn.Linear(hidden, len(quantiles))

        def forward(self, static, past, future, target):
            static_embedding = self.static_encoder(static)
            context = self.static_context_variable_selection(static_embedding)
            h0 = self.static_context_h(static_embedding).unsqueeze(0)
            c0 = self.static_context_c(static_embedding).unsqueeze(0)
            steps = past.size(1) + future.size(1)
            ctx = context.unsqueeze(1)
            past_sel, past_weights = self.encoder_variable_selection(
                past, ctx.expand(-1, past.size(1), -1)
            )
            future_sel, _ = self.decoder_variable_selection(
                future, ctx.expand(-1, future.size(1), -1)
            )
            encoder_output, (h, c) = self.lstm_encoder(past_sel, (h0, c0))
            decoder_output, _ = self.lstm_decoder(future_sel, (h, c))
            lstm_output = lib.cat([encoder_output, decoder_output], dim=1)
            lstm_input = lib.cat([past_sel, future_sel], dim=1)
            attn_input = self.post_lstm_gate(lstm_output, lstm_input)
            enriched = self.static_enrichment(attn_input, ctx.expand(-1, steps, -1))
            mask = lib.triu(lib.ones(steps, steps), diagonal=1).bool()
            attn_output, attn = self.multihead_attn(enriched, enriched, enriched, mask)
            attn_output = self.post_attn_gate(attn_output, enriched)
            output = self.pos_wise_ff(attn_output)
            output = self.pre_output_gate(output, attn_input)
            y_pred = self.output_layer(output[:, self.encode_length :, :])
            losses = []
            for i, q in enumerate(quantiles):
                errors = target - y_pred[..., i]
                losses.append(lib.max((q - 1) * errors, q * errors).unsqueeze(-1))
            loss = lib.mean(lib.sum(lib.cat(losses, dim=-1), dim=-1))
            return loss, y_pred, past_weights

    model = TFT()
    return model, lib.optim.Adam(model.parameters(), lr=1e-3)


def _tft_step(lib, model, opt, *inputs):
    loss, *logged = model(*inputs)
    opt.zero_grad()
    loss.backward()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    opt.step()
    return (loss, *logged)


def _tft_batches(rng, sizes=(7, 9), num_inputs=3, input_size=2, static_size=3, past=5, future=2):
    return [
        (
            rng.standard_normal((n, static_size), dtype=np.float32),
            rng.standard_normal((n, past, num_inputs * input_size), dtype=np.float32),
            rng.standard_normal((n, future, (num_inputs - 1) * input_size), dtype=np.float32),
            rng.standard_normal((n, future), dtype=np.float32),
        )
        for n in sizes
    ]


def test_temporal_fusion_transformer_variable_selection_and_quantile_loss_trains_like_torch():
    # eagerly and under dynamic=True only: its many small modules make it the costliest to compile
    _check(Program(_tft, _tft_step, _tft_batches, rtol=2e-4))
