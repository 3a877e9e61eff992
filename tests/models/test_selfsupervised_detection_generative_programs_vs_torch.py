"""Masked-autoencoder, self-distillation, clustering, semi-supervised, detection, generative,
hash-grid and value-learning programs in the style of their reference repositories (MAE, DINO,
SwAV, FixMatch, YOLOv5's CIoU, DETR's Hungarian matching, CenterNet, StyleGAN2's modulated
convolutions, instant-NGP's hash encoding, EfficientNet, ShuffleNetV2 and DenseNet, MLP-Mixer
and gMLP, the PyTorch DQN tutorial), written once for both libraries and run eagerly, under
``kiln.compile`` and under ``kiln.compile(dynamic=True)`` against PyTorch (probe round 16,
first part).

The harness is ``test_hf_vision_sequence_programs_vs_torch``'s: kiln's model starts from
PyTorch's weights, and every step's outputs, parameters, gradients and buffers are compared.
Each program runs two batches of different sizes (the second is where ``dynamic=True`` must not
recompile, and where plain ``kiln.compile`` turns the changed sizes dynamic), on models cut to
what their features need, to keep the file fast. All of these match PyTorch. What the round
found here: batch norm's derivative in ops (compiled and double backward) raised TypeError after
a helper's signature changed, so YOLO's compiled graphs ran on the eager backend, and once it
ran, its ``1.0 / n`` made a Python float of the symbolic count, so every training step with
batch norm recompiled per batch size under ``dynamic=True`` (DINO, SwAV, FixMatch; both fixed);
DINO's ``chunk(ncrops)`` of a symbolic batch compared with another symbolic size leaves
``ceil(s/4) == 1`` undecided, so its loss graph gets kernels per size and new sizes run with the
eager ops; a loss module holding a tensor (``BCEWithLogitsLoss(pos_weight=...)``) built inside a
compiled step breaks the graph and its identity guard recompiles the rest on every call (YOLO
builds them once, as here); ``t[range(n), cls]`` specialises ``n`` (as PyTorch's does).
"""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np

from tests.models.test_hf_vision_sequence_programs_vs_torch import ALL_MODES, Program, _check
from tests.oracle import needs_torch

pytestmark = needs_torch


# ------------------------------------------------------------------------------ MAE


def _mae(lib, patch=2, dim=8, side=8):
    """MAE's random masking: ``argsort`` of per-sample noise twice (shuffle and restore), the
    kept patches by ``gather`` with a repeated index, the binary mask unshuffled by ``gather``,
    mask tokens appended and unshuffled, and the normalised-pixel loss on masked patches."""
    nn = lib.nn
    patches = (side // patch) ** 2

    class MaskedAutoencoder(nn.Module):
        def __init__(self, mask_ratio=0.75):
            super().__init__()
            self.mask_ratio = mask_ratio
            self.patch_embed = nn.Linear(patch * patch, dim)
            self.cls_token = nn.Parameter(lib.zeros(1, 1, dim))
            self.pos_embed = nn.Parameter(lib.randn(1, patches + 1, dim) * 0.02)
            # the encoder's blocks, cut to one pre-norm MLP block: the masking is what is tested
            self.blocks = nn.Sequential(
                nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)
            )
            self.norm = nn.LayerNorm(dim)
            self.decoder_embed = nn.Linear(dim, dim)
            self.mask_token = nn.Parameter(lib.zeros(1, 1, dim))
            self.decoder_pos_embed = nn.Parameter(lib.randn(1, patches + 1, dim) * 0.02)
            self.decoder_pred = nn.Linear(dim, patch * patch)
            nn.init.normal_(self.cls_token, std=0.02)
            nn.init.normal_(self.mask_token, std=0.02)

        def patchify(self, imgs):
            p = patch
            h = w = imgs.shape[2] // p
            x = imgs.reshape(shape=(imgs.shape[0], 1, h, p, w, p))
            x = lib.einsum("nchpwq->nhwpqc", x)
            return x.reshape(shape=(imgs.shape[0], h * w, p**2))

        def random_masking(self, x, noise):
            N, L, D = x.shape
            len_keep = int(L * (1 - self.mask_ratio))
            ids_shuffle = lib.argsort(noise, dim=1)
            ids_restore = lib.argsort(ids_shuffle, dim=1)
            ids_keep = ids_shuffle[:, :len_keep]
            x_masked = lib.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, D))
            mask = lib.ones([N, L], device=x.device)
            mask[:, :len_keep] = 0
            mask = lib.gather(mask, dim=1, index=ids_restore)
            return x_masked, mask, ids_restore

        def forward(self, imgs, noise):
            x = self.patch_embed(self.patchify(imgs)) + self.pos_embed[:, 1:, :]
            x, mask, ids_restore = self.random_masking(x, noise)
            cls_token = self.cls_token + self.pos_embed[:, :1, :]
            x = lib.cat((cls_token.expand(x.shape[0], -1, -1), x), dim=1)
            x = self.norm(x + self.blocks(x))
            x = self.decoder_embed(x)
            mask_tokens = self.mask_token.repeat(
                x.shape[0], ids_restore.shape[1] + 1 - x.shape[1], 1
            )
            x_ = lib.cat([x[:, 1:, :], mask_tokens], dim=1)
            x_ = lib.gather(x_, dim=1, index=ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))
            x = lib.cat([x[:, :1, :], x_], dim=1) + self.decoder_pos_embed
            pred = self.decoder_pred(x)[:, 1:, :]
            target = self.patchify(imgs)
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.0e-6) ** 0.5
            loss = ((pred - target) ** 2).mean(dim=-1)
            return (loss * mask).sum() / mask.sum(), pred, mask

    model = MaskedAutoencoder()
    return model, lib.optim.AdamW(model.parameters(), lr=1.5e-3, betas=(0.9, 0.95))


