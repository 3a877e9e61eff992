"""NLP programs in the style of popular repositories, written once for both libraries and
trained under ``kiln.compile`` against PyTorch (probe round 8's most telling programs).

Each program runs a few optimizer steps from the same weights; losses and gradients are
compared at every step and the weights at the end. Key-projection biases are left out of the
weight comparison: softmax ignores them, so their gradients are rounding noise that Adam would
blow up to full steps in either library.
"""

from __future__ import annotations

import math

import numpy as np

import kiln
from tests.models.models import copy_weights
from tests.oracle import needs_torch, torch


def _seq2seq(lib):
    """A bidirectional GRU encoder over packed padded sources, Bahdanau attention masked at the
    padding, a GRU decoder filling an ``outputs`` buffer made before the encoder step by step
    (the pack/unpack calls break the graph between the buffer's creation and its writes)."""
    nn, F = lib.nn, lib.nn.functional
    rnn = nn.utils.rnn

    class Seq2Seq(nn.Module):
        def __init__(self, src_vocab=20, tgt_vocab=15, emb=8, hid=12):
            super().__init__()
            self.src_embedding = nn.Embedding(src_vocab, emb, padding_idx=0)
            self.encoder = nn.GRU(emb, hid, bidirectional=True)
            self.bridge = nn.Linear(2 * hid, hid)
            self.attn = nn.Linear(3 * hid, hid)
            self.v = nn.Linear(hid, 1, bias=False)
            self.tgt_embedding = nn.Embedding(tgt_vocab, emb)
            self.decoder = nn.GRU(2 * hid + emb, hid)
            self.out = nn.Linear(3 * hid + emb, tgt_vocab)

        def forward(self, src, src_len, trg, teacher):
            outputs = lib.zeros(trg.shape[0], trg.shape[1], self.out.out_features)
            packed = rnn.pack_padded_sequence(
                self.src_embedding(src), src_len, enforce_sorted=False
            )
            packed, hidden = self.encoder(packed)
            enc, _ = rnn.pad_packed_sequence(packed, total_length=src.shape[0])
            hidden = lib.tanh(self.bridge(lib.cat((hidden[-2], hidden[-1]), dim=1)))
            pad = (src == 0).t()
            inp = trg[0]
            for t in range(1, trg.shape[0]):
                query = hidden.unsqueeze(1).expand(-1, enc.shape[0], -1)
                energy = lib.tanh(self.attn(lib.cat((query, enc.transpose(0, 1)), dim=2)))
                scores = self.v(energy).squeeze(2).masked_fill(pad, -1e10)
                context = lib.bmm(F.softmax(scores, dim=1).unsqueeze(1), enc.transpose(0, 1))
                embedded = self.tgt_embedding(inp).unsqueeze(0)
                step_in = lib.cat((embedded, context.transpose(0, 1)), dim=2)
                output, hidden = self.decoder(step_in, hidden.unsqueeze(0))
                hidden = hidden.squeeze(0)
                features = (output.squeeze(0), context.squeeze(1), embedded.squeeze(0))
                outputs[t] = self.out(lib.cat(features, dim=1))
                inp = trg[t] if teacher[t] else outputs[t].argmax(1)
            return outputs

    return Seq2Seq()


