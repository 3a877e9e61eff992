"""Contrastive and metric-learning heads (SimCLR's NT-Xent, ArcFace, prototypical networks,
center loss), word2vec and BPR recommenders, mixup and CutMix, domain-adversarial training by
gradient reversal, MAML, natural-gradient utilities, hypernetworks, weight-standardised
convolutions, style transfer through forward hooks and a full ``nn.Transformer``, written as
their authors write them and run eagerly, under ``kiln.compile`` and under
``kiln.compile(dynamic=True)`` against PyTorch (probe round 13); then the argument forms of
``torch.nn.functional`` people use, the errors of common mistakes and tensor printing.

What the round found: the inductor refused kernels for every size for a ``squeeze()`` whose dim
is ``s0 // 3`` (prototypical networks), so each size ran with the eager ops. Left: a strided
input of a resume function (``tgt[:, 1:]`` after ``nn.Transformer``'s mask check) gets a stride
symbol only after its stride changes (one recompile).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from tests.models.test_hf_vision_sequence_programs_vs_torch import ALL_MODES, Program, _check
from tests.oracle import first_lines_of_errors, needs_torch, torch

pytestmark = needs_torch


def _train(lib, model, opt, *inputs):
    out = model(*inputs)
    out = out if isinstance(out, tuple) else (out,)
    opt.zero_grad()
    out[0].backward()
    opt.step()
    return out


def _features(sizes, width, classes=None):
    def batches(rng):
        out = []
        for n in sizes:
            x = rng.standard_normal((n, width)).astype(np.float32)
            out.append((x,) if classes is None else (x, rng.integers(0, classes, n)))
        return out

    return batches


# ------------------------------------------------------------------------------ metric learning


def _simclr(lib, width=6, projection=4):
    """SimCLR's ``info_nce_loss`` as its reference implementation writes it: labels from two
    ``arange``s, the diagonal dropped by ``~eye`` masks and ``view``, positives and negatives
    by boolean masks, logits over a temperature and a zero label."""
    nn, F = lib.nn, lib.nn.functional

    class SimCLR(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(nn.Linear(width, 8), nn.ReLU())
            self.head = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, projection))

        def info_nce_loss(self, features, temperature=0.07, n_views=2):
            batch_size = features.shape[0] // n_views
            labels = lib.cat([lib.arange(batch_size) for i in range(n_views)], dim=0)
            labels = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()
            features = F.normalize(features, dim=1)
            similarity_matrix = lib.matmul(features, features.T)
            mask = lib.eye(labels.shape[0], dtype=lib.bool)
            labels = labels[~mask].view(labels.shape[0], -1)
            similarity_matrix = similarity_matrix[~mask].view(similarity_matrix.shape[0], -1)
            positives = similarity_matrix[labels.bool()].view(labels.shape[0], -1)
            negatives = similarity_matrix[~labels.bool()].view(similarity_matrix.shape[0], -1)
            logits = lib.cat([positives, negatives], dim=1)
            labels = lib.zeros(logits.shape[0], dtype=lib.long)
            return logits / temperature, labels

        def forward(self, view1, view2):
            features = self.head(self.backbone(lib.cat([view1, view2], dim=0)))
            logits, labels = self.info_nce_loss(features)
            loss = nn.CrossEntropyLoss()(logits, labels)
            top1 = (logits.argmax(1) == labels).float().mean() * 100
            return loss, top1

    model = SimCLR()
    return model, lib.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-4)


def _views(rng):
    out = []
    for n in (4, 6, 5):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        out.append((x, x + 0.1 * rng.standard_normal((n, 6)).astype(np.float32)))
    return out


def test_simclr_nt_xent_with_boolean_masked_views_trains_like_torch():
    _check(Program(_simclr, _train, _views, rtol=1e-3, atol=1e-5))


def _arcface(lib, width=6, classes=5, s=8.0, m=0.3):
    """ArcFace's margin product: ``F.linear`` of normalised features and weights, the sine from
    a clamped square root, ``where`` for the easy-margin threshold, a one-hot made by
    ``scatter_`` into ``zeros`` and an in-place ``*=`` of the scale."""
    nn, F = lib.nn, lib.nn.functional

    class ArcMarginProduct(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(lib.FloatTensor(classes, 8))
            nn.init.xavier_uniform_(self.weight)
            self.cos_m, self.sin_m = math.cos(m), math.sin(m)
            self.th = math.cos(math.pi - m)
            self.mm = math.sin(math.pi - m) * m

        def forward(self, input, label):
            cosine = F.linear(F.normalize(input), F.normalize(self.weight))
            sine = lib.sqrt((1.0 - lib.pow(cosine, 2)).clamp(0, 1))
            phi = cosine * self.cos_m - sine * self.sin_m
            phi = lib.where(cosine > self.th, phi, cosine - self.mm)
            one_hot = lib.zeros(cosine.size())
            one_hot.scatter_(1, label.view(-1, 1).long(), 1)
            output = (one_hot * phi) + ((1.0 - one_hot) * cosine)
            output *= s
            return output

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Sequential(nn.Linear(width, 8), nn.BatchNorm1d(8), nn.PReLU())
            self.metric = ArcMarginProduct()

        def forward(self, x, y):
            logits = self.metric(self.embed(x), y)
            return F.cross_entropy(logits, y), logits

    model = Model()
    return model, lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)


def test_arcface_margin_with_scatter_one_hot_trains_like_torch():
    # SGD's momentum buffers appear at the first step: one recompile, as under torch.compile
    _check(Program(_arcface, _train, _features((7, 9, 8), 6, 5), modes=ALL_MODES, recompiles=1))


def _protonet(lib, width=5, n_way=3, n_shot=2):
    """Prototypical networks: class prototypes as means of the support embeddings, squared
    Euclidean distances by ``unsqueeze``/``expand``, ``log_softmax`` of their negatives,
    ``gather`` of the true class and the episode's accuracy."""
    nn, F = lib.nn, lib.nn.functional

    def euclidean_dist(x, y):
        n, m, d = x.size(0), y.size(0), x.size(1)
        x = x.unsqueeze(1).expand(n, m, d)
        y = y.unsqueeze(0).expand(n, m, d)
        return lib.pow(x - y, 2).sum(2)

    class ProtoNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(width, 8), nn.ReLU(), nn.Linear(8, 4))

        def forward(self, support, query):
            n_query = query.size(0) // n_way
            target_inds = lib.arange(0, n_way).view(n_way, 1, 1).expand(n_way, n_query, 1).long()
            z = self.encoder(lib.cat([support, query], 0))
            z_proto = z[: n_way * n_shot].view(n_way, n_shot, z.size(-1)).mean(1)
            zq = z[n_way * n_shot :]
            dists = euclidean_dist(zq, z_proto)
            log_p_y = F.log_softmax(-dists, dim=1).view(n_way, n_query, -1)
            loss_val = -log_p_y.gather(2, target_inds).squeeze().view(-1).mean()
            _, y_hat = log_p_y.max(2)
            acc_val = lib.eq(y_hat, target_inds.squeeze(2)).float().mean()
            return loss_val, acc_val

    model = ProtoNet()
    return model, lib.optim.Adam(model.parameters(), lr=1e-2)