def _reconstruction_step(lib, model, opt, imgs, noise):
    loss, pred, mask = model(imgs, noise)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, pred, mask


def _masked_images(rng):
    return [
        (
            rng.standard_normal((n, 1, 8, 8), dtype=np.float32),
            rng.uniform(size=(n, 16)).astype(np.float32),
        )
        for n in (3, 5)
    ]


def test_mae_random_masking_by_argsort_and_gather_trains_like_torch():
    _check(Program(_mae, _reconstruction_step, _masked_images, modes=ALL_MODES))


# ------------------------------------------------------------------------------ DINO


def _dino(lib, out_dim=6):
    """DINO's student and EMA teacher: a multi-crop wrapper grouping crops by resolution with
    ``unique_consecutive(return_counts=True)`` and ``cumsum``, a head whose last layer is the
    old ``weight_norm`` with its magnitude frozen, the centred and sharpened teacher loss over
    crop pairs, the centre buffer's EMA, the last layer's gradients cancelled in the first
    step, and the teacher's momentum update by ``.data`` arithmetic."""
    nn, F = lib.nn, lib.nn.functional

    class Backbone(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 6, 3, padding=1)
            self.norm = nn.BatchNorm2d(6)

        def forward(self, x):
            return F.adaptive_avg_pool2d(F.gelu(self.norm(self.conv(x))), 1).flatten(1)

    class DINOHead(nn.Module):
        def __init__(self, in_dim, bottleneck_dim=4):
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(in_dim, 8), nn.GELU(), nn.Linear(8, bottleneck_dim))
            self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))
            self.last_layer.weight_g.data.fill_(1)
            self.last_layer.weight_g.requires_grad = False

        def forward(self, x):
            x = nn.functional.normalize(self.mlp(x), dim=-1, p=2)
            return self.last_layer(x)

    class MultiCropWrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.head = Backbone(), DINOHead(6)

        def forward(self, x):
            idx_crops = lib.cumsum(
                lib.unique_consecutive(
                    lib.tensor([inp.shape[-1] for inp in x]), return_counts=True
                )[1],
                0,
            )
            start_idx, output = 0, lib.empty(0)
            for end_idx in idx_crops:
                _out = self.backbone(lib.cat(x[start_idx:end_idx]))
                output = lib.cat((output, _out))
                start_idx = end_idx
            return self.head(output)

    class DINOLoss(nn.Module):
        def __init__(self, ncrops, student_temp=0.1, teacher_temp=0.04, center_momentum=0.9):
            super().__init__()
            self.student_temp, self.teacher_temp = student_temp, teacher_temp
            self.center_momentum, self.ncrops = center_momentum, ncrops
            self.register_buffer("center", lib.zeros(1, out_dim))

        def forward(self, student_output, teacher_output):
            student_out = (student_output / self.student_temp).chunk(self.ncrops)
            teacher_out = F.softmax((teacher_output - self.center) / self.teacher_temp, dim=-1)
            teacher_out = teacher_out.detach().chunk(2)
            total_loss, n_loss_terms = 0, 0
            for iq, q in enumerate(teacher_out):
                for v in range(len(student_out)):
                    if v == iq:
                        continue
                    loss = lib.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1)
                    total_loss += loss.mean()
                    n_loss_terms += 1
            self.update_center(teacher_output)
            return total_loss / n_loss_terms

        @lib.no_grad()
        def update_center(self, teacher_output):
            batch_center = lib.sum(teacher_output, dim=0, keepdim=True) / len(teacher_output)
            self.center = self.center * self.center_momentum + batch_center * (
                1 - self.center_momentum
            )

    student, teacher = MultiCropWrapper(), MultiCropWrapper()
    teacher.load_state_dict(student.state_dict())  # deepcopy refuses the old weight_norm
    for p in teacher.parameters():
        p.requires_grad = False
    params = [p for p in student.parameters() if p.requires_grad]
    return student, teacher, DINOLoss(4), lib.optim.SGD(params, lr=0.05, momentum=0.9), [0]


def _dino_step(lib, student, teacher, dino_loss, opt, steps, global1, global2, local1, local2):
    crops = [global1, global2, local1, local2]
    teacher_output = teacher(crops[:2])
    student_output = student(crops)
    loss = dino_loss(student_output, teacher_output)
    opt.zero_grad()
    loss.backward()
    lib.nn.utils.clip_grad_norm_(student.parameters(), 3.0)
    if steps[0] < 1:
        for n, p in student.named_parameters():
            if "last_layer" in n:
                p.grad = None
    opt.step()
    with lib.no_grad():
        m = 0.9
        for param_q, param_k in zip(student.parameters(), teacher.parameters()):
            param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)
    steps[0] += 1
    return loss, teacher_output, dino_loss.center, teacher.head.mlp[0].weight


def _crops(rng):
    return [
        (
            rng.standard_normal((n, 1, 6, 6), dtype=np.float32),
            rng.standard_normal((n, 1, 6, 6), dtype=np.float32),
            rng.standard_normal((n, 1, 3, 3), dtype=np.float32),
            rng.standard_normal((n, 1, 3, 3), dtype=np.float32),
        )
        for n in (4, 5)
    ]


def test_dino_multi_crop_teacher_centering_and_momentum_update_train_like_torch():
    # the second step leaves the first step's branch (``steps[0] < 1``)
    _check(Program(_dino, _dino_step, _crops, rtol=2e-4, recompiles=1))


# ------------------------------------------------------------------------------ SwAV


