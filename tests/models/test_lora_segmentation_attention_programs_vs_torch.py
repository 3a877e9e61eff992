"""Fine-tuning, segmentation, style and efficient-attention programs as their reference
repositories write them (loralib's LoRA layers, the Decision Transformer, SegFormer, PSPNet with
the Lovasz-softmax loss, AdaIN style transfer, Performer's FAVOR+ attention), written once for
both libraries and run eagerly, under ``kiln.compile`` and under ``kiln.compile(dynamic=True)``
against PyTorch (probe round 18, second part).

The harness is ``test_hf_vision_sequence_programs_vs_torch``'s: kiln's model starts from
PyTorch's weights, and every step's outputs, parameters, gradients and buffers are compared.
Each program runs two batches of different sizes on a model cut to what its features need.
All of them match PyTorch (LoRA's merge into ``weight.data`` by ``train()``/``eval()`` inside the
compiled step included); nothing in the library needed fixing.
"""

from __future__ import annotations

import math
from itertools import filterfalse as ifilterfalse

import numpy as np

from tests.models.test_hf_vision_sequence_programs_vs_torch import ALL_MODES, Program, _check
from tests.oracle import needs_torch

pytestmark = needs_torch


def _step(lib, model, opt, *inputs):
    """The usual step of a model returning ``(loss, *logged)``."""
    loss, *logged = model(*inputs)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return (loss, *logged)


# ------------------------------------------------------------------------------ LoRA