def _llama(lib):
    """Grouped-query attention through ``F.scaled_dot_product_attention`` with an additive
    ``finfo.min`` causal+padding mask, rotary embeddings as cos/sin of a buffer, RMSNorm in
    float32, SwiGLU, tied embeddings, and a KV cache of concatenated past keys."""
    nn, F = lib.nn, lib.nn.functional
    hidden, heads, kv_heads, vocab = 32, 4, 2, 40
    head_dim = hidden // heads

    def rotate_half(x):
        half = x.shape[-1] // 2
        return lib.cat((-x[..., half:], x[..., :half]), dim=-1)

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(lib.ones(hidden))

        def forward(self, x):
            h = x.to(lib.float32)
            h = h * lib.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return self.weight * h.to(x.dtype)

    class Layer(nn.Module):
        def __init__(self, index):
            super().__init__()
            self.index = index
            self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
            self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.o_proj = nn.Linear(hidden, hidden, bias=False)
            self.gate = nn.Linear(hidden, 56, bias=False)
            self.up = nn.Linear(hidden, 56, bias=False)
            self.down = nn.Linear(56, hidden, bias=False)
            self.norm1, self.norm2 = RMSNorm(), RMSNorm()

        def attention(self, x, cos, sin, mask, past):
            b, t, _ = x.shape
            q = self.q_proj(x).view(b, t, heads, head_dim).transpose(1, 2)
            k = self.k_proj(x).view(b, t, kv_heads, head_dim).transpose(1, 2)
            v = self.v_proj(x).view(b, t, kv_heads, head_dim).transpose(1, 2)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            if past is not None:
                if len(past) > self.index:
                    k = lib.cat([past[self.index][0], k], dim=-2)
                    v = lib.cat([past[self.index][1], v], dim=-2)
                    past[self.index] = (k, v)
                else:
                    past.append((k, v))
            k = lib.repeat_interleave(k, heads // kv_heads, dim=1)
            v = lib.repeat_interleave(v, heads // kv_heads, dim=1)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return self.o_proj(out.transpose(1, 2).reshape(b, t, hidden))

        def forward(self, x, cos, sin, mask, past):
            x = x + self.attention(self.norm1(x), cos, sin, mask, past)
            h = self.norm2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList(Layer(i) for i in range(2))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            self.lm_head.weight = self.embed.weight
            inv_freq = 1.0 / (10000 ** (lib.arange(0, head_dim, 2).float() / head_dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        def forward(self, ids, attention_mask, past=None, labels=None):
            b, t = ids.shape
            start = past[0][0].shape[-2] if past else 0
            total = start + t
            positions = lib.arange(start, total).float()
            freqs = lib.outer(positions, self.inv_freq)
            emb = lib.cat((freqs, freqs), dim=-1)[None]
            x = self.embed(ids)
            low = lib.finfo(x.dtype).min
            mask = lib.triu(lib.full((t, total), low), diagonal=start + 1)[None, None]
            mask = mask.expand(b, 1, t, total).clone()
            padded = (mask + attention_mask[:, None, None, :].to(x.dtype)) == 0
            mask = mask.masked_fill(padded, low)
            for layer in self.layers:
                x = layer(x, emb.cos(), emb.sin(), mask, past)
            logits = self.lm_head(self.norm(x))
            if labels is None:
                return logits
            shifted = logits[:, :-1].reshape(-1, vocab)
            return F.cross_entropy(shifted, labels[:, 1:].reshape(-1)), logits

    return Llama()


def _bert(lib):
    """Token-type and position embeddings (position ids from a buffer), an extended additive
    mask of ``finfo.min``, GELU, post-LayerNorm, a tanh pooler and a classification head; the
    forward returns a dict with the tuple of hidden states built from ``()``."""
    nn, F = lib.nn, lib.nn.functional
    hidden, heads = 32, 4

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
            self.attention_out = nn.Linear(hidden, hidden)
            self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.intermediate = nn.Linear(hidden, 4 * hidden)
            self.output = nn.Linear(4 * hidden, hidden)
            self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

        def heads(self, x):
            return x.view(x.size()[:-1] + (heads, hidden // heads)).permute(0, 2, 1, 3)

        def forward(self, x, mask):
            q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
            scores = q @ k.transpose(-1, -2) / math.sqrt(hidden // heads) + mask
            context = (F.softmax(scores, dim=-1) @ v).permute(0, 2, 1, 3).contiguous()
            context = context.view(context.size()[:-2] + (hidden,))
            x = self.attention_norm(self.attention_out(context) + x)
            return self.output_norm(self.output(F.gelu(self.intermediate(x))) + x)

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(30, hidden, padding_idx=0)
            self.position = nn.Embedding(16, hidden)
            self.token_type = nn.Embedding(2, hidden)
            self.embedding_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.register_buffer("position_ids", lib.arange(16).expand((1, -1)), persistent=False)
            self.layers = nn.ModuleList(Layer() for _ in range(2))
            self.pooler = nn.Linear(hidden, hidden)
            self.classifier = nn.Linear(hidden, 3)

        def forward(self, ids, attention_mask, token_type_ids, labels):
            positions = self.position_ids[:, : ids.size(1)]
            x = self.word(ids) + self.token_type(token_type_ids) + self.position(positions)
            x = self.embedding_norm(x)
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * lib.finfo(x.dtype).min
            hidden_states = ()
            for layer in self.layers:
                hidden_states = hidden_states + (x,)
                x = layer(x, mask)
            logits = self.classifier(lib.tanh(self.pooler(x[:, 0])))
            loss = nn.CrossEntropyLoss()(logits.view(-1, 3), labels.view(-1))
            return {"loss": loss, "logits": logits, "hidden_states": hidden_states}

    return Bert()


def _assert_close(ours, theirs, what, rtol=1e-4, atol=1e-5) -> None:
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol, atol, what)


def _assert_gradients_match(ours, theirs, step) -> None:
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        _assert_close(p.grad, q.grad, f"step {step}: {name}.grad", 1e-3, 1e-5)


def _assert_weights_match(ours, theirs) -> None:
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        if not name.endswith("key.bias"):
            _assert_close(p, q, name, 1e-3, 1e-5)


@needs_torch
def test_seq2seq_with_packed_encoder_and_attention_decoder_trains_like_torch():
    torch.manual_seed(0)
    theirs, ours = _seq2seq(torch), _seq2seq(kiln)
    copy_weights(kiln, ours, theirs)
    optimizers = [
        lib.optim.Adam(m.parameters(), lr=5e-3) for lib, m in ((torch, theirs), (kiln, ours))
    ]

    def step(lib, model, src, src_len, trg, teacher):
        outputs = model(src, src_len, trg, teacher)
        vocab = outputs.shape[-1]
        loss = lib.nn.functional.cross_entropy(
            outputs[1:].view(-1, vocab), trg[1:].reshape(-1), ignore_index=0
        )
        loss.backward()
        return loss

    compiled = kiln.compile(step)
    rng = np.random.default_rng(0)
    lengths = np.array([6, 3, 5])
    teacher = [True, True, False, True]
    for i in range(2):
        src = rng.integers(1, 20, (6, 3)) * (np.arange(6)[:, None] < lengths)
        trg = rng.integers(1, 15, (4, 3))
        losses = []
        for lib, model, opt, run in zip(
            (torch, kiln), (theirs, ours), optimizers, (step, compiled)
        ):
            opt.zero_grad()
            losses.append(
                run(lib, model, lib.tensor(src), lib.tensor(lengths), lib.tensor(trg), teacher)
            )
            lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        assert losses[1].grad_fn is not None
        _assert_close(losses[1], losses[0], f"step {i}: loss")
        _assert_gradients_match(ours, theirs, i)
        for opt in optimizers:
            opt.step()
    _assert_weights_match(ours, theirs)


@needs_torch
def test_llama_with_gqa_sdpa_and_padding_mask_trains_and_decodes_like_torch_under_dynamic():
    torch.manual_seed(0)
    theirs, ours = _llama(torch), _llama(kiln)
    copy_weights(kiln, ours, theirs)
    optimizers = [
        lib.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.1)
        for lib, m in ((torch, theirs), (kiln, ours))
    ]
    schedulers = [
        lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=5e-3, total_steps=5)
        for lib, opt in zip((torch, kiln), optimizers)
    ]

    def step(model, ids, mask, labels):
        loss, _ = model(ids, mask, labels=labels)
        loss.backward()
        return loss

    compiled = kiln.compile(step, dynamic=True)
    rng = np.random.default_rng(1)
    for i, length in enumerate((9, 7)):
        ids = rng.integers(0, 40, (2, length))
        mask = np.ones_like(ids)
        mask[1, -3:] = 0  # right padding: every query row keeps a key
        labels = np.where(mask == 1, ids, -100)
        losses = []
        for lib, model, opt, run in zip(
            (torch, kiln), (theirs, ours), optimizers, (step, compiled)
        ):
            opt.zero_grad()
            losses.append(run(model, lib.tensor(ids), lib.tensor(mask), lib.tensor(labels)))
        _assert_close(losses[1], losses[0], f"step {i}: loss")
        _assert_gradients_match(ours, theirs, i)
        for opt, scheduler in zip(optimizers, schedulers):
            opt.step()
            scheduler.step()
        assert schedulers[1].get_last_lr() == schedulers[0].get_last_lr()
    prompt = rng.integers(0, 40, (2, 4))
    decoded = []
    for lib, model in ((torch, theirs), (kiln, ours)):
        model.eval()
        forward = kiln.compile(model) if lib is kiln else model
        ids, mask, past, steps = lib.tensor(prompt), lib.ones(2, 4, dtype=lib.long), [], []
        with lib.no_grad():
            logits = forward(ids, mask, past)
            for _ in range(3):
                token = logits[:, -1:].argmax(-1)
                mask = lib.cat([mask, mask.new_ones((2, 1))], dim=-1)
                logits = forward(token, mask, past)
                steps.append(logits)
        decoded.append(steps)
    for t, (ours_step, their_step) in enumerate(zip(decoded[1], decoded[0])):
        _assert_close(ours_step, their_step, f"decoding step {t}")


@needs_torch
def test_bert_classifier_with_decay_groups_and_warmup_trains_like_torch():
    torch.manual_seed(0)
    theirs, ours = _bert(torch), _bert(kiln)
    copy_weights(kiln, ours, theirs)

    def optimizer(lib, model):
        no_decay = ("bias", "norm.weight")
        decay = [p for n, p in model.named_parameters() if not n.endswith(no_decay)]
        rest = [p for n, p in model.named_parameters() if n.endswith(no_decay)]
        groups = [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}]
        opt = lib.optim.AdamW(groups, lr=1e-3)
        warmup = lib.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 2))
        return opt, warmup

    pairs = [optimizer(torch, theirs), optimizer(kiln, ours)]

    def step(model, ids, mask, types, labels):
        out = model(ids, mask, types, labels)
        out["loss"].backward()
        return out["loss"], out["logits"], len(out["hidden_states"])

    compiled = kiln.compile(step)
    rng = np.random.default_rng(2)
    for i in range(3):
        lengths = rng.integers(3, 9, (3,))
        mask = (np.arange(8)[None] < lengths[:, None]).astype(np.int64)
        ids = rng.integers(1, 30, (3, 8)) * mask
        types = (np.arange(8)[None] >= lengths[:, None] // 2).astype(np.int64)
        labels = rng.integers(0, 3, (3,))
        results = []
        for lib, model, (opt, _), run in zip(
            (torch, kiln), (theirs, ours), pairs, (step, compiled)
        ):
            opt.zero_grad()
            inputs = [lib.tensor(a) for a in (ids, mask, types, labels)]
            results.append(run(model, *inputs))
            lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        (their_loss, their_logits, their_count), (loss, logits, count) = results
        assert count == their_count == 2
        _assert_close(loss, their_loss, f"step {i}: loss")
        _assert_close(logits, their_logits, f"step {i}: logits")
        _assert_gradients_match(ours, theirs, i)
        for opt, warmup in pairs:
            opt.step()
            warmup.step()
    _assert_weights_match(ours, theirs)
    ids = rng.integers(1, 30, (2, 5))
    ones, zeros = np.ones_like(ids), np.zeros_like(ids)
    theirs.eval(), ours.eval()
    with torch.inference_mode():
        expected = theirs(*[torch.tensor(a) for a in (ids, ones, zeros, ids[:, 0] % 3)])
    with kiln.inference_mode():
        got = kiln.compile(ours)(*[kiln.tensor(a) for a in (ids, ones, zeros, ids[:, 0] % 3)])
    _assert_close(got["logits"], expected["logits"], "eval logits")