def _swav(lib, prototypes=5):
    """SwAV: prototypes re-normalised through ``.data`` before the step, Sinkhorn-Knopp under
    ``no_grad`` with in-place divisions, swapped predictions over crops chosen by
    ``np.delete``, and the prototypes' gradients dropped while they are frozen."""
    nn = lib.nn

    class SwAVNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU())
            self.projection_head = nn.Linear(8, 4)
            self.prototypes = nn.Linear(4, prototypes, bias=False)

        def forward(self, inputs):
            x = self.backbone(lib.cat(inputs))
            x = nn.functional.normalize(self.projection_head(x), dim=1, p=2)
            return x, self.prototypes(x)

    model = SwAVNet()
    return model, lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), [0]


def _distributed_sinkhorn(lib, out, epsilon=0.05, iterations=3):
    with lib.no_grad():
        Q = lib.exp(out / epsilon).t()
        B, K = Q.shape[1], Q.shape[0]
        sum_Q = lib.sum(Q)
        Q /= sum_Q
        for _ in range(iterations):
            sum_of_rows = lib.sum(Q, dim=1, keepdim=True)
            Q /= sum_of_rows
            Q /= K
            Q /= lib.sum(Q, dim=0, keepdim=True)
            Q /= B
        Q *= B
        return Q.t()


def _swav_step(lib, model, opt, iteration, view1, view2, view3):
    F = lib.nn.functional
    with lib.no_grad():
        w = model.prototypes.weight.data.clone()
        w = F.normalize(w, dim=1, p=2)
        model.prototypes.weight.copy_(w)
    embedding, output = model([view1, view2, view3])
    bs, nmb_crops = view1.shape[0], 3
    loss = 0
    for crop_id in (0, 1):
        with lib.no_grad():
            out = output[bs * crop_id : bs * (crop_id + 1)].detach()
            q = _distributed_sinkhorn(lib, out)[-bs:]
        subloss = 0
        for v in np.delete(np.arange(nmb_crops), crop_id):
            x = output[bs * v : bs * (v + 1)] / 0.1
            subloss -= lib.mean(lib.sum(q * F.log_softmax(x, dim=1), dim=1))
        loss += subloss / (nmb_crops - 1)
    loss /= 2
    opt.zero_grad()
    loss.backward()
    if iteration[0] < 1:
        for name, p in model.named_parameters():
            if "prototypes" in name:
                p.grad = None
    opt.step()
    iteration[0] += 1
    return loss, embedding


def _views(rng):
    return [tuple(rng.standard_normal((n, 6), dtype=np.float32) for _ in range(3)) for n in (4, 6)]


def test_swav_sinkhorn_swapped_prediction_with_frozen_prototypes_trains_like_torch():
    _check(Program(_swav, _swav_step, _views, modes=ALL_MODES, rtol=2e-4))


# ------------------------------------------------------------------------------ FixMatch


def _fixmatch(lib, classes=3):
    """FixMatch: labelled, weak and strong batches through one ``cat``, pseudo-labels from the
    detached weak logits' ``max`` with a ``ge(threshold).float()`` mask, SGD with Nesterov and
    the repository's cosine-with-warmup ``LambdaLR``, and its ``ModelEMA`` updating a deep copy
    through ``state_dict()``."""
    nn = lib.nn

    model = nn.Sequential(
        nn.Linear(5, 12),
        nn.BatchNorm1d(12, momentum=0.001),
        nn.LeakyReLU(0.1),
        nn.Linear(12, classes),
    )
    no_decay = ["bias", "bn"]
    grouped_parameters = [
        {
            "params": [
                p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)
            ],
            "weight_decay": 5e-4,
        },
        {
            "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    opt = lib.optim.SGD(grouped_parameters, lr=0.03, momentum=0.9, nesterov=True)

    def _lr_lambda(current_step, num_warmup_steps=1, num_training_steps=8, num_cycles=7.0 / 16.0):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        no_progress = float(current_step - num_warmup_steps) / float(
            max(1, num_training_steps - num_warmup_steps)
        )
        return max(0.0, math.cos(math.pi * num_cycles * no_progress))

    scheduler = lib.optim.lr_scheduler.LambdaLR(opt, _lr_lambda, -1)

    class ModelEMA:
        def __init__(self, model, decay):
            self.ema = copy.deepcopy(model)
            self.ema.eval()
            self.decay = decay
            self.param_keys = [k for k, _ in self.ema.named_parameters()]
            self.buffer_keys = [k for k, _ in self.ema.named_buffers()]
            for p in self.ema.parameters():
                p.requires_grad_(False)

        def update(self, model):
            with lib.no_grad():
                msd = model.state_dict()
                esd = self.ema.state_dict()
                for k in self.param_keys:
                    model_v = msd[k].detach()
                    ema_v = esd[k]
                    esd[k].copy_(ema_v * self.decay + (1.0 - self.decay) * model_v)
                for k in self.buffer_keys:
                    esd[k].copy_(msd[k])

    return model, opt, scheduler, [], lambda model: ModelEMA(model, 0.9)


def _fixmatch_step(
    lib, model, opt, scheduler, emas, make_ema, inputs_x, targets_x, inputs_u_w, inputs_u_s
):
    F = lib.nn.functional
    if not emas:  # made once the model has its starting weights
        emas.append(make_ema(model))
    ema = emas[0]
    batch_size = inputs_x.shape[0]
    logits = model(lib.cat((inputs_x, inputs_u_w, inputs_u_s)))
    logits_x = logits[:batch_size]
    logits_u_w, logits_u_s = logits[batch_size:].chunk(2)
    Lx = F.cross_entropy(logits_x, targets_x, reduction="mean")
    pseudo_label = lib.softmax(logits_u_w.detach() / 1.0, dim=-1)
    max_probs, targets_u = lib.max(pseudo_label, dim=-1)
    mask = max_probs.ge(0.45).float()
    Lu = (F.cross_entropy(logits_u_s, targets_u, reduction="none") * mask).mean()
    loss = Lx + 1.0 * Lu
    loss.backward()
    opt.step()
    scheduler.step()
    ema.update(model)
    model.zero_grad()
    return loss, mask, targets_u, ema.ema(inputs_x), scheduler.get_last_lr()


def _semi_supervised_batches(rng):
    batches = []
    for n in (4, 6):
        weak = rng.standard_normal((2 * n, 5), dtype=np.float32) * 2
        batches.append(
            (
                rng.standard_normal((n, 5), dtype=np.float32),
                rng.integers(0, 3, n),
                weak,
                weak + 0.5 * rng.standard_normal(weak.shape, dtype=np.float32),
            )
        )
    return batches


def test_fixmatch_confidence_masked_pseudo_labels_and_model_ema_train_like_torch():
    # the second step: the EMA exists, and the warmup's lr of 0 has changed
    _check(Program(_fixmatch, _fixmatch_step, _semi_supervised_batches, recompiles=2))


# ------------------------------------------------------------------------------ YOLO CIoU


def _bbox_iou(lib, box1, box2, eps=1e-7):
    """YOLOv5's ``bbox_iou(xywh=True, CIoU=True)``: boxes split by ``chunk``, intersections
    clamped in place, the aspect term's ``atan`` and its weight under ``no_grad``."""
    (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
    w1_, h1_, w2_, h2_ = w1 / 2, h1 / 2, w2 / 2, h2 / 2
    b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1_, x1 + w1_, y1 - h1_, y1 + h1_
    b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2_, x2 + w2_, y2 - h2_, y2 + h2_
    inter = (b1_x2.minimum(b2_x2) - b1_x1.maximum(b2_x1)).clamp_(0) * (
        b1_y2.minimum(b2_y2) - b1_y1.maximum(b2_y1)
    ).clamp_(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    cw = b1_x2.maximum(b2_x2) - b1_x1.minimum(b2_x1)
    ch = b1_y2.maximum(b2_y2) - b1_y1.minimum(b2_y1)
    c2 = cw.pow(2) + ch.pow(2) + eps
    rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2).pow(2) + (b2_y1 + b2_y2 - b1_y1 - b1_y2).pow(2)) / 4
    v = (4 / math.pi**2) * (lib.atan(w2 / h2) - lib.atan(w1 / h1)).pow(2)
    with lib.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / c2 + v * alpha)