def _lora(lib, vocab=11, d_model=6, r=2, lora_alpha=4, classes=3):
    """microsoft/LoRA's ``loralib``: ``Linear(nn.Linear, LoRALayer)`` initialised through
    ``nn.Linear.__init__(self, ...)``, ``lora_A``/``lora_B`` from ``self.weight.new_zeros``,
    ``reset_parameters`` overridden (``kaiming_uniform_(a=math.sqrt(5))``, ``zeros_``), the
    frozen weight merged into and out of ``self.weight.data`` by ``train(mode)``, ``Embedding``'s
    ``F.embedding`` of ``lora_A.transpose(0, 1)``, ``MergedLinear``'s grouped ``conv1d`` and
    ``zero_pad`` by boolean column indexing, ``fan_in_fan_out`` transposes, and
    ``mark_only_lora_as_trainable(bias='lora_only')``."""
    nn, F = lib.nn, lib.nn.functional

    class LoRALayer:
        def __init__(self, r, lora_alpha, lora_dropout, merge_weights):
            self.r = r
            self.lora_alpha = lora_alpha
            self.lora_dropout = (lambda x: x) if lora_dropout == 0.0 else nn.Dropout(lora_dropout)
            self.merged = False
            self.merge_weights = merge_weights

    class Embedding(nn.Embedding, LoRALayer):
        def __init__(self, num_embeddings, embedding_dim, r=0, lora_alpha=1, merge_weights=True,
                     **kwargs):  # fmt: skip
            nn.Embedding.__init__(self, num_embeddings, embedding_dim, **kwargs)
            LoRALayer.__init__(self, r=r, lora_alpha=lora_alpha, lora_dropout=0,
                               merge_weights=merge_weights)  # fmt: skip
            if r > 0:
                self.lora_A = nn.Parameter(self.weight.new_zeros((r, num_embeddings)))
                self.lora_B = nn.Parameter(self.weight.new_zeros((embedding_dim, r)))
                self.scaling = self.lora_alpha / self.r
                self.weight.requires_grad = False
            self.reset_parameters()

        def reset_parameters(self):
            nn.Embedding.reset_parameters(self)
            if hasattr(self, "lora_A"):
                nn.init.zeros_(self.lora_A)
                nn.init.normal_(self.lora_B)

        def train(self, mode: bool = True):
            nn.Embedding.train(self, mode)
            if mode:
                if self.merge_weights and self.merged:
                    if self.r > 0:
                        self.weight.data -= (self.lora_B @ self.lora_A).transpose(0, 1) * (
                            self.scaling
                        )
                    self.merged = False
            else:
                if self.merge_weights and not self.merged:
                    if self.r > 0:
                        self.weight.data += (self.lora_B @ self.lora_A).transpose(0, 1) * (
                            self.scaling
                        )
                    self.merged = True
            return self

        def forward(self, x):
            if self.r > 0 and not self.merged:
                result = nn.Embedding.forward(self, x)
                after_A = F.embedding(
                    x, self.lora_A.transpose(0, 1), self.padding_idx, self.max_norm,
                    self.norm_type, self.scale_grad_by_freq, self.sparse,
                )  # fmt: skip
                result += (after_A @ self.lora_B.transpose(0, 1)) * self.scaling
                return result
            return nn.Embedding.forward(self, x)

    class Linear(nn.Linear, LoRALayer):
        def __init__(self, in_features, out_features, r=0, lora_alpha=1, lora_dropout=0.0,
                     fan_in_fan_out=False, merge_weights=True, **kwargs):  # fmt: skip
            nn.Linear.__init__(self, in_features, out_features, **kwargs)
            LoRALayer.__init__(self, r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                               merge_weights=merge_weights)  # fmt: skip
            self.fan_in_fan_out = fan_in_fan_out
            if r > 0:
                self.lora_A = nn.Parameter(self.weight.new_zeros((r, in_features)))
                self.lora_B = nn.Parameter(self.weight.new_zeros((out_features, r)))
                self.scaling = self.lora_alpha / self.r
                self.weight.requires_grad = False
            self.reset_parameters()
            if fan_in_fan_out:
                self.weight.data = self.weight.data.transpose(0, 1)

        def reset_parameters(self):
            nn.Linear.reset_parameters(self)
            if hasattr(self, "lora_A"):
                nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
                nn.init.zeros_(self.lora_B)

        def train(self, mode: bool = True):
            def T(w):
                return w.transpose(0, 1) if self.fan_in_fan_out else w

            nn.Linear.train(self, mode)
            if mode:
                if self.merge_weights and self.merged:
                    if self.r > 0:
                        self.weight.data -= T(self.lora_B @ self.lora_A) * self.scaling
                    self.merged = False
            else:
                if self.merge_weights and not self.merged:
                    if self.r > 0:
                        self.weight.data += T(self.lora_B @ self.lora_A) * self.scaling
                    self.merged = True
            return self

        def forward(self, x):
            def T(w):
                return w.transpose(0, 1) if self.fan_in_fan_out else w

            if self.r > 0 and not self.merged:
                result = F.linear(x, T(self.weight), bias=self.bias)
                result += (
                    self.lora_dropout(x) @ self.lora_A.transpose(0, 1) @ self.lora_B.transpose(0, 1)
                ) * self.scaling
                return result
            return F.linear(x, T(self.weight), bias=self.bias)

    class MergedLinear(nn.Linear, LoRALayer):
        def __init__(self, in_features, out_features, r=0, lora_alpha=1, enable_lora=(False,),
                     fan_in_fan_out=False, merge_weights=True, **kwargs):  # fmt: skip
            nn.Linear.__init__(self, in_features, out_features, **kwargs)
            LoRALayer.__init__(self, r=r, lora_alpha=lora_alpha, lora_dropout=0.0,
                               merge_weights=merge_weights)  # fmt: skip
            assert out_features % len(enable_lora) == 0
            self.enable_lora = enable_lora
            self.fan_in_fan_out = fan_in_fan_out
            if r > 0 and any(enable_lora):
                self.lora_A = nn.Parameter(self.weight.new_zeros((r * sum(enable_lora),
                                                                  in_features)))  # fmt: skip
                self.lora_B = nn.Parameter(
                    self.weight.new_zeros((out_features // len(enable_lora) * sum(enable_lora), r))
                )
                self.scaling = self.lora_alpha / self.r
                self.weight.requires_grad = False
                self.lora_ind = self.weight.new_zeros((out_features,), dtype=lib.bool).view(
                    len(enable_lora), -1
                )
                self.lora_ind[enable_lora, :] = True
                self.lora_ind = self.lora_ind.view(-1)
            self.reset_parameters()
            if fan_in_fan_out:
                self.weight.data = self.weight.data.transpose(0, 1)

        def reset_parameters(self):
            nn.Linear.reset_parameters(self)
            if hasattr(self, "lora_A"):
                nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
                # loralib zeroes lora_B; a draw here makes the LoRA path count from the start
                nn.init.normal_(self.lora_B, std=0.1)

        def zero_pad(self, x):
            result = x.new_zeros((len(self.lora_ind), *x.shape[1:]))
            result[self.lora_ind] = x
            return result

        def merge_AB(self):
            def T(w):
                return w.transpose(0, 1) if self.fan_in_fan_out else w

            delta_w = F.conv1d(
                self.lora_A.unsqueeze(0), self.lora_B.unsqueeze(-1), groups=sum(self.enable_lora)
            ).squeeze(0)
            return T(self.zero_pad(delta_w))

        def train(self, mode: bool = True):
            nn.Linear.train(self, mode)
            if mode:
                if self.merge_weights and self.merged:
                    if self.r > 0 and any(self.enable_lora):
                        self.weight.data -= self.merge_AB() * self.scaling
                    self.merged = False
            else:
                if self.merge_weights and not self.merged:
                    if self.r > 0 and any(self.enable_lora):
                        self.weight.data += self.merge_AB() * self.scaling
                    self.merged = True
            return self

        def forward(self, x):
            def T(w):
                return w.transpose(0, 1) if self.fan_in_fan_out else w

            if self.merged:
                return F.linear(x, T(self.weight), bias=self.bias)
            result = F.linear(x, T(self.weight), bias=self.bias)
            if self.r > 0:
                result += self.lora_dropout(x) @ T(self.merge_AB().T) * self.scaling
            return result

    def mark_only_lora_as_trainable(model, bias="none"):
        for n, p in model.named_parameters():
            if "lora_" not in n:
                p.requires_grad = False
        if bias == "none":
            return
        elif bias == "all":
            for n, p in model.named_parameters():
                if "bias" in n:
                    p.requires_grad = True
        elif bias == "lora_only":
            for m in model.modules():
                if isinstance(m, LoRALayer) and hasattr(m, "bias") and m.bias is not None:
                    m.bias.requires_grad = True

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = Embedding(vocab, d_model, r=r, lora_alpha=lora_alpha)
            # GPT-2's c_attn: Conv1D weights, hence fan_in_fan_out, LoRA on q and v only
            self.c_attn = MergedLinear(d_model, 3 * d_model, r=r, lora_alpha=lora_alpha,
                                       enable_lora=[True, False, True],
                                       fan_in_fan_out=True)  # fmt: skip
            self.fc = Linear(d_model, d_model, r=r, lora_alpha=lora_alpha)
            self.head = nn.Linear(d_model, classes)

        def forward(self, ids, labels):
            h = self.wte(ids)
            q, k, v = self.c_attn(h).split(d_model, dim=2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d_model)
            h = h + att.softmax(-1) @ v
            h = h + F.gelu(self.fc(h))
            logits = self.head(h.mean(1))
            return F.cross_entropy(logits, labels), logits

    model = Classifier()
    mark_only_lora_as_trainable(model, bias="lora_only")
    opt = lib.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    return model, opt


def _lora_step(lib, model, opt, ids, labels):
    """A training step, then the merged model evaluated as a validation loop would (``eval()``
    merges the LoRA product into the frozen weights, ``train()`` takes it out again)."""
    loss, logits = model(ids, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    model.eval()
    with lib.no_grad():
        eval_loss, eval_logits = model(ids, labels)
    model.train()
    return loss, logits, eval_loss, eval_logits


def _token_labels(rng, sizes=(5, 7), length=4, vocab=11, classes=3):
    return [(rng.integers(0, vocab, (n, length)), rng.integers(0, classes, n)) for n in sizes]


def test_lora_layers_merged_by_train_and_eval_with_frozen_weights_train_like_torch():
    # c_attn's bias holds the key bias, whose gradient is rounding noise (softmax ignores a shift
    # of every score of a query) that AdamW turns into steps of the learning rate's size
    _check(
        Program(_lora, _lora_step, _token_labels, modes=ALL_MODES, rtol=2e-4, skip=("c_attn.bias",))
    )


# ------------------------------------------------------------------------------ Decision Transformer


def _decision_transformer(lib, state_dim=3, act_dim=2, hidden=8, max_ep_len=20, n_head=2):
    """kzl/decision-transformer's gym model: returns, states and actions embedded (a timestep
    ``nn.Embedding`` added to each), interleaved by ``torch.stack((R, s, a), dim=1).permute(0,
    2, 1, 3).reshape(batch, 3 * seq, hidden)`` and likewise the attention mask, ``embed_ln``, a
    GPT-2 block over the padded positions (``(1.0 - mask) * -10000.0`` plus the causal
    ``tril``), actions predicted from the state tokens (``x.reshape(batch, seq, 3,
    hidden).permute(0, 2, 1, 3)``) through ``Tanh``, the loss over
    ``action_preds.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]``, norm clipping to 0.25
    and a ``LambdaLR`` warmup."""
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(hidden)
            self.c_attn = nn.Linear(hidden, 3 * hidden)
            self.c_proj = nn.Linear(hidden, hidden)
            self.ln_2 = nn.LayerNorm(hidden)
            self.mlp = nn.Sequential(
                nn.Linear(hidden, 4 * hidden), nn.GELU(approximate="tanh"),
                nn.Linear(4 * hidden, hidden),
            )  # fmt: skip

        def forward(self, x, attention_mask):
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(hidden, dim=2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            w = lib.matmul(q, k.transpose(-1, -2)) / float(v.size(-1)) ** 0.5
            causal = lib.tril(lib.ones((T, T), dtype=lib.uint8)).view(1, 1, T, T).bool()
            w = lib.where(causal, w, lib.tensor(-1e4, dtype=w.dtype))
            w = w + (1.0 - attention_mask[:, None, None, :].to(w.dtype)) * -10000.0
            a = lib.matmul(nn.functional.softmax(w, dim=-1), v)
            x = x + self.c_proj(a.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.mlp(self.ln_2(x))

    class DecisionTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_timestep = nn.Embedding(max_ep_len, hidden)
            self.embed_return = nn.Linear(1, hidden)
            self.embed_state = nn.Linear(state_dim, hidden)
            self.embed_action = nn.Linear(act_dim, hidden)
            self.embed_ln = nn.LayerNorm(hidden)
            self.wpe = nn.Embedding(3 * max_ep_len, hidden)
            self.block = Block()
            self.ln_f = nn.LayerNorm(hidden)
            self.predict_state = nn.Linear(hidden, state_dim)
            self.predict_action = nn.Sequential(nn.Linear(hidden, act_dim), nn.Tanh())
            self.predict_return = nn.Linear(hidden, 1)

        def forward(self, states, actions, returns_to_go, timesteps, attention_mask):
            batch_size, seq_length = states.shape[0], states.shape[1]
            time_embeddings = self.embed_timestep(timesteps)
            state_embeddings = self.embed_state(states) + time_embeddings
            action_embeddings = self.embed_action(actions) + time_embeddings
            returns_embeddings = self.embed_return(returns_to_go) + time_embeddings
            stacked_inputs = (
                lib.stack((returns_embeddings, state_embeddings, action_embeddings), dim=1)
                .permute(0, 2, 1, 3)
                .reshape(batch_size, 3 * seq_length, hidden)
            )
            stacked_inputs = self.embed_ln(stacked_inputs)
            stacked_attention_mask = (
                lib.stack((attention_mask, attention_mask, attention_mask), dim=1)
                .permute(0, 2, 1)
                .reshape(batch_size, 3 * seq_length)
            )
            position_ids = lib.arange(3 * seq_length).unsqueeze(0)
            x = self.block(stacked_inputs + self.wpe(position_ids), stacked_attention_mask)
            x = self.ln_f(x)
            x = x.reshape(batch_size, seq_length, 3, hidden).permute(0, 2, 1, 3)
            return_preds = self.predict_return(x[:, 2])
            state_preds = self.predict_state(x[:, 2])
            action_preds = self.predict_action(x[:, 1])
            return state_preds, action_preds, return_preds

    model = DecisionTransformer()
    optimizer = lib.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    warmup_steps = 3
    scheduler = lib.optim.lr_scheduler.LambdaLR(
        optimizer, lambda steps: min((steps + 1) / warmup_steps, 1)
    )
    return model, optimizer, scheduler


def _decision_transformer_step(lib, model, optimizer, scheduler, states, actions, rtg,
                               timesteps, attention_mask):  # fmt: skip
    """SequenceTrainer.train_step."""
    action_target = lib.clone(actions)
    state_preds, action_preds, reward_preds = model(
        states, actions, rtg[:, :-1], timesteps, attention_mask
    )
    act_dim = action_preds.shape[2]
    action_preds = action_preds.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]
    action_target = action_target.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]
    loss = lib.mean((action_preds - action_target) ** 2)
    optimizer.zero_grad()
    loss.backward()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    optimizer.step()
    scheduler.step()
    with lib.no_grad():
        action_error = lib.mean((action_preds - action_target) ** 2).detach().cpu().item()
    return loss, action_error


def _trajectory_batches(rng, sizes=(6, 7), K=4, state_dim=3, act_dim=2, max_ep_len=20):
    """get_batch's left padding: zeros before each trajectory's tail and a mask of ones."""
    batches = []
    for n in sizes:
        tlen = rng.integers(2, K + 1, n)
        tlen[0] = K
        mask = (np.arange(K)[None] >= (K - tlen)[:, None]).astype(np.float32)
        states = rng.standard_normal((n, K, state_dim), dtype=np.float32) * mask[..., None]
        actions = rng.uniform(-1, 1, (n, K, act_dim)).astype(np.float32) * mask[..., None]
        rtg = rng.standard_normal((n, K + 1, 1), dtype=np.float32)
        starts = rng.integers(0, max_ep_len - K, n)
        timesteps = (starts[:, None] + np.arange(K)[None]) * mask.astype(np.int64)
        batches.append((states, actions, rtg, timesteps, mask))
    return batches


def test_decision_transformer_interleaved_tokens_and_masked_action_loss_train_like_torch():
    # the warmup's learning rate changes each step: its first change recompiles (as in PyTorch)
    _check(
        Program(
            _decision_transformer,
            _decision_transformer_step,
            _trajectory_batches,
            modes=ALL_MODES,
            rtol=2e-4,
            recompiles=1,
        )
    )


# ------------------------------------------------------------------------------ SegFormer


def _segformer(lib, in_chans=3, dims=(4, 8), heads=(1, 2), sr_ratios=(2, 1), classes=3,
               embed=8):  # fmt: skip
    """NVlabs/SegFormer's Mix Transformer and all-MLP head: overlapping patch embeddings
    (strided ``Conv2d``, ``flatten(2).transpose(1, 2)``, ``LayerNorm``), efficient
    self-attention whose keys and values come from a spatial-reduction convolution of the
    tokens reshaped to an image, the Mix-FFN's depthwise ``DWConv`` between its linears,
    ``trunc_normal_`` and fan-out ``normal_`` initialisation through ``self.apply``, and the
    decoder's per-stage MLPs upsampled by ``F.interpolate(mode='bilinear',
    align_corners=False)``, fused by a 1x1 conv with BatchNorm, trained by cross entropy with
    ``ignore_index=255`` on labels upsampled to the image."""
    nn, F = lib.nn, lib.nn.functional

    def init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)
        elif isinstance(m, nn.Conv2d):
            fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
            fan_out //= m.groups
            m.weight.data.normal_(0, math.sqrt(2.0 / fan_out))
            if m.bias is not None:
                m.bias.data.zero_()

    class DWConv(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dwconv = nn.Conv2d(dim, dim, 3, 1, 1, bias=True, groups=dim)

        def forward(self, x, H, W):
            B, N, C = x.shape
            x = x.transpose(1, 2).view(B, C, H, W)
            return self.dwconv(x).flatten(2).transpose(1, 2)

    class Mlp(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.fc1 = nn.Linear(dim, hidden)
            self.dwconv = DWConv(hidden)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(hidden, dim)

        def forward(self, x, H, W):
            return self.fc2(self.act(self.dwconv(self.fc1(x), H, W)))

    class Attention(nn.Module):
        def __init__(self, dim, num_heads, sr_ratio):
            super().__init__()
            self.num_heads = num_heads
            self.scale = (dim // num_heads) ** -0.5
            self.q = nn.Linear(dim, dim, bias=False)
            self.kv = nn.Linear(dim, dim * 2, bias=False)
            self.proj = nn.Linear(dim, dim)
            self.sr_ratio = sr_ratio
            if sr_ratio > 1:
                self.sr = nn.Conv2d(dim, dim, kernel_size=sr_ratio, stride=sr_ratio)
                self.norm = nn.LayerNorm(dim)

        def forward(self, x, H, W):
            B, N, C = x.shape
            q = self.q(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
            if self.sr_ratio > 1:
                x_ = x.permute(0, 2, 1).reshape(B, C, H, W)
                x_ = self.sr(x_).reshape(B, C, -1).permute(0, 2, 1)
                x_ = self.norm(x_)
                kv = self.kv(x_).reshape(B, -1, 2, self.num_heads, C // self.num_heads)
            else:
                kv = self.kv(x).reshape(B, -1, 2, self.num_heads, C // self.num_heads)
            kv = kv.permute(2, 0, 3, 1, 4)
            k, v = kv[0], kv[1]
            attn = (q @ k.transpose(-2, -1)) * self.scale
            attn = attn.softmax(dim=-1)
            x = (attn @ v).transpose(1, 2).reshape(B, N, C)
            return self.proj(x)

    class Block(nn.Module):
        def __init__(self, dim, num_heads, sr_ratio):
            super().__init__()
            self.norm1 = nn.LayerNorm(dim)
            self.attn = Attention(dim, num_heads, sr_ratio)
            self.drop_path = nn.Identity()
            self.norm2 = nn.LayerNorm(dim)
            self.mlp = Mlp(dim, dim * 2)

        def forward(self, x, H, W):
            x = x + self.drop_path(self.attn(self.norm1(x), H, W))
            return x + self.drop_path(self.mlp(self.norm2(x), H, W))

    class OverlapPatchEmbed(nn.Module):
        def __init__(self, patch_size, stride, in_chans, embed_dim):
            super().__init__()
            self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=stride,
                                  padding=(patch_size // 2, patch_size // 2))  # fmt: skip
            self.norm = nn.LayerNorm(embed_dim)

        def forward(self, x):
            x = self.proj(x)
            _, _, H, W = x.shape
            x = x.flatten(2).transpose(1, 2)
            return self.norm(x), H, W

    class SegFormer(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed1 = OverlapPatchEmbed(7, 4, in_chans, dims[0])
            self.patch_embed2 = OverlapPatchEmbed(3, 2, dims[0], dims[1])
            self.block1 = nn.ModuleList([Block(dims[0], heads[0], sr_ratios[0])])
            self.block2 = nn.ModuleList([Block(dims[1], heads[1], sr_ratios[1])])
            self.norm1, self.norm2 = nn.LayerNorm(dims[0]), nn.LayerNorm(dims[1])
            self.linear_c1 = nn.Linear(dims[0], embed)
            self.linear_c2 = nn.Linear(dims[1], embed)
            self.linear_fuse = nn.Sequential(
                nn.Conv2d(2 * embed, embed, 1, bias=False), nn.BatchNorm2d(embed), nn.ReLU()
            )
            self.linear_pred = nn.Conv2d(embed, classes, kernel_size=1)
            self.apply(init_weights)

        def forward_features(self, x):
            B = x.shape[0]
            outs = []
            for embed_layer, blocks, norm in (
                (self.patch_embed1, self.block1, self.norm1),
                (self.patch_embed2, self.block2, self.norm2),
            ):
                x, H, W = embed_layer(x)
                for blk in blocks:
                    x = blk(x, H, W)
                x = norm(x)
                x = x.reshape(B, H, W, -1).permute(0, 3, 1, 2).contiguous()
                outs.append(x)
            return outs

        def forward(self, img, label):
            c1, c2 = self.forward_features(img)
            n, _, h, w = c2.shape
            _c2 = self.linear_c2(c2.flatten(2).transpose(1, 2)).permute(0, 2, 1)
            _c2 = _c2.reshape(n, -1, c2.shape[2], c2.shape[3])
            _c2 = F.interpolate(_c2, size=c1.size()[2:], mode="bilinear", align_corners=False)
            _c1 = self.linear_c1(c1.flatten(2).transpose(1, 2)).permute(0, 2, 1)
            _c1 = _c1.reshape(n, -1, c1.shape[2], c1.shape[3])
            _c = self.linear_fuse(lib.cat([_c2, _c1], dim=1))
            seg_logit = self.linear_pred(_c)
            seg_logit = F.interpolate(seg_logit, size=label.shape[1:], mode="bilinear",
                                      align_corners=False)  # fmt: skip
            loss = F.cross_entropy(seg_logit, label, ignore_index=255)
            return loss, seg_logit.argmax(1)

    model = SegFormer()
    opt = lib.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.01)
    return model, opt


def _segmentation_batches(rng, sizes=(2, 3), side=16, classes=3, ignore=255):
    batches = []
    for n in sizes:
        label = rng.integers(0, classes, (n, side, side))
        label[rng.uniform(size=label.shape) < 0.1] = ignore
        batches.append((rng.standard_normal((n, 3, side, side), dtype=np.float32), label))
    return batches


def test_segformer_spatial_reduction_attention_and_mix_ffn_train_like_torch():
    # what shifts every pixel of a channel alike before the fuse's BatchNorm (the last stage's
    # norm bias, the per-stage MLPs' biases) has a rounding-noise gradient, which AdamW turns into
    # steps of the learning rate's size; the BatchNorm's running mean records those steps
    noise = ("norm2.bias", "linear_c1.bias", "linear_c2.bias", "buffer linear_fuse.1.running_mean")
    # eagerly and under dynamic=True only: the costliest program of the file to compile
    _check(Program(_segformer, _step, _segmentation_batches, rtol=2e-4, skip=noise))


# ------------------------------------------------------------------------------ PSPNet + Lovasz


def _lovasz_softmax(lib, probas, labels, classes="present", ignore=255):
    """bermanmaxim/LovaszSoftmax's ``lovasz_softmax`` (per_image=False), as its users copy it:
    ``flatten_probas`` with ``valid.nonzero().squeeze()``, classes skipped when absent
    (``fg.sum() == 0``), errors sorted by ``torch.sort(descending=True)``, ``perm.data``, the
    Lovasz extension's gradient by ``cumsum`` and ``jaccard[1:p] = jaccard[1:p] -
    jaccard[0:-1]``, ``torch.dot`` with ``Variable(lovasz_grad(fg_sorted))`` and the
    iterator-based ``mean`` of the per-class losses."""
    Variable = lib.autograd.Variable

    def isnan(x):
        return x != x

    def mean(values, ignore_nan=False, empty=0):
        values = iter(values)
        if ignore_nan:
            values = ifilterfalse(isnan, values)
        try:
            n = 1
            acc = next(values)
        except StopIteration:
            if empty == "raise":
                raise ValueError("Empty mean") from None
            return empty
        for n, v in enumerate(values, 2):
            acc += v
        if n == 1:
            return acc
        return acc / n

    def lovasz_grad(gt_sorted):
        p = len(gt_sorted)
        gts = gt_sorted.sum()
        intersection = gts - gt_sorted.float().cumsum(0)
        union = gts + (1 - gt_sorted).float().cumsum(0)
        jaccard = 1.0 - intersection / union
        if p > 1:  # cover 1-pixel case
            jaccard[1:p] = jaccard[1:p] - jaccard[0:-1]
        return jaccard

    def flatten_probas(probas, labels, ignore=None):
        B, C, H, W = probas.size()
        probas = probas.permute(0, 2, 3, 1).contiguous().view(-1, C)  # B * H * W, C = P, C
        labels = labels.view(-1)
        if ignore is None:
            return probas, labels
        valid = labels != ignore
        vprobas = probas[valid.nonzero().squeeze()]
        vlabels = labels[valid]
        return vprobas, vlabels

    def lovasz_softmax_flat(probas, labels, classes="present"):
        if probas.numel() == 0:
            return probas * 0.0
        C = probas.size(1)
        losses = []
        class_to_sum = list(range(C)) if classes in ["all", "present"] else classes
        for c in class_to_sum:
            fg = (labels == c).float()  # foreground for class c
            if classes == "present" and fg.sum() == 0:
                continue
            class_pred = probas[:, 0] if C == 1 else probas[:, c]
            errors = (Variable(fg) - class_pred).abs()
            errors_sorted, perm = lib.sort(errors, 0, descending=True)
            perm = perm.data
            fg_sorted = fg[perm]
            losses.append(lib.dot(errors_sorted, Variable(lovasz_grad(fg_sorted))))
        return mean(losses)

    return lovasz_softmax_flat(*flatten_probas(probas, labels, ignore), classes=classes)


def _pspnet(lib, classes=3, channels=8, bins=(1, 2, 3, 6), reduction=2):
    """hszhao/semseg's PSPNet head: the pyramid pooling module's ``AdaptiveAvgPool2d`` bins
    (1, 2, 3, 6) over a feature map whose sides they do not divide, each bin upsampled by
    ``F.interpolate(mode='bilinear', align_corners=True)`` and concatenated, an auxiliary head
    on an earlier stage weighted 0.4, cross entropy with ``ignore_index=255`` plus the Lovasz-
    softmax loss, and the poly learning-rate policy written into each param group (the head's
    at ten times the backbone's)."""
    nn, F = lib.nn, lib.nn.functional

    class PPM(nn.Module):
        def __init__(self, in_dim, reduction_dim, bins):
            super().__init__()
            self.features = nn.ModuleList(
                [
                    nn.Sequential(
                        nn.AdaptiveAvgPool2d(bin),
                        nn.Conv2d(in_dim, reduction_dim, kernel_size=1, bias=False),
                        nn.BatchNorm2d(reduction_dim),
                        nn.ReLU(inplace=True),
                    )
                    for bin in bins
                ]
            )

        def forward(self, x):
            x_size = x.size()
            out = [x]
            for f in self.features:
                out.append(F.interpolate(f(x), x_size[2:], mode="bilinear", align_corners=True))
            return lib.cat(out, 1)

    class PSPNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer0 = nn.Sequential(
                nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
            )  # fmt: skip
            self.layer1 = nn.Sequential(
                nn.Conv2d(channels, channels, 3, padding=2, dilation=2, bias=False),
                nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
            )  # fmt: skip
            self.ppm = PPM(channels, channels // reduction, bins)
            fea_dim = channels + len(bins) * (channels // reduction)
            self.cls = nn.Sequential(
                nn.Conv2d(fea_dim, channels, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(channels), nn.ReLU(inplace=True), nn.Dropout2d(p=0.0),
                nn.Conv2d(channels, classes, kernel_size=1),
            )  # fmt: skip
            self.aux = nn.Sequential(
                nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
                nn.Conv2d(channels, classes, kernel_size=1),
            )  # fmt: skip
            self.criterion = nn.CrossEntropyLoss(ignore_index=255)

        def forward(self, x, y):
            x_size = x.size()
            h, w = x_size[2], x_size[3]
            x = self.layer0(x)
            x_tmp = self.layer1(x)
            x = self.cls(self.ppm(x_tmp))
            x = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=True)
            aux = self.aux(x_tmp)
            aux = F.interpolate(aux, size=(h, w), mode="bilinear", align_corners=True)
            main_loss = self.criterion(x, y)
            aux_loss = self.criterion(aux, y)
            lovasz = _lovasz_softmax(lib, F.softmax(x, dim=1), y)
            return x.max(1)[1], main_loss, aux_loss, lovasz

    model = PSPNet()
    base_lr = 1e-2
    modules_ori = [model.layer0, model.layer1]
    modules_new = [model.ppm, model.cls, model.aux]
    params_list = [dict(params=m.parameters(), lr=base_lr) for m in modules_ori]
    params_list += [dict(params=m.parameters(), lr=base_lr * 10) for m in modules_new]
    optimizer = lib.optim.SGD(params_list, lr=base_lr, momentum=0.9, weight_decay=1e-4)
    return model, optimizer


def _pspnet_step(lib, model, optimizer, input, target, current_iter, max_iter=10, power=0.9):
    """semseg's ``train``: the poly rate, written into the param groups before the step."""
    output, main_loss, aux_loss, lovasz = model(input, target)
    loss = main_loss + 0.4 * aux_loss + lovasz
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    current_lr = 1e-2 * (1 - float(current_iter) / max_iter) ** power
    for index in range(0, 2):
        optimizer.param_groups[index]["lr"] = current_lr
    for index in range(2, len(optimizer.param_groups)):
        optimizer.param_groups[index]["lr"] = current_lr * 10
    intersection = ((output == target) & (target != 255)).sum()
    return loss, main_loss, aux_loss, lovasz, output, intersection


def _psp_batches(rng):
    # 10x10 images: a 5x5 feature map, which the 2, 3 and 6 bins do not divide
    batches = _segmentation_batches(rng, sizes=(2, 3), side=10)
    return [(*batch, index + 1) for index, batch in enumerate(batches)]


def test_pspnet_pyramid_pooling_with_lovasz_softmax_and_poly_lr_trains_like_torch():
    # the poly rate written into the param groups changes each step: its first change recompiles
    _check(Program(_pspnet, _pspnet_step, _psp_batches, modes=ALL_MODES, rtol=2e-4, recompiles=1))


# ------------------------------------------------------------------------------ AdaIN


def _adain(lib, channels=(3, 4, 6, 8)):
    """naoto0804/pytorch-AdaIN: a frozen encoder cut into ``enc_1``..``enc_3`` from
    ``list(encoder.children())`` (its parameters' ``requires_grad`` set off by name), each
    stage's features kept for the style loss, ``calc_mean_std`` by ``feat.view(N, C, -1).var(dim=2)
    + eps`` and ``.sqrt().view(N, C, 1, 1)``, ``adaptive_instance_normalization`` by
    ``expand(size)``, a decoder of ``ReflectionPad2d`` convolutions and ``nn.Upsample(
    scale_factor=2, mode='nearest')``, ``nn.MSELoss`` content and style terms, and
    ``adjust_learning_rate``'s inverse decay written into the param groups."""
    nn = lib.nn
    c0, c1, c2, c3 = channels

    def calc_mean_std(feat, eps=1e-5):
        size = feat.size()
        assert len(size) == 4
        N, C = size[:2]
        feat_var = feat.view(N, C, -1).var(dim=2) + eps
        feat_std = feat_var.sqrt().view(N, C, 1, 1)
        feat_mean = feat.view(N, C, -1).mean(dim=2).view(N, C, 1, 1)
        return feat_mean, feat_std

    def adaptive_instance_normalization(content_feat, style_feat):
        assert content_feat.size()[:2] == style_feat.size()[:2]
        size = content_feat.size()
        style_mean, style_std = calc_mean_std(style_feat)
        content_mean, content_std = calc_mean_std(content_feat)
        normalized_feat = (content_feat - content_mean.expand(size)) / content_std.expand(size)
        return normalized_feat * style_std.expand(size) + style_mean.expand(size)

    encoder = nn.Sequential(
        nn.Conv2d(c0, c0, (1, 1)),
        nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(c0, c1, (3, 3)), nn.ReLU(),  # relu1-1
        nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(c1, c1, (3, 3)), nn.ReLU(),
        nn.MaxPool2d((2, 2), (2, 2), (0, 0), ceil_mode=True),
        nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(c1, c2, (3, 3)), nn.ReLU(),  # relu2-1
        nn.MaxPool2d((2, 2), (2, 2), (0, 0), ceil_mode=True),
        nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(c2, c3, (3, 3)), nn.ReLU(),  # relu3-1
    )  # fmt: skip
    decoder = nn.Sequential(
        nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(c3, c2, (3, 3)), nn.ReLU(),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(c2, c1, (3, 3)), nn.ReLU(),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(c1, c1, (3, 3)), nn.ReLU(),
        nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(c1, c0, (3, 3)),
    )  # fmt: skip

    class Net(nn.Module):
        def __init__(self, encoder, decoder):
            super().__init__()
            enc_layers = list(encoder.children())
            self.enc_1 = nn.Sequential(*enc_layers[:4])  # input -> relu1_1
            self.enc_2 = nn.Sequential(*enc_layers[4:11])  # relu1_1 -> relu2_1
            self.enc_3 = nn.Sequential(*enc_layers[11:])  # relu2_1 -> relu3_1
            self.decoder = decoder
            self.mse_loss = nn.MSELoss()
            for name in ["enc_1", "enc_2", "enc_3"]:
                for param in getattr(self, name).parameters():
                    param.requires_grad = False

        def encode_with_intermediate(self, input):
            results = [input]
            for i in range(3):
                func = getattr(self, f"enc_{i + 1:d}")
                results.append(func(results[-1]))
            return results[1:]

        def encode(self, input):
            for i in range(3):
                input = getattr(self, f"enc_{i + 1:d}")(input)
            return input

        def calc_content_loss(self, input, target):
            assert input.size() == target.size()
            assert target.requires_grad is False
            return self.mse_loss(input, target)

        def calc_style_loss(self, input, target):
            assert input.size() == target.size()
            assert target.requires_grad is False
            input_mean, input_std = calc_mean_std(input)
            target_mean, target_std = calc_mean_std(target)
            return self.mse_loss(input_mean, target_mean) + self.mse_loss(input_std, target_std)

        def forward(self, content, style, alpha=1.0):
            assert 0 <= alpha <= 1
            style_feats = self.encode_with_intermediate(style)
            content_feat = self.encode(content)
            t = adaptive_instance_normalization(content_feat, style_feats[-1])
            t = alpha * t + (1 - alpha) * content_feat
            g_t = self.decoder(t)
            g_t_feats = self.encode_with_intermediate(g_t)
            loss_c = self.calc_content_loss(g_t_feats[-1], t)
            loss_s = self.calc_style_loss(g_t_feats[0], style_feats[0])
            for i in range(1, 3):
                loss_s += self.calc_style_loss(g_t_feats[i], style_feats[i])
            return loss_c, loss_s

    network = Net(encoder, decoder)
    network.train()
    return network, lib.optim.Adam(network.decoder.parameters(), lr=1e-3)


def _adain_step(lib, network, optimizer, content_images, style_images, i, lr=1e-3,
                lr_decay=5e-1, content_weight=1.0, style_weight=10.0):  # fmt: skip
    """train.py's loop body."""
    lr = lr / (1.0 + lr_decay * i)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    loss_c, loss_s = network(content_images, style_images)
    loss_c = content_weight * loss_c
    loss_s = style_weight * loss_s
    loss = loss_c + loss_s
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss, loss_c.item(), loss_s.item()


def _content_and_style(rng, sizes=(2, 3), side=12):
    return [
        (
            rng.uniform(0, 1, (n, 3, side, side)).astype(np.float32),
            rng.uniform(0, 1, (n, 3, side, side)).astype(np.float32),
            index,
        )
        for index, n in enumerate(sizes)
    ]


def test_adain_style_transfer_with_frozen_encoder_slices_trains_like_torch():
    # the learning rate written each step and the iteration count: two recompiles, as in PyTorch
    _check(
        Program(_adain, _adain_step, _content_and_style, modes=ALL_MODES, rtol=2e-4, recompiles=2)
    )


# ------------------------------------------------------------------------------ Performer


def _performer(lib, vocab=13, dim=8, heads=2, nb_features=6, max_len=16):
    """lucidrains/performer-pytorch's FAVOR+: ``gaussian_orthogonal_random_matrix`` from
    ``torch.linalg.qr(unstructured_block.cpu(), mode='reduced')`` blocks (``q.t()``) scaled by
    the norms of a Gaussian ``multiplier``, redrawn into the ``projection_matrix`` buffer by
    ``copy_`` inside the forward (``feature_redraw_interval``; the Gaussian draws come in with
    the batch), ``softmax_kernel``'s ``einsum('...id,...jd->...ij')`` features with the
    ``amax(..., keepdim=True).detach()`` stabiliser, and causal linear attention by ``cumsum``
    of key-value outer products, in a causal LM with tied input and output embeddings."""
    nn = lib.nn

    def orthogonal_matrix_chunk(unstructured_block):
        q, r = lib.linalg.qr(unstructured_block.cpu(), mode="reduced")
        return q.t()

    def gaussian_orthogonal_random_matrix(blocks, multiplier):
        nb_rows, nb_columns = multiplier.shape[0], blocks[0].shape[0]
        nb_full_blocks = int(nb_rows / nb_columns)
        block_list = [orthogonal_matrix_chunk(blocks[i]) for i in range(nb_full_blocks)]
        remaining_rows = nb_rows - nb_full_blocks * nb_columns
        if remaining_rows > 0:
            q = orthogonal_matrix_chunk(blocks[nb_full_blocks])
            block_list.append(q[:remaining_rows])
        final_matrix = lib.cat(block_list)
        multiplier = multiplier.norm(dim=1)
        return lib.diag(multiplier) @ final_matrix

    def softmax_kernel(data, *, projection_matrix, is_query, normalize_data=True, eps=1e-4):
        b, h, *_ = data.shape
        data_normalizer = (data.shape[-1] ** -0.25) if normalize_data else 1.0
        ratio = projection_matrix.shape[0] ** -0.5
        projection = projection_matrix.unsqueeze(0).unsqueeze(0).expand(b, h, -1, -1)
        projection = projection.type_as(data)
        data_dash = lib.einsum("...id,...jd->...ij", (data_normalizer * data), projection)
        diag_data = data**2
        diag_data = lib.sum(diag_data, dim=-1)
        diag_data = (diag_data / 2.0) * (data_normalizer**2)
        diag_data = diag_data.unsqueeze(dim=-1)
        if is_query:
            data_dash = ratio * (
                lib.exp(data_dash - diag_data - lib.amax(data_dash, dim=-1, keepdim=True).detach())
                + eps
            )
        else:
            data_dash = ratio * (
                lib.exp(data_dash - diag_data - lib.amax(data_dash, dim=(-1, -2),
                                                         keepdim=True).detach()) + eps
            )  # fmt: skip
        return data_dash.type_as(data)

    def causal_linear_attention_noncuda(q, k, v, eps=1e-6):
        k_cumsum = k.cumsum(dim=-2)
        D_inv = 1.0 / lib.einsum("...nd,...nd->...n", q, k_cumsum.type_as(q) + eps)
        context = lib.einsum("...nd,...ne->...nde", k, v)
        context = context.cumsum(dim=-3)
        return lib.einsum("...nde,...nd,...n->...ne", context, q, D_inv)

    class FastAttention(nn.Module):
        def __init__(self, dim_heads, nb_features):
            super().__init__()
            self.dim_heads, self.nb_features = dim_heads, nb_features
            self.register_buffer("projection_matrix", lib.zeros(nb_features, dim_heads))

        @lib.no_grad()
        def redraw_projection_matrix(self, blocks, multiplier):
            projections = gaussian_orthogonal_random_matrix(blocks, multiplier)
            self.projection_matrix.copy_(projections)
            del projections

        def forward(self, q, k, v):
            create_kernel = softmax_kernel
            q = create_kernel(q, is_query=True, projection_matrix=self.projection_matrix)
            k = create_kernel(k, is_query=False, projection_matrix=self.projection_matrix)
            return causal_linear_attention_noncuda(q, k, v)

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = heads
            self.fast_attention = FastAttention(dim // heads, nb_features)
            self.to_q = nn.Linear(dim, dim, bias=False)
            self.to_k = nn.Linear(dim, dim, bias=False)
            self.to_v = nn.Linear(dim, dim, bias=False)
            self.to_out = nn.Linear(dim, dim)

        def forward(self, x):
            b, n, _, h = *x.shape, self.heads
            q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
            q, k, v = (t.reshape(b, n, h, -1).permute(0, 2, 1, 3) for t in (q, k, v))
            out = self.fast_attention(q, k, v)
            out = out.permute(0, 2, 1, 3).reshape(b, n, -1)
            return self.to_out(out)

    class PerformerLM(nn.Module):
        def __init__(self, feature_redraw_interval=2):
            super().__init__()
            self.token_emb = nn.Embedding(vocab, dim)
            self.pos_emb = nn.Embedding(max_len, dim)
            nn.init.normal_(self.token_emb.weight, std=0.02)
            nn.init.normal_(self.pos_emb.weight, std=0.02)
            self.norm1 = nn.LayerNorm(dim)
            self.attn = SelfAttention()
            self.norm2 = nn.LayerNorm(dim)
            self.ff = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))
            self.norm = nn.LayerNorm(dim)
            self.feature_redraw_interval = feature_redraw_interval
            self.register_buffer("calls_since_last_redraw", lib.tensor(0))

        def check_redraw_projections(self, blocks, multiplier):
            if not self.training:
                return
            if self.calls_since_last_redraw >= self.feature_redraw_interval or (
                self.calls_since_last_redraw == 0
            ):
                fast_attentions = [m for m in self.modules() if isinstance(m, FastAttention)]
                for fast_attention in fast_attentions:
                    fast_attention.redraw_projection_matrix(blocks, multiplier)
                self.calls_since_last_redraw.zero_()
            self.calls_since_last_redraw += 1

        def forward(self, x, blocks, multiplier):
            b, n = x.shape
            self.check_redraw_projections(blocks, multiplier)
            h = self.token_emb(x) + self.pos_emb(lib.arange(n))
            h = h + self.attn(self.norm1(h))
            h = h + self.ff(self.norm2(h))
            h = self.norm(h)
            return h @ self.token_emb.weight.t()

    model = PerformerLM()
    return model, lib.optim.Adam(model.parameters(), lr=1e-3)


def _performer_step(lib, model, opt, ids, blocks, multiplier):
    """AutoregressiveWrapper's loss: inputs and targets shifted by one."""
    xi, xo = ids[:, :-1], ids[:, 1:]
    logits = model(xi, blocks, multiplier)
    loss = lib.nn.functional.cross_entropy(logits.transpose(1, 2), xo)
    opt.zero_grad()
    loss.backward()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    return loss, logits


def _performer_batches(rng, sizes=(3, 5), length=7, vocab=13, dim_heads=4, nb_features=6):
    blocks_needed = -(-nb_features // dim_heads)
    return [
        (
            rng.integers(0, vocab, (n, length)),
            rng.standard_normal((blocks_needed, dim_heads, dim_heads), dtype=np.float32),
            rng.standard_normal((nb_features, dim_heads), dtype=np.float32),
        )
        for n in sizes
    ]


def test_performer_favor_features_redrawn_by_qr_and_causal_linear_attention_train_like_torch():
    _check(Program(_performer, _performer_step, _performer_batches, modes=ALL_MODES, rtol=2e-4))