def _episodes(rng):
    return [
        (
            rng.standard_normal((6, 5)).astype(np.float32),
            rng.standard_normal((3 * q, 5)).astype(np.float32),
        )
        for q in (3, 5, 4)
    ]


def test_prototypical_network_episodes_train_like_torch():
    # distances ignore a shift of every embedding: the last bias's gradient is rounding noise
    _check(Program(_protonet, _train, _episodes, modes=ALL_MODES, skip=("encoder.2.bias",)))


def _center_loss(lib, width=5, classes=4, feat_dim=3):
    """Center loss with its centers in a second optimizer: distances by ``addmm_`` with
    ``beta``/``alpha``, a class mask by ``expand``/``eq``, and the centers' gradient rescaled
    in place (``param.grad.data *= 1 / weight``) before their step."""
    nn = lib.nn

    class CenterLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.centers = nn.Parameter(lib.randn(classes, feat_dim))

        def forward(self, x, labels):
            batch_size = x.size(0)
            distmat = (
                lib.pow(x, 2).sum(dim=1, keepdim=True).expand(batch_size, classes)
                + lib.pow(self.centers, 2).sum(dim=1, keepdim=True).expand(classes, batch_size).t()
            )
            distmat.addmm_(x, self.centers.t(), beta=1, alpha=-2)
            classes_ = lib.arange(classes).long()
            labels = labels.unsqueeze(1).expand(batch_size, classes)
            mask = labels.eq(classes_.expand(batch_size, classes))
            dist = distmat * mask.float()
            return dist.clamp(min=1e-12, max=1e12).sum() / batch_size

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Linear(width, 8), nn.ReLU(), nn.Linear(8, feat_dim))
            self.classifier = nn.Linear(feat_dim, classes)
            self.center_loss = CenterLoss()

    model = Model()
    backbone = [p for n, p in model.named_parameters() if not n.startswith("center_loss")]
    return (
        model,
        lib.optim.SGD(backbone, lr=0.05, weight_decay=5e-4, momentum=0.9),
        lib.optim.SGD(model.center_loss.parameters(), lr=0.5),
    )


def _center_loss_step(lib, model, optimizer_model, optimizer_centloss, x, labels, weight=0.1):
    features = model.features(x)
    outputs = model.classifier(features)
    loss_xent = lib.nn.functional.cross_entropy(outputs, labels)
    loss_cent = model.center_loss(features, labels)
    loss = loss_xent + weight * loss_cent
    optimizer_model.zero_grad()
    optimizer_centloss.zero_grad()
    loss.backward()
    optimizer_model.step()
    for param in model.center_loss.parameters():
        param.grad.data *= 1.0 / weight
    optimizer_centloss.step()
    return loss_xent, loss_cent


def test_center_loss_with_addmm_and_a_second_optimizer_trains_like_torch():
    _check(Program(_center_loss, _center_loss_step, _features((7, 9, 8), 5, 4), modes=ALL_MODES))


# ------------------------------------------------------------------------------ recommenders


def _skip_gram(lib, vocab=20, dim=6):
    """word2vec's skip-gram with negative sampling: input and output embeddings initialised
    with ``uniform_`` and ``constant_``, ``bmm`` against the negatives, ``clamp``, and
    ``F.logsigmoid`` of the positive and negated negative scores."""
    nn, F = lib.nn, lib.nn.functional

    class SkipGramModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.u_embeddings = nn.Embedding(vocab, dim)
            self.v_embeddings = nn.Embedding(vocab, dim)
            initrange = 1.0 / dim
            nn.init.uniform_(self.u_embeddings.weight.data, -initrange, initrange)
            nn.init.constant_(self.v_embeddings.weight.data, 0.1)

        def forward(self, pos_u, pos_v, neg_v):
            emb_u = self.u_embeddings(pos_u)
            emb_v = self.v_embeddings(pos_v)
            emb_neg_v = self.v_embeddings(neg_v)
            score = lib.sum(lib.mul(emb_u, emb_v), dim=1)
            score = lib.clamp(score, max=10, min=-10)
            score = -F.logsigmoid(score)
            neg_score = lib.bmm(emb_neg_v, emb_u.unsqueeze(2)).squeeze()
            neg_score = lib.clamp(neg_score, max=10, min=-10)
            neg_score = -lib.sum(F.logsigmoid(-neg_score), dim=1)
            return lib.mean(score + neg_score)

    model = SkipGramModel()
    return model, lib.optim.SGD(model.parameters(), lr=0.5)