def _yolo(lib, classes=3, anchors=((1.5, 2.0), (3.0, 2.5))):
    """A YOLOv5 detection layer and ComputeLoss: the head's output viewed to (batch, anchors,
    grid, grid, 5 + classes) and permuted, positives picked by boolean indexing, boxes decoded
    by ``sigmoid() * 2 - 0.5`` and ``(sigmoid() * 2) ** 2 * anchor``, CIoU box loss, objectness
    targets written in place from the detached IoU, BCE-with-logits with ``pos_weight`` and
    smoothed class targets."""
    nn = lib.nn
    na = len(anchors)

    class Detect(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.SiLU())
            self.m = nn.Conv2d(8, na * (5 + classes), 1)
            self.register_buffer("anchors", lib.tensor(anchors))

        def forward(self, x):
            p = self.m(self.backbone(x))
            bs, _, ny, nx = p.shape
            return p.view(bs, na, 5 + classes, ny, nx).permute(0, 1, 3, 4, 2).contiguous()

    model = Detect()
    opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    # ComputeLoss.__init__'s criteria (built inside a compiled step, a module holding a tensor
    # breaks the graph and its identity guard recompiles the rest on every call)
    criteria = (
        nn.BCEWithLogitsLoss(pos_weight=lib.tensor([1.0])),
        nn.BCEWithLogitsLoss(pos_weight=lib.tensor([1.5])),
    )
    return model, opt, criteria


def _yolo_step(lib, model, opt, criteria, imgs, positive, tbox, tcls):
    BCEcls, BCEobj = criteria
    cp, cn = 1.0 - 0.5 * 0.1, 0.5 * 0.1
    pi = model(imgs)
    tobj = lib.zeros(pi.shape[:4], dtype=pi.dtype)
    b, a, gj, gi = positive.unbind(1)
    pxy, pwh, _, pcls = pi[b, a, gj, gi].split((2, 2, 1, 3), 1)
    pxy = pxy.sigmoid() * 2 - 0.5
    pwh = (pwh.sigmoid() * 2) ** 2 * model.anchors[a]
    pbox = lib.cat((pxy, pwh), 1)
    iou = _bbox_iou(lib, pbox, tbox).squeeze()
    lbox = (1.0 - iou).mean()
    iou = iou.detach().clamp(0).type(tobj.dtype)
    tobj[b, a, gj, gi] = iou
    t = lib.full_like(pcls, cn)
    t[range(positive.shape[0]), tcls] = cp
    lcls = BCEcls(pcls, t)
    lobj = BCEobj(pi[..., 4], tobj)
    bs = tobj.shape[0]
    loss = (lbox * 0.05 + lobj * 1.0 + lcls * 0.5) * bs
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, lib.cat((lbox.reshape(1), lobj.reshape(1), lcls.reshape(1))).detach(), iou


def _yolo_batches(rng):
    batches = []
    for n, side, positives in ((2, 8, 5), (3, 12, 7)):
        grid = side // 2
        cells = rng.choice(n * 2 * grid * grid, positives, replace=False)
        b, rest = np.divmod(cells, 2 * grid * grid)
        a, rest = np.divmod(rest, grid * grid)
        gj, gi = np.divmod(rest, grid)
        tbox = np.concatenate(
            [rng.uniform(-0.4, 1.4, (positives, 2)), rng.uniform(0.5, 4.0, (positives, 2))], 1
        ).astype(np.float32)
        batches.append(
            (
                rng.standard_normal((n, 3, side, side), dtype=np.float32),
                np.stack([b, a, gj, gi], 1),
                tbox,
                rng.integers(0, 3, positives),
            )
        )
    return batches


def test_yolo_ciou_loss_with_indexed_positives_and_objectness_targets_trains_like_torch():
    # ``t[range(n), tcls] = cp`` specialises the number of positives (a range of a size),
    # and the second step finds the optimizer's state
    _check(Program(_yolo, _yolo_step, _yolo_batches, rtol=2e-4, recompiles=2))


# ------------------------------------------------------------------------------ DETR


def _box_cxcywh_to_xyxy(lib, x):
    x_c, y_c, w, h = x.unbind(-1)
    return lib.stack([(x_c - 0.5 * w), (y_c - 0.5 * h), (x_c + 0.5 * w), (y_c + 0.5 * h)], dim=-1)


def _generalized_box_iou(lib, boxes1, boxes2):
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    lt = lib.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = lib.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    iou = inter / union
    lt = lib.min(boxes1[:, None, :2], boxes2[:, :2])
    rb = lib.max(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    area = wh[:, :, 0] * wh[:, :, 1]
    return iou - (area - union) / area


def _detr(lib, classes=3, queries=5, d=8):
    """DETR's set criterion: a Hungarian matcher under ``no_grad`` (softmax class cost, ``cdist``
    with p=1 box cost, generalised IoU cost) whose cost matrix goes to a
    ``linear_sum_assignment`` through ``.cpu()`` and ``split`` by target counts, then the
    permutation indices by ``full_like``/``cat``, no-object targets by ``full`` and index
    assignment, cross entropy with an ``empty_weight`` buffer, L1 and GIoU box losses."""
    nn, F = lib.nn, lib.nn.functional

    class TinyDETR(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(
                nn.Conv2d(1, d, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1)
            )
            self.query_embed = nn.Embedding(queries, d)
            self.class_embed = nn.Linear(d, classes + 1)
            self.bbox_embed = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 4))
            empty_weight = lib.ones(classes + 1)
            empty_weight[-1] = 0.1
            self.register_buffer("empty_weight", empty_weight)

        def forward(self, samples):
            memory = self.backbone(samples).flatten(1)
            hs = F.relu(memory[:, None, :] + self.query_embed.weight[None])
            return {
                "pred_logits": self.class_embed(hs),
                "pred_boxes": self.bbox_embed(hs).sigmoid(),
            }

    model = TinyDETR()
    return model, lib.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)


def _linear_sum_assignment(cost):
    """scipy's ``linear_sum_assignment`` for the few targets here, by exhaustive search (scipy
    is not a test dependency); like DETR's call, it reads the tensor through ``np.asarray``."""
    cost = np.asarray(cost, dtype=np.float64)
    rows, cols = cost.shape
    best, best_cols = math.inf, ()
    for perm in itertools.permutations(range(rows), cols):
        total = sum(cost[r, c] for c, r in enumerate(perm))
        if total < best:
            best, best_cols = total, perm
    pairs = sorted((r, c) for c, r in enumerate(best_cols))
    return np.array([r for r, _ in pairs]), np.array([c for _, c in pairs])


def _hungarian_matcher(lib, outputs, targets):
    with lib.no_grad():
        bs, num_queries = outputs["pred_logits"].shape[:2]
        out_prob = outputs["pred_logits"].flatten(0, 1).softmax(-1)
        out_bbox = outputs["pred_boxes"].flatten(0, 1)
        tgt_ids = lib.cat([v["labels"] for v in targets])
        tgt_bbox = lib.cat([v["boxes"] for v in targets])
        cost_class = -out_prob[:, tgt_ids]
        cost_bbox = lib.cdist(out_bbox, tgt_bbox, p=1)
        cost_giou = -_generalized_box_iou(
            lib, _box_cxcywh_to_xyxy(lib, out_bbox), _box_cxcywh_to_xyxy(lib, tgt_bbox)
        )
        C = 5 * cost_bbox + 1 * cost_class + 2 * cost_giou
        C = C.view(bs, num_queries, -1).cpu()
        sizes = [len(v["boxes"]) for v in targets]
        indices = [_linear_sum_assignment(c[i]) for i, c in enumerate(C.split(sizes, -1))]
        return [
            (lib.as_tensor(i, dtype=lib.int64), lib.as_tensor(j, dtype=lib.int64))
            for i, j in indices
        ]


def _detr_step(lib, model, opt, samples, labels, boxes, counts):
    F = lib.nn.functional
    sizes = counts.tolist()
    targets = [
        {"labels": lab, "boxes": box} for lab, box in zip(labels.split(sizes), boxes.split(sizes))
    ]
    outputs = model(samples)
    indices = _hungarian_matcher(lib, outputs, targets)
    batch_idx = lib.cat([lib.full_like(src, i) for i, (src, _) in enumerate(indices)])
    src_idx = lib.cat([src for (src, _) in indices])
    idx = (batch_idx, src_idx)
    src_logits = outputs["pred_logits"]
    target_classes_o = lib.cat([t["labels"][J] for t, (_, J) in zip(targets, indices)])
    target_classes = lib.full(src_logits.shape[:2], 3, dtype=lib.int64, device=src_logits.device)
    target_classes[idx] = target_classes_o
    loss_ce = F.cross_entropy(src_logits.transpose(1, 2), target_classes, model.empty_weight)
    num_boxes = max(sum(len(t["labels"]) for t in targets), 1)
    src_boxes = outputs["pred_boxes"][idx]
    target_boxes = lib.cat([t["boxes"][i] for t, (_, i) in zip(targets, indices)], dim=0)
    loss_bbox = F.l1_loss(src_boxes, target_boxes, reduction="none").sum() / num_boxes
    loss_giou = (
        1
        - lib.diag(
            _generalized_box_iou(
                lib, _box_cxcywh_to_xyxy(lib, src_boxes), _box_cxcywh_to_xyxy(lib, target_boxes)
            )
        )
    ).sum() / num_boxes
    loss = loss_ce + 5 * loss_bbox + 2 * loss_giou
    opt.zero_grad()
    loss.backward()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    return loss, target_classes, src_idx