def _skip_gram_batches(rng):
    return [
        (rng.integers(0, 20, n), rng.integers(0, 20, n), rng.integers(0, 20, (n, 3)))
        for n in (5, 7, 6)
    ]


def test_word2vec_skip_gram_negative_sampling_trains_like_torch():
    _check(Program(_skip_gram, _train, _skip_gram_batches, modes=ALL_MODES))


def _bpr(lib, users=6, items=9, dim=4, weight_decay=0.01):
    """Bayesian personalised ranking: user and item embeddings with ``normal_(std=0.01)``, the
    pairwise score difference, ``-logsigmoid`` and an L2 term by ``norm(dim=1)``."""
    nn, F = lib.nn, lib.nn.functional

    class BPR(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Parameter(lib.empty(users, dim))
            self.H = nn.Parameter(lib.empty(items, dim))
            nn.init.normal_(self.W, std=0.1)
            nn.init.normal_(self.H, std=0.1)

        def forward(self, u, i, j):
            u, i, j = self.W[u, :], self.H[i, :], self.H[j, :]
            x_ui = lib.mul(u, i).sum(dim=1)
            x_uj = lib.mul(u, j).sum(dim=1)
            x_uij = x_ui - x_uj
            log_prob = F.logsigmoid(x_uij).sum()
            regularization = weight_decay * (
                u.norm(dim=1).pow(2).sum() + i.norm(dim=1).pow(2).sum() + j.norm(dim=1).pow(2).sum()
            )
            return -log_prob + regularization, x_uij

    model = BPR()
    return model, lib.optim.Adam(model.parameters(), lr=0.05)


def _triples(rng):
    return [
        (rng.integers(0, 6, n), rng.integers(0, 9, n), rng.integers(0, 9, n)) for n in (8, 11, 9)
    ]


def test_bpr_matrix_factorisation_with_fancy_indexed_embeddings_trains_like_torch():
    _check(Program(_bpr, _train, _triples, modes=ALL_MODES))


# ------------------------------------------------------------------------------ augmentation


def _small_classifier(lib):
    nn = lib.nn
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    )
    return model, lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)


def _mixup_step(lib, model, opt, x, y, index, lam):
    """mixup_data / mixup_criterion as in the paper's code."""
    criterion = lib.nn.CrossEntropyLoss()
    mixed_x = lam * x + (1 - lam) * x[index, :]
    y_a, y_b = y, y[index]
    pred = model(mixed_x)
    loss = lam * criterion(pred, y_a) + (1 - lam) * criterion(pred, y_b)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, pred