def _detection_sets(rng):
    batches = []
    for counts in ((2, 1), (3, 1, 2)):
        total = sum(counts)
        centres = rng.uniform(0.2, 0.8, (total, 2))
        sizes = rng.uniform(0.1, 0.4, (total, 2))
        batches.append(
            (
                rng.standard_normal((len(counts), 1, 6, 6), dtype=np.float32),
                rng.integers(0, 3, total),
                np.concatenate([centres, sizes], 1).astype(np.float32),
                np.array(counts),
            )
        )
    return batches


def test_detr_hungarian_matching_through_numpy_and_set_criterion_trains_like_torch():
    # the targets' counts are Python numbers (``tolist``) and their list's length varies
    _check(Program(_detr, _detr_step, _detection_sets, rtol=2e-4, recompiles=4))


# ------------------------------------------------------------------------------ CenterNet


def _centernet(lib, classes=2):
    """CenterNet's losses and decoding: the head's heatmap through an in-place ``sigmoid_`` and
    a clamp, the penalty-reduced focal loss with ``eq(1)``/``lt(1)`` masks and a Python branch
    on ``num_pos == 0``, RegL1Loss gathering features at flat indices with the legacy
    ``size_average=False``, and the decoder's 3x3 max-pool NMS, two ``topk``s and integer
    division of the indices."""
    nn = lib.nn

    class CenterNetHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.base = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU())
            self.hm = nn.Conv2d(8, classes, 1)
            self.hm.bias.data.fill_(-2.19)
            self.wh = nn.Conv2d(8, 2, 1)

        def forward(self, x):
            y = self.base(x)
            return {"hm": self.hm(y), "wh": self.wh(y)}

    model = CenterNetHead()
    return model, lib.optim.Adam(model.parameters(), lr=1.25e-3)


def _neg_loss(lib, pred, gt):
    pos_inds = gt.eq(1).float()
    neg_inds = gt.lt(1).float()
    neg_weights = lib.pow(1 - gt, 4)
    loss = 0
    pos_loss = lib.log(pred) * lib.pow(1 - pred, 2) * pos_inds
    neg_loss = lib.log(1 - pred) * lib.pow(pred, 2) * neg_weights * neg_inds
    num_pos = pos_inds.float().sum()
    pos_loss = pos_loss.sum()
    neg_loss = neg_loss.sum()
    if num_pos == 0:
        loss = loss - neg_loss
    else:
        loss = loss - (pos_loss + neg_loss) / num_pos
    return loss


def _transpose_and_gather_feat(feat, ind):
    feat = feat.permute(0, 2, 3, 1).contiguous()
    feat = feat.view(feat.size(0), -1, feat.size(3))
    dim = feat.size(2)
    ind = ind.unsqueeze(2).expand(ind.size(0), ind.size(1), dim)
    return feat.gather(1, ind)


def _ctdet_decode(lib, heat, wh, K=3):
    F = lib.nn.functional
    batch, cat, height, width = heat.size()
    hmax = F.max_pool2d(heat, (3, 3), stride=1, padding=1)
    heat = heat * (hmax == heat).float()
    topk_scores, topk_inds = lib.topk(heat.view(batch, cat, -1), K)
    topk_inds = topk_inds % (height * width)
    topk_ys = (topk_inds / width).int().float()
    topk_xs = (topk_inds % width).int().float()
    topk_score, topk_ind = lib.topk(topk_scores.view(batch, -1), K)
    topk_clses = (topk_ind / K).int()
    topk_inds = topk_inds.view(batch, -1, 1).gather(1, topk_ind.unsqueeze(2)).view(batch, K)
    ys = topk_ys.view(batch, -1, 1).gather(1, topk_ind.unsqueeze(2)).view(batch, K)
    xs = topk_xs.view(batch, -1, 1).gather(1, topk_ind.unsqueeze(2)).view(batch, K)
    wh = _transpose_and_gather_feat(wh, topk_inds)
    bboxes = lib.cat(
        [
            xs[..., None] - wh[..., 0:1] / 2,
            ys[..., None] - wh[..., 1:2] / 2,
            xs[..., None] + wh[..., 0:1] / 2,
            ys[..., None] + wh[..., 1:2] / 2,
        ],
        dim=2,
    )
    return lib.cat([bboxes, topk_score[..., None], topk_clses[..., None].float()], dim=2)


def _centernet_step(lib, model, opt, images, hm, ind, reg_mask, wh_target):
    F = lib.nn.functional
    output = model(images)
    hm_pred = lib.clamp(output["hm"].sigmoid_(), min=1e-4, max=1 - 1e-4)
    hm_loss = _neg_loss(lib, hm_pred, hm)
    pred = _transpose_and_gather_feat(output["wh"], ind)
    mask = reg_mask.unsqueeze(2).expand_as(pred).float()
    wh_loss = F.l1_loss(pred * mask, wh_target * mask, size_average=False)
    wh_loss = wh_loss / (mask.sum() + 1e-4)
    loss = hm_loss + 0.1 * wh_loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    with lib.no_grad():
        detections = _ctdet_decode(lib, hm_pred, output["wh"])
    return loss, detections


def _heatmaps(rng):
    batches = []
    for n, side in ((3, 8), (4, 10)):
        ys, xs = np.mgrid[0:side, 0:side]
        hm = np.zeros((n, 2, side, side), np.float32)
        ind = np.zeros((n, 4), np.int64)
        reg_mask = np.zeros((n, 4), np.uint8)
        wh = np.zeros((n, 4, 2), np.float32)
        for b in range(n):
            for k in range(rng.integers(1, 4)):
                cy, cx, c = rng.integers(0, side), rng.integers(0, side), rng.integers(0, 2)
                gaussian = np.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / 2.0)
                hm[b, c] = np.maximum(hm[b, c], gaussian)
                ind[b, k], reg_mask[b, k] = cy * side + cx, 1
                wh[b, k] = rng.uniform(1, 4, 2)
        batches.append(
            (rng.standard_normal((n, 1, side, side), dtype=np.float32), hm, ind, reg_mask, wh)
        )
    return batches


def test_centernet_focal_loss_gathered_regression_and_topk_decoding_train_like_torch():
    _check(Program(_centernet, _centernet_step, _heatmaps, rtol=2e-4))


# ------------------------------------------------------------------------------ StyleGAN2


def _stylegan2(lib, style_dim=4, channels=4):
    """StyleGAN2's generator pieces (rosinality's): equalised-lr linear layers scaling their
    weights in ``forward``, PixelNorm, a modulated and demodulated convolution run as one
    grouped ``conv2d`` with ``groups=batch`` over the batch folded into channels, noise
    injection, the non-saturating loss and an R1 penalty through ``autograd.grad`` with
    ``create_graph=True``."""
    nn, F = lib.nn, lib.nn.functional

    class EqualLinear(nn.Module):
        def __init__(self, in_dim, out_dim, bias_init=0.0, lr_mul=1.0):
            super().__init__()
            self.weight = nn.Parameter(lib.randn(out_dim, in_dim).div_(lr_mul))
            self.bias = nn.Parameter(lib.zeros(out_dim).fill_(bias_init))
            self.scale = (1 / math.sqrt(in_dim)) * lr_mul
            self.lr_mul = lr_mul

        def forward(self, input):
            out = F.linear(input, self.weight * self.scale)
            return F.leaky_relu(out + self.bias * self.lr_mul, 0.2) * math.sqrt(2)

    class PixelNorm(nn.Module):
        def forward(self, input):
            return input * lib.rsqrt(lib.mean(input**2, dim=1, keepdim=True) + 1e-8)

    class ModulatedConv2d(nn.Module):
        def __init__(self, in_channel, out_channel, kernel_size, demodulate=True):
            super().__init__()
            self.eps, self.kernel_size = 1e-8, kernel_size
            self.in_channel, self.out_channel = in_channel, out_channel
            fan_in = in_channel * kernel_size**2
            self.scale = 1 / math.sqrt(fan_in)
            self.padding = kernel_size // 2
            self.weight = nn.Parameter(
                lib.randn(1, out_channel, in_channel, kernel_size, kernel_size)
            )
            self.modulation = nn.Linear(style_dim, in_channel)
            self.modulation.bias.data.fill_(1)
            self.demodulate = demodulate

        def forward(self, input, style):
            batch, in_channel, height, width = input.shape
            style = self.modulation(style).view(batch, 1, in_channel, 1, 1)
            weight = self.scale * self.weight * style
            if self.demodulate:
                demod = lib.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
                weight = weight * demod.view(batch, self.out_channel, 1, 1, 1)
            weight = weight.view(
                batch * self.out_channel, in_channel, self.kernel_size, self.kernel_size
            )
            input = input.view(1, batch * in_channel, height, width)
            out = F.conv2d(input, weight, padding=self.padding, groups=batch)
            _, _, height, width = out.shape
            return out.view(batch, self.out_channel, height, width)

    class NoiseInjection(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(lib.zeros(1))

        def forward(self, image, noise):
            return image + self.weight * noise

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.style = nn.Sequential(
                PixelNorm(),
                EqualLinear(style_dim, style_dim, lr_mul=0.01),
                EqualLinear(style_dim, style_dim),
            )
            self.input = nn.Parameter(lib.randn(1, channels, 4, 4))
            self.conv1 = ModulatedConv2d(channels, channels, 3)
            self.noise1 = NoiseInjection()
            self.to_rgb = ModulatedConv2d(channels, 1, 1, demodulate=False)

        def forward(self, z, noise):
            latent = self.style(z)
            out = self.input.repeat(z.shape[0], 1, 1, 1)
            out = F.leaky_relu(self.noise1(self.conv1(out, latent), noise), 0.2)
            return self.to_rgb(out, latent)

    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(1, 4, 3, padding=1), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(64, 1)
            )

        def forward(self, x):
            return self.net(x)

    gan = nn.Module()  # one module, so that both networks start from PyTorch's weights
    gan.generator, gan.discriminator = Generator(), Discriminator()
    g_optim = lib.optim.Adam(gan.generator.parameters(), lr=2e-3, betas=(0.0, 0.99))
    d_optim = lib.optim.Adam(gan.discriminator.parameters(), lr=2e-3, betas=(0.0, 0.99))
    return gan, g_optim, d_optim


def _stylegan2_step(lib, gan, g_optim, d_optim, real_img, z, noise):
    F = lib.nn.functional
    generator, discriminator = gan.generator, gan.discriminator
    fake_img = generator(z, noise)
    fake_pred = discriminator(fake_img.detach())
    real_pred = discriminator(real_img)
    d_loss = F.softplus(-real_pred).mean() + F.softplus(fake_pred).mean()
    discriminator.zero_grad()
    d_loss.backward()
    d_optim.step()

    real_img.requires_grad = True
    real_pred = discriminator(real_img)
    (grad_real,) = lib.autograd.grad(outputs=real_pred.sum(), inputs=real_img, create_graph=True)
    r1_loss = grad_real.pow(2).reshape(grad_real.shape[0], -1).sum(1).mean()
    discriminator.zero_grad()
    (10 / 2 * r1_loss * 16 + 0 * real_pred[0]).backward()
    d_optim.step()

    fake_pred = discriminator(generator(z, noise))
    g_loss = F.softplus(-fake_pred).mean()
    generator.zero_grad()
    g_loss.backward()
    g_optim.step()
    return d_loss, r1_loss, g_loss, fake_img