def _rand_bbox(size, lam, rng_values):
    W, H = size[2], size[3]
    cut_rat = np.sqrt(1.0 - lam)
    cut_w, cut_h = int(W * cut_rat), int(H * cut_rat)
    cx, cy = rng_values
    bbx1 = int(np.clip(cx - cut_w // 2, 0, W))
    bby1 = int(np.clip(cy - cut_h // 2, 0, H))
    bbx2 = int(np.clip(cx + cut_w // 2, 0, W))
    bby2 = int(np.clip(cy + cut_h // 2, 0, H))
    return bbx1, bby1, bbx2, bby2


def _cutmix_step(lib, model, opt, x, y, index, lam, cx, cy):
    """CutMix's training step: a box pasted from a permuted batch by slice assignment, lam
    corrected to the pasted area, two weighted cross entropies."""
    criterion = lib.nn.CrossEntropyLoss()
    target_a, target_b = y, y[index]
    bbx1, bby1, bbx2, bby2 = _rand_bbox(x.size(), lam, (cx, cy))
    x[:, :, bbx1:bbx2, bby1:bby2] = x[index, :, bbx1:bbx2, bby1:bby2]
    lam = 1 - ((bbx2 - bbx1) * (bby2 - bby1) / (x.size()[-1] * x.size()[-2]))
    output = model(x)
    loss = criterion(output, target_a) * lam + criterion(output, target_b) * (1.0 - lam)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, output


def _augmentation_batches(cutmix):
    def batches(rng):
        out = []
        for n in (4, 6, 5):
            batch = (
                rng.standard_normal((n, 2, 6, 6)).astype(np.float32),
                rng.integers(0, 3, n),
                rng.permutation(n),
                float(rng.beta(1.0, 1.0)),
            )
            if cutmix:
                batch = (*batch, int(rng.integers(6)), int(rng.integers(6)))
            out.append(batch)
        return out

    return batches


@pytest.mark.parametrize(
    "step, cutmix", [(_mixup_step, False), (_cutmix_step, True)], ids=["mixup", "cutmix"]
)
def test_mixup_and_cutmix_with_permuted_batches_train_like_torch(step, cutmix):
    # the mixing weight and the box are Python numbers drawn per batch: each is a constant
    # of its graph, as under torch.compile (a float argument is specialised)
    program = Program(_small_classifier, step, _augmentation_batches(cutmix), recompiles=3)
    _check(program)


# ------------------------------------------------------------------------------ gradients


def _dann(lib, width=5):
    """Domain-adversarial training: a gradient reversal ``autograd.Function`` (``view_as`` in
    forward, a negated scaled gradient and ``None`` for the coefficient in backward) between
    the features and a domain classifier, with the DANN schedule for its coefficient."""
    nn, F = lib.nn, lib.nn.functional

    class ReverseLayerF(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, alpha):
            ctx.alpha = alpha
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad_output):
            output = grad_output.neg() * ctx.alpha
            return output, None

    class DANN(nn.Module):
        def __init__(self):
            super().__init__()
            self.feature = nn.Sequential(nn.Linear(width, 8), nn.ReLU())
            self.class_classifier = nn.Linear(8, 3)
            self.domain_classifier = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))

        def forward(self, source, labels, target, p):
            alpha = 2.0 / (1.0 + np.exp(-10 * p)) - 1
            features = self.feature(lib.cat([source, target]))
            class_output = F.log_softmax(self.class_classifier(features[: source.size(0)]), 1)
            reverse_feature = ReverseLayerF.apply(features, alpha)
            domain_output = F.log_softmax(self.domain_classifier(reverse_feature), 1)
            domain_label = lib.cat(
                [lib.zeros(source.size(0)).long(), lib.ones(target.size(0)).long()]
            )
            err_label = F.nll_loss(class_output, labels)
            err_domain = F.nll_loss(domain_output, domain_label)
            return err_label + err_domain, err_domain

    model = DANN()
    return model, lib.optim.Adam(model.parameters(), lr=1e-2)


def _domain_batches(rng):
    return [
        (
            rng.standard_normal((n, 5)).astype(np.float32),
            rng.integers(0, 3, n),
            rng.standard_normal((n + 1, 5)).astype(np.float32) + 1,
            p,
        )
        for n, p in ((4, 0.0), (6, 0.3), (5, 0.6))
    ]


def test_dann_gradient_reversal_function_trains_like_torch():
    # the coefficient's schedule point p is a Python float per batch, specialised as under
    # torch.compile: each new value recompiles
    _check(Program(_dann, _train, _domain_batches, modes=ALL_MODES, recompiles=2))


def _maml(lib, width=3):
    """MAML's inner loop on a functional MLP: ``autograd.grad(create_graph=True)`` of the
    support loss, fast weights ``p - lr * g`` in a list, ``F.linear`` with them on the query
    set, and the meta-optimiser stepping the original parameters."""
    nn = lib.nn

    class Learner(nn.Module):
        def __init__(self):
            super().__init__()
            self.vars = nn.ParameterList(
                [
                    nn.Parameter(lib.randn(8, width) * 0.5),
                    nn.Parameter(lib.zeros(8)),
                    nn.Parameter(lib.randn(1, 8) * 0.5),
                    nn.Parameter(lib.zeros(1)),
                ]
            )

        def forward(self, x, vars=None):
            vars = self.vars if vars is None else vars
            x = lib.nn.functional.linear(x, vars[0], vars[1])
            x = lib.relu(x)
            return lib.nn.functional.linear(x, vars[2], vars[3])

    model = Learner()
    return model, lib.optim.Adam(model.parameters(), lr=1e-2)


def _maml_step(lib, model, meta_opt, x_spt, y_spt, x_qry, y_qry, update_lr=0.1):
    F = lib.nn.functional
    losses_q = []
    for task in range(x_spt.size(0)):
        logits = model(x_spt[task])
        loss = F.mse_loss(logits, y_spt[task])
        grad = lib.autograd.grad(loss, model.parameters(), create_graph=True)
        fast_weights = list(map(lambda p: p[1] - update_lr * p[0], zip(grad, model.parameters())))
        for _ in range(1):
            loss = F.mse_loss(model(x_spt[task], fast_weights), y_spt[task])
            grad = lib.autograd.grad(loss, fast_weights, create_graph=True)
            fast_weights = [w - update_lr * g for g, w in zip(grad, fast_weights)]
        losses_q.append(F.mse_loss(model(x_qry[task], fast_weights), y_qry[task]))
    loss_q = lib.stack(losses_q).sum(0) / x_spt.size(0)
    meta_opt.zero_grad()
    loss_q.backward()
    meta_opt.step()
    return loss_q


def _tasks(rng):
    out = []
    for tasks, shots in ((2, 5), (3, 4), (2, 6)):
        out.append(
            tuple(
                rng.standard_normal(shape).astype(np.float32)
                for shape in ((tasks, shots, 3), (tasks, shots, 1), (tasks, 7, 3), (tasks, 7, 1))
            )
        )
    return out


def test_maml_inner_loop_with_create_graph_fast_weights_trains_like_torch():
    _check(Program(_maml, _maml_step, _tasks, rtol=1e-3))


def _natural_gradient_policy(lib, width=4, actions=3):
    """TRPO's utilities: a flat gradient by ``cat`` of ``view(-1)``s, Fisher-vector products by
    differentiating the KL's gradient against a vector, conjugate gradient in tensor ops,
    ``parameters_to_vector`` / ``vector_to_parameters`` for the update."""
    nn = lib.nn
    policy = nn.Sequential(nn.Linear(width, 8), nn.Tanh(), nn.Linear(8, actions))
    return policy


def _trpo_step(lib, policy, states, actions, advantages, max_kl=0.01, damping=0.1):
    F = lib.nn.functional
    utils = lib.nn.utils
    params = list(policy.parameters())

    def kl_divergence():
        logits = policy(states)
        fixed = logits.detach()
        p_old = F.softmax(fixed, dim=-1)
        return (p_old * (F.log_softmax(fixed, -1) - F.log_softmax(logits, -1))).sum(-1).mean()

    def fisher_vector_product(v):
        grads = lib.autograd.grad(kl_divergence(), params, create_graph=True)
        flat_grad_kl = lib.cat([grad.view(-1) for grad in grads])
        kl_v = (flat_grad_kl * v).sum()
        grads = lib.autograd.grad(kl_v, params)
        return lib.cat([grad.contiguous().view(-1) for grad in grads]) + v * damping

    def conjugate_gradient(b, nsteps=5, residual_tol=1e-10):
        x = lib.zeros(b.size())
        r, p = b.clone(), b.clone()
        rdotr = lib.dot(r, r)
        for _ in range(nsteps):
            _Avp = fisher_vector_product(p)
            alpha = rdotr / lib.dot(p, _Avp)
            x += alpha * p
            r -= alpha * _Avp
            new_rdotr = lib.dot(r, r)
            p = r + (new_rdotr / rdotr) * p
            rdotr = new_rdotr
        return x

    log_probs = F.log_softmax(policy(states), -1).gather(1, actions.unsqueeze(1)).squeeze(1)
    loss = -(log_probs * advantages).mean()
    grads = lib.autograd.grad(loss, params)
    loss_grad = lib.cat([grad.view(-1) for grad in grads]).data
    stepdir = conjugate_gradient(-loss_grad)
    shs = 0.5 * (stepdir * fisher_vector_product(stepdir)).sum(0, keepdim=True)
    lm = lib.sqrt(shs / max_kl)
    fullstep = stepdir / lm[0]
    prev_params = utils.parameters_to_vector(policy.parameters())
    with lib.no_grad():
        utils.vector_to_parameters(prev_params + fullstep, policy.parameters())
    return loss, fullstep, utils.parameters_to_vector(policy.parameters())


def _rollouts(rng):
    return [
        (
            rng.standard_normal((n, 4)).astype(np.float32),
            rng.integers(0, 3, n),
            rng.standard_normal(n).astype(np.float32),
        )
        for n in (6, 9, 7)
    ]


def test_trpo_fisher_vector_products_and_vector_to_parameters_match_torch():
    program = Program(
        _natural_gradient_policy,
        _trpo_step,
        _rollouts,
        grads=False,
        rtol=1e-3,
        atol=1e-5,
    )
    _check(program)


# ------------------------------------------------------------------------------ architectures


def _hypernetwork(lib, width=4, hidden=6, z_dim=3):
    """A hypernetwork: a small net maps a learned per-layer embedding to the weights and bias
    of a target layer, used through ``F.linear`` with ``view``ed generated weights."""
    nn, F = lib.nn, lib.nn.functional

    class HyperLinear(nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
            self.in_features, self.out_features = in_features, out_features
            self.z = nn.Parameter(lib.fmod(lib.randn(z_dim), 2))
            self.w_gen = nn.Linear(z_dim, in_features * out_features)
            self.b_gen = nn.Linear(z_dim, out_features)

        def forward(self, x):
            weight = self.w_gen(self.z).view(self.out_features, self.in_features)
            return F.linear(x, weight, self.b_gen(self.z))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = HyperLinear(width, hidden), HyperLinear(hidden, 2)

        def forward(self, x, y):
            logits = self.l2(F.elu(self.l1(x)))
            return F.cross_entropy(logits, y), logits

    model = Model()
    return model, lib.optim.RMSprop(model.parameters(), lr=1e-2)


def test_hypernetwork_generating_linear_weights_trains_like_torch():
    _check(Program(_hypernetwork, _train, _features((5, 8, 6), 4, 2), modes=ALL_MODES))


def _weight_standardized_resnet(lib):
    """BiT's weight-standardised convolution (``F.conv2d`` with the kernel's mean and unbiased
    std taken in ``forward``, stride, padding, dilation and groups passed on) with GroupNorm."""
    nn, F = lib.nn, lib.nn.functional

    class StdConv2d(nn.Conv2d):
        def forward(self, x):
            weight = self.weight
            weight_mean = (
                weight.mean(dim=1, keepdim=True).mean(dim=2, keepdim=True).mean(dim=3, keepdim=True)
            )
            weight = weight - weight_mean
            std = weight.view(weight.size(0), -1).std(dim=1).view(-1, 1, 1, 1) + 1e-5
            weight = weight / std.expand_as(weight)
            return F.conv2d(
                x, weight, self.bias, self.stride, self.padding, self.dilation, self.groups
            )

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.gn1 = nn.GroupNorm(2, 4)
            self.conv1 = StdConv2d(4, 4, 3, padding=1, bias=False)
            self.gn2 = nn.GroupNorm(2, 4)
            self.conv2 = StdConv2d(4, 4, 3, padding=2, dilation=2, groups=2, bias=False)

        def forward(self, x):
            out = self.conv1(F.relu(self.gn1(x)))
            out = self.conv2(F.relu(self.gn2(out)))
            return out + x

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.root = StdConv2d(1, 4, 3, stride=2, padding=1)
            self.block = Block()
            self.head = nn.Linear(4, 3)

        def forward(self, x, y):
            h = self.block(self.root(x))
            logits = self.head(F.adaptive_avg_pool2d(h, 1).flatten(1))
            return F.cross_entropy(logits, y), logits

    model = Net()
    return model, lib.optim.SGD(model.parameters(), lr=0.03, momentum=0.9)


def _gray_images(rng):
    return [
        (rng.standard_normal((n, 1, 7, 7)).astype(np.float32), rng.integers(0, 3, n))
        for n in (4, 6, 5)
    ]


def test_weight_standardized_convolutions_with_group_norm_train_like_torch():
    program = Program(
        _weight_standardized_resnet, _train, _gray_images, recompiles=1
    )  # SGD's momentum buffers appear at the first step
    _check(program)


def _style_transfer(lib):
    """Neural style transfer as the PyTorch tutorial's readers adapt it: forward hooks store a
    frozen feature net's activations in a dict, Gram matrices of them, and Adam optimising
    the image itself (``requires_grad_``, clamped in place under ``no_grad``)."""
    nn = lib.nn

    class Features(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
            self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
            self.activations = {}
            for name in ("conv1", "conv2"):
                getattr(self, name).register_forward_hook(self._save(name))
            for p in self.parameters():
                p.requires_grad_(False)

        def _save(self, name):
            def hook(module, input, output):
                self.activations[name] = output

            return hook

        def forward(self, x):
            return self.conv2(lib.relu(self.conv1(x)))

    return Features()


def _gram_matrix(lib, input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = lib.mm(features, features.t())
    return G.div(a * b * c * d)


def _style_step(lib, net, content, style):
    F = lib.nn.functional
    net(style)
    style_grams = {k: _gram_matrix(lib, v).detach() for k, v in net.activations.items()}
    net(content)
    content_target = net.activations["conv2"].detach()
    image = content.clone().requires_grad_(True)
    optimizer = lib.optim.Adam([image], lr=0.05)
    for _ in range(3):
        optimizer.zero_grad()
        net(image)
        style_loss = sum(
            F.mse_loss(_gram_matrix(lib, net.activations[k]), g) for k, g in style_grams.items()
        )
        content_loss = F.mse_loss(net.activations["conv2"], content_target)
        loss = 1e3 * style_loss + content_loss
        loss.backward()
        optimizer.step()
        with lib.no_grad():
            image.clamp_(-1.5, 1.5)
    return loss, image


def _style_batches(rng):
    return [
        tuple(rng.standard_normal((1, 3, s, s)).astype(np.float32) for _ in range(2))
        for s in (6, 8, 7)
    ]


def test_style_transfer_through_forward_hooks_optimising_the_image_matches_torch():
    # the hook's dict holds the style image's activations (no grad) at the first call, the
    # optimised image's (grad) later: the forward recompiles once for that
    program = Program(_style_transfer, _style_step, _style_batches, rtol=1e-3, recompiles=1)
    _check(program)


def _seq2seq_transformer(lib, vocab=11, d=8):
    """The PyTorch translation tutorial's ``nn.Transformer``: token embeddings scaled by
    ``sqrt(d)``, a sinusoidal positional buffer, ``generate_square_subsequent_mask``, source
    and target key-padding masks, ``CrossEntropyLoss(ignore_index=PAD)``."""
    nn = lib.nn
    PAD = 0

    class PositionalEncoding(nn.Module):
        def __init__(self, maxlen=16):
            super().__init__()
            den = lib.exp(-lib.arange(0, d, 2) * math.log(10000) / d)
            pos = lib.arange(0, maxlen).reshape(maxlen, 1)
            pos_embedding = lib.zeros((maxlen, d))
            pos_embedding[:, 0::2] = lib.sin(pos * den)
            pos_embedding[:, 1::2] = lib.cos(pos * den)
            self.register_buffer("pos_embedding", pos_embedding.unsqueeze(0))

        def forward(self, token_embedding):
            return token_embedding + self.pos_embedding[:, : token_embedding.size(1)]

    class Seq2SeqTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.Transformer(
                d_model=d,
                nhead=2,
                num_encoder_layers=1,
                num_decoder_layers=1,
                dim_feedforward=16,
                dropout=0.0,
                batch_first=True,
            )
            self.generator = nn.Linear(d, vocab)
            self.src_tok_emb = nn.Embedding(vocab, d)
            self.tgt_tok_emb = nn.Embedding(vocab, d)
            self.positional_encoding = PositionalEncoding()

        def forward(self, src, tgt):
            tgt_input, tgt_out = tgt[:, :-1], tgt[:, 1:]
            tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt_input.size(1))
            src_padding_mask = src == PAD
            tgt_padding_mask = tgt_input == PAD
            src_emb = self.positional_encoding(self.src_tok_emb(src) * math.sqrt(d))
            tgt_emb = self.positional_encoding(self.tgt_tok_emb(tgt_input) * math.sqrt(d))
            outs = self.transformer(
                src_emb,
                tgt_emb,
                tgt_mask=tgt_mask,
                src_key_padding_mask=src_padding_mask,
                tgt_key_padding_mask=tgt_padding_mask,
                memory_key_padding_mask=src_padding_mask,
            )
            logits = self.generator(outs)
            loss = nn.CrossEntropyLoss(ignore_index=PAD)(
                logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1)
            )
            return loss, logits

    model = Seq2SeqTransformer()
    return model, lib.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)


def _padded_pairs(rng):
    out = []
    for n, s, t in ((3, 5, 8), (5, 6, 10), (3, 5, 8)):
        src = rng.integers(1, 11, (n, s))
        tgt = rng.integers(1, 11, (n, t))
        src[0, -2:] = 0
        tgt[1, -1:] = 0
        out.append((src, tgt))
    return out


def test_nn_transformer_translation_with_padding_and_subsequent_masks_trains_like_torch():
    # the key biases get a zero gradient up to rounding (softmax ignores a shift per query),
    # which Adam scales to a full step
    attention = (
        "transformer.encoder.layers.0.self_attn",
        "transformer.decoder.layers.0.self_attn",
        "transformer.decoder.layers.0.multihead_attn",
    )
    program = Program(
        _seq2seq_transformer,
        _train,
        _padded_pairs,
        rtol=1e-3,
        skip=tuple(f"{name}.in_proj_bias" for name in attention),
        # nn.Transformer's causal-mask check breaks the graph; the resume takes ``tgt[:, 1:]``,
        # whose row stride (the target length) becomes a symbol only when it changes
        recompiles=1,
    )
    _check(program)


# ------------------------------------------------------------------------------ F's argument forms


def _functional_forms(lib, x, image, logits, target, weight):
    """The keyword forms, tuple arguments, ``reduction=`` and ``inplace=True`` found in
    scripts, each through autograd."""
    F = lib.nn.functional
    out = {}
    h = image * 1.0
    out["relu_"] = F.relu(h * 2, inplace=True)
    out["leaky_relu_"] = F.leaky_relu(h - 0.1, negative_slope=0.2, inplace=True)
    out["hardtanh"] = F.hardtanh(x, min_val=-0.5, max_val=0.5)
    out["elu"] = F.elu(x, alpha=0.5)
    out["softplus"] = F.softplus(x, beta=2, threshold=1)
    out["glu"] = F.glu(x, dim=1)
    out["gelu_tanh"] = F.gelu(x, approximate="tanh")
    out["dropout_eval"] = F.dropout(x, p=0.5, training=False)
    out["threshold"] = F.threshold(x, 0.1, 20.0)
    out["rrelu_eval"] = F.rrelu(x, lower=0.1, upper=0.3, training=False)
    out["softmax_f64"] = F.softmax(x, dim=-1, dtype=lib.float64)
    out["log_softmax_f64"] = F.log_softmax(x, dim=1, dtype=lib.float64)
    out["max_pool_tuple"] = F.max_pool2d(
        image, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True
    )
    out["avg_pool"] = F.avg_pool2d(image, 3, stride=2, padding=1, count_include_pad=False)
    out["avg_pool_divisor"] = F.avg_pool2d(image, 2, divisor_override=3)
    out["lp_pool"] = F.lp_pool2d(image.abs() + 0.1, norm_type=2, kernel_size=2)
    out["adaptive_none"] = F.adaptive_avg_pool2d(image, (None, 2))
    out["interp_bilinear"] = F.interpolate(image, size=(7, 9), mode="bilinear", align_corners=True)
    out["interp_scale"] = F.interpolate(image, scale_factor=(2, 1.5), mode="nearest")
    out["interp_bicubic"] = F.interpolate(
        image, scale_factor=2, mode="bicubic", align_corners=False, recompute_scale_factor=True
    )
    out["pad_replicate"] = F.pad(image, [1, 2, 0, 1], mode="replicate")
    out["pad_circular"] = F.pad(image, (1, 1, 2, 0), mode="circular")
    out["pad_value"] = F.pad(x, (1, 1), "constant", value=-1.0)
    out["conv_same"] = F.conv2d(image, weight, padding="same", dilation=2)
    out["conv_t"] = F.conv_transpose2d(image, weight.transpose(0, 1), stride=2, output_padding=1)
    out["unfold"] = F.unfold(image, kernel_size=(2, 3), stride=(1, 2))
    out["group_norm"] = F.group_norm(image, 1, eps=1e-3)
    out["layer_norm"] = F.layer_norm(image, image.shape[-2:])
    out["instance_norm"] = F.instance_norm(image, eps=1e-4)
    out["lrn"] = F.local_response_norm(image, size=2)
    out["normalize_p1"] = F.normalize(x, p=1, dim=0)
    out["pairwise"] = F.pairwise_distance(x[:2], x[2:4], keepdim=True)
    out["cosine"] = F.cosine_similarity(x[:, None, :], x[None, :, :], dim=-1, eps=1e-6)
    out["ce_all"] = F.cross_entropy(
        logits,
        target,
        weight=lib.tensor([1.0, 2.0, 0.5, 1.0]),
        ignore_index=1,
        reduction="sum",
        label_smoothing=0.1,
    )
    out["ce_probs"] = F.cross_entropy(logits, F.softmax(logits.detach() * 2, -1))
    out["nll_none"] = F.nll_loss(F.log_softmax(logits, -1), target, reduction="none")
    out["smooth_l1"] = F.smooth_l1_loss(x, x.flip(0), beta=0.5)
    out["huber"] = F.huber_loss(x, x.flip(0), delta=0.3, reduction="sum")
    out["kl_log_target"] = F.kl_div(
        F.log_softmax(logits, -1),
        F.log_softmax(logits.flip(0), -1),
        reduction="batchmean",
        log_target=True,
    )
    out["bce_weight"] = F.binary_cross_entropy(
        lib.sigmoid(logits), (logits.detach() > 0).float(), weight=lib.tensor([1.0, 0.5, 2, 1])
    )
    out["bce_pos_weight"] = F.binary_cross_entropy_with_logits(
        logits, (logits.detach() > 0).float(), pos_weight=lib.tensor([2.0, 1, 1, 3])
    )
    out["margin_ranking"] = F.margin_ranking_loss(x[:, 0], x[:, 1], lib.sign(x[:, 2]), margin=0.1)
    out["cosine_embedding"] = F.cosine_embedding_loss(
        x[:2], x[2:4], lib.tensor([1, -1]), margin=0.2
    )
    out["multi_margin"] = F.multi_margin_loss(logits, target, p=1, margin=0.5)
    out["poisson_nll"] = F.poisson_nll_loss(logits, logits.detach().exp(), log_input=True)
    out["gaussian_nll"] = F.gaussian_nll_loss(x, x.flip(0), x.detach().abs() + 0.1, full=True)
    out["triplet_distance"] = F.triplet_margin_with_distance_loss(
        x[:2],
        x[2:4],
        x[4:6],
        distance_function=lambda a, b: 1 - F.cosine_similarity(a, b),
        margin=0.5,
    )
    out["pixel_shuffle"] = F.pixel_shuffle(image[:, :4].repeat(1, 1, 1, 1), 2)
    out["one_hot_infer"] = F.one_hot(target)
    out["embedding_padding"] = F.embedding(target, x[:, :3], padding_idx=0)
    return out


def _forms_inputs(rng):
    return (
        rng.standard_normal((6, 4)).astype(np.float32),
        rng.standard_normal((2, 4, 5, 6)).astype(np.float32),
        rng.standard_normal((5, 4)).astype(np.float32),
        np.array([0, 3, 1, 2, 3]),
        rng.standard_normal((3, 4, 3, 3)).astype(np.float32),
    )


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_functional_argument_forms_match_torch_with_gradients(mode):
    arrays = _forms_inputs(np.random.default_rng(3))
    results = {}
    for lib in (torch, kiln):
        leaves = [
            lib.tensor(a, requires_grad=a.dtype == np.float32)
            if a.dtype == np.float32
            else lib.tensor(a)
            for a in arrays
        ]
        fn = _functional_forms
        if lib is kiln and mode == "compiled":
            kiln.dynamo.reset()
            fn = kiln.compile(_functional_forms)
        out = fn(lib, *leaves)
        grads = {}
        for name, value in out.items():
            if value.requires_grad:
                floating = [leaf for leaf in leaves if leaf.requires_grad]
                g = lib.autograd.grad(
                    value.double().sum(), floating, allow_unused=True, retain_graph=True
                )
                grads[name] = [None if t is None else t.numpy() for t in g]
        results[lib.__name__] = (out, grads)
    (theirs, their_grads), (ours, our_grads) = results["torch"], results["kiln"]
    assert ours.keys() == theirs.keys()
    for name in theirs:
        want, got = theirs[name], ours[name]
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], name
        assert got.requires_grad == want.requires_grad, name
        np.testing.assert_allclose(
            got.detach().numpy(), want.detach().numpy(), 1e-4, 1e-5, err_msg=name
        )
        assert (name in our_grads) == (name in their_grads), name
        for index, (g, w) in enumerate(zip(our_grads.get(name, []), their_grads.get(name, []))):
            if mode == "compiled" and w is None:  # one graph for all outputs: zeros, not None
                w = None if g is None else np.zeros_like(g)
            assert (g is None) == (w is None), f"{name} grad {index}"
            if w is not None:
                np.testing.assert_allclose(g, w, 1e-4, 1e-5, err_msg=f"{name} grad {index}")


# ------------------------------------------------------------------------------ errors, printing


def _mistakes(lib):
    """Shape mistakes people make, one callable each."""
    nn, F = lib.nn, lib.nn.functional
    a, b = lib.ones(2, 3), lib.ones(4, 5)
    return {
        "matmul": lambda: a @ b,
        "mm": lambda: lib.mm(a, b),
        "bmm": lambda: lib.bmm(lib.ones(2, 3, 4), lib.ones(2, 5, 6)),
        "linear": lambda: nn.Linear(4, 2)(a),
        "f_linear": lambda: F.linear(a, lib.ones(2, 4)),
        "cat": lambda: lib.cat([a, b], dim=0),
        "cat_dims": lambda: lib.cat([a, lib.ones(3)]),
        "stack": lambda: lib.stack([a, lib.ones(3, 2)]),
        "add": lambda: a + lib.ones(4, 3),
        "view": lambda: a.view(4, 2),
        "reshape": lambda: a.reshape(5, -1),
        "conv": lambda: nn.Conv2d(3, 4, 3)(lib.ones(1, 2, 5, 5)),
        "cross_entropy_target": lambda: F.cross_entropy(a, lib.tensor([0, 3])),
        "cross_entropy_dtype": lambda: F.cross_entropy(a, lib.tensor([0.0, 1.0])),
        "mm_dtype": lambda: lib.mm(a, lib.ones(3, 2, dtype=lib.float64)),
        "index": lambda: a[2],
        "embedding": lambda: nn.Embedding(3, 2)(lib.tensor([3])),
        "batch_norm": lambda: nn.BatchNorm1d(4)(a),
        "item": lambda: a.item(),
        "backward_twice": lambda: _backward_twice(lib),
        "numpy_requires_grad": lambda: nn.Linear(3, 2).weight.numpy(),
        "inplace_leaf": lambda: lib.ones(2, requires_grad=True).add_(1),
    }


def _backward_twice(lib):
    x = lib.ones(2, requires_grad=True)
    y = (x.exp() * 2).sum()
    y.backward()
    y.backward()


@pytest.mark.parametrize("name", list(_mistakes(torch)))
def test_common_mistakes_raise_torchs_exception_and_message(name):
    got, want = first_lines_of_errors(_mistakes(kiln)[name], _mistakes(torch)[name])
    assert got == want


def _printed(lib):
    x = lib.tensor([[1.5, -2.25, 3.0], [0.001, 100.0, 7.0]])
    w = lib.nn.Parameter(lib.tensor([0.5, -1.0]))
    return [
        x,
        x.int(),
        x > 1,
        x.double(),
        x.half(),
        x.to(lib.bfloat16),
        w,
        w * 2,
        (w * 2).sum(),
        lib.tensor(3.5),
        lib.tensor([]),
        lib.zeros(2, 0),
        lib.arange(2000.0),
        lib.tensor([1e-8, 1.0, 1e8]),
        lib.tensor([float("nan"), float("inf"), -float("inf"), 1.0]),
        lib.tensor([1.0 + 2.0j, -0.5j]),
        lib.tensor([123456789.0, 1.0]),
        lib.tensor([1, 2], dtype=lib.uint8),
        lib.tensor([0.1, 0.2], dtype=lib.float64),
        lib.ones(2, 3).t(),
        x.detach().requires_grad_(),
        lib.nn.Linear(2, 2).weight.shape,
        lib.float32,
        lib.device("cpu"),
    ]


def test_tensor_printing_matches_torch():
    kiln.manual_seed(0)
    torch.manual_seed(0)
    for ours, theirs in zip(_printed(kiln), _printed(torch)):
        want = repr(theirs).replace("torch.", "").replace("torch", "kiln")
        got = repr(ours).replace("kiln.", "")
        assert got == want.replace("kiln.", "")
        assert str(ours).replace("kiln.", "") == str(theirs).replace("torch.", "").replace(
            "torch", "kiln"
        ).replace("kiln.", "")