def _style_batches(rng):
    return [
        (
            rng.standard_normal((n, 1, 4, 4), dtype=np.float32),
            rng.standard_normal((n, 4), dtype=np.float32),
            rng.standard_normal((n, 1, 4, 4), dtype=np.float32),
        )
        for n in (2, 3)
    ]


def test_stylegan2_modulated_grouped_convolution_and_r1_penalty_train_like_torch():
    _check(Program(_stylegan2, _stylegan2_step, _style_batches, rtol=5e-4, atol=1e-4))


# ------------------------------------------------------------------------------ hash grid


def _hash_encoding_nerf(lib, levels=2, log2_hashmap_size=6, features=2):
    """HashNeRF-pytorch's multiresolution hash encoding: voxel corners by ``floor(...).int()``
    plus a module-level int offsets tensor, the spatial hash XOR-ing int32 coordinates times
    primes beyond int32 (wrapping) and masked with ``&``, ``nn.Embedding`` tables initialised
    uniformly, and trilinear interpolation of the corner features."""
    nn = lib.nn
    box_offsets = lib.tensor([[[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)]])
    box_min, box_max = lib.tensor([-1.0, -1.0, -1.0]), lib.tensor([1.0, 1.0, 1.0])

    def hash(coords):
        primes = [1, 2654435761, 805459861]
        xor_result = lib.zeros_like(coords)[..., 0]
        for i in range(coords.shape[-1]):
            xor_result ^= coords[..., i] * primes[i]
        return lib.tensor((1 << log2_hashmap_size) - 1) & xor_result

    def get_voxel_vertices(xyz, resolution):
        grid_size = (box_max - box_min) / resolution
        bottom_left_idx = lib.floor((xyz - box_min) / grid_size).int()
        voxel_min_vertex = bottom_left_idx * grid_size + box_min
        voxel_max_vertex = voxel_min_vertex + lib.tensor([1.0, 1.0, 1.0]) * grid_size
        voxel_indices = bottom_left_idx.unsqueeze(1) + box_offsets
        return voxel_min_vertex, voxel_max_vertex, hash(voxel_indices)

    class HashEmbedder(nn.Module):
        def __init__(self, base_resolution=4, finest_resolution=32):
            super().__init__()
            self.b = math.exp(
                (math.log(finest_resolution) - math.log(base_resolution)) / (levels - 1)
            )
            self.base_resolution = base_resolution
            self.embeddings = nn.ModuleList(
                [nn.Embedding(2**log2_hashmap_size, features) for _ in range(levels)]
            )
            for embedding in self.embeddings:
                nn.init.uniform_(embedding.weight, a=-0.1, b=0.1)

        def trilinear_interp(self, x, voxel_min_vertex, voxel_max_vertex, voxel_embedds):
            weights = (x - voxel_min_vertex) / (voxel_max_vertex - voxel_min_vertex)
            c00 = (
                voxel_embedds[:, 0] * (1 - weights[:, 0][:, None])
                + voxel_embedds[:, 4] * weights[:, 0][:, None]
            )
            c01 = (
                voxel_embedds[:, 1] * (1 - weights[:, 0][:, None])
                + voxel_embedds[:, 5] * weights[:, 0][:, None]
            )
            c10 = (
                voxel_embedds[:, 2] * (1 - weights[:, 0][:, None])
                + voxel_embedds[:, 6] * weights[:, 0][:, None]
            )
            c11 = (
                voxel_embedds[:, 3] * (1 - weights[:, 0][:, None])
                + voxel_embedds[:, 7] * weights[:, 0][:, None]
            )
            c0 = c00 * (1 - weights[:, 1][:, None]) + c10 * weights[:, 1][:, None]
            c1 = c01 * (1 - weights[:, 1][:, None]) + c11 * weights[:, 1][:, None]
            return c0 * (1 - weights[:, 2][:, None]) + c1 * weights[:, 2][:, None]

        def forward(self, x):
            x_embedded_all = []
            for i in range(levels):
                resolution = math.floor(self.base_resolution * self.b**i)
                voxel_min_vertex, voxel_max_vertex, hashed_voxel_indices = get_voxel_vertices(
                    x, resolution
                )
                voxel_embedds = self.embeddings[i](hashed_voxel_indices)
                x_embedded_all.append(
                    self.trilinear_interp(x, voxel_min_vertex, voxel_max_vertex, voxel_embedds)
                )
            return lib.cat(x_embedded_all, dim=-1)

    class HashNeRF(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedder = HashEmbedder()
            self.mlp = nn.Sequential(nn.Linear(levels * features, 8), nn.ReLU(), nn.Linear(8, 4))

        def forward(self, x):
            return self.mlp(self.embedder(x))

    model = HashNeRF()
    opt = lib.optim.Adam(
        [
            {"params": model.mlp.parameters(), "weight_decay": 1e-6},
            {"params": model.embedder.parameters(), "eps": 1e-15},
        ],
        lr=1e-2,
        betas=(0.9, 0.99),
    )
    return model, opt


def _hash_step(lib, model, opt, points, target):
    out = model(points)
    rgb, sigma = lib.sigmoid(out[..., :3]), lib.relu(out[..., 3])
    loss = lib.mean((rgb - target) ** 2) + 1e-3 * sigma.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, out


def _points(rng):
    return [
        (
            rng.uniform(-0.99, 0.99, (n, 3)).astype(np.float32),
            rng.uniform(0, 1, (n, 3)).astype(np.float32),
        )
        for n in (16, 24)
    ]


def test_hash_grid_encoding_with_wrapping_int32_primes_and_trilinear_weights_trains_like_torch():
    _check(Program(_hash_encoding_nerf, _hash_step, _points, modes=ALL_MODES, rtol=2e-4))
