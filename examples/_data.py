"""Synthetic but learnable data for the example scripts.

Every stream is an endless iterator of CPU batches drawn from its own seeded generator, so two
runs (the device run and the --check-cpu run) see the same batches. The hidden rules (the
toy grammar, the class patterns, the click model) come from fixed seeds of their own.
"""

import math

import torch


def make_corpus(n_bytes, seed=0):
    """Bytes of a toy language: 64 words, each followed by one of 3 preferred successors."""
    g = torch.Generator().manual_seed(seed)
    letters = torch.randint(ord("a"), ord("z") + 1, (64, 6), generator=g)
    lengths = torch.randint(2, 7, (64,), generator=g)
    words = [bytes(letters[i, : lengths[i]].tolist()) for i in range(64)]
    successors = torch.randint(0, 64, (64, 3), generator=g)
    out, word = bytearray(), 0
    while len(out) < n_bytes:
        out += words[word] + b" "
        word = int(successors[word, torch.randint(0, 3, (1,), generator=g)]) if torch.rand(1, generator=g) < 0.9 \
            else int(torch.randint(0, 64, (1,), generator=g))
    return torch.tensor(list(out[:n_bytes]), dtype=torch.long)


def text_batches(batch, seq, seed=1, corpus_bytes=200_000):
    """(inputs, next-byte targets) windows of the toy corpus, [batch, seq] each."""
    corpus, generator = make_corpus(corpus_bytes), torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, corpus.numel() - seq - 1, (batch,), generator=generator)
        rows = torch.stack([corpus[s : s + seq + 1] for s in starts.tolist()])
        yield rows[:, :-1], rows[:, 1:]


def _class_patterns(classes, seed=1234):
    """Per class: a grating's spatial frequency (cycles along x and y) and a colour."""
    g = torch.Generator().manual_seed(seed)
    freqs = torch.stack([torch.randperm(4, generator=g)[:2] for _ in range(classes)]).float() + 1
    colours = torch.randn(classes, 3, generator=g)
    return freqs, colours / colours.norm(dim=1, keepdim=True) * math.sqrt(3)


def pattern_images(n, size, classes, generator, noise=0.5):
    """n images [n, 3, size, size] and their labels: class k is a coloured grating with the
    class's frequency, at a random phase, plus Gaussian noise."""
    freqs, colours = _class_patterns(classes)
    labels = torch.randint(0, classes, (n,), generator=generator)
    coords = torch.arange(size).float() / size * 2 * math.pi
    phase = torch.rand(n, 1, 1, generator=generator) * 2 * math.pi
    fx, fy = freqs[labels, 0].view(n, 1, 1), freqs[labels, 1].view(n, 1, 1)
    wave = torch.cos(fx * coords.view(1, 1, size) + fy * coords.view(1, size, 1) + phase)  # [n, H, W]
    images = colours[labels].view(n, 3, 1, 1) * wave.unsqueeze(1)
    return images + noise * torch.randn(n, 3, size, size, generator=generator), labels


def labelled_images(batch, size, classes, seed=1):
    """(images, labels) batches of `pattern_images`."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield pattern_images(batch, size, classes, generator)


def noised_images(batch, size, seed=1):
    """Diffusion training batches (noisy image, noise): a clean pattern image x0 mixed with
    Gaussian noise eps at a random level, x_t = sqrt(a) x0 + sqrt(1 - a) eps with a ~ U(0.05,
    0.95) per image; the model learns to predict eps from x_t."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        clean, _ = pattern_images(batch, size, 10, generator, noise=0.0)
        eps = torch.randn(clean.shape, generator=generator)
        a = (0.05 + 0.9 * torch.rand(batch, 1, 1, 1, generator=generator))
        yield a.sqrt() * clean + (1 - a).sqrt() * eps, eps


def click_batches(batch, dense_features, table_sizes, per_bag, seed=1, rule_seed=4321):
    """DLRM batches (dense, indices, offsets, clicks). Every bag holds `per_bag` ids, so the
    shapes never change; a click is 1 when a hidden linear score of the dense features plus
    per-id scores of the bags' ids is positive."""
    rule = torch.Generator().manual_seed(rule_seed)
    dense_weight = torch.randn(dense_features, generator=rule) / math.sqrt(dense_features)
    id_scores = [torch.randn(n, generator=rule) for n in table_sizes]
    generator = torch.Generator().manual_seed(seed)
    offsets = [torch.arange(0, batch * per_bag, per_bag) for _ in table_sizes]
    while True:
        dense = torch.randn(batch, dense_features, generator=generator)
        indices = [torch.randint(0, n, (batch * per_bag,), generator=generator) for n in table_sizes]
        score = dense @ dense_weight
        for ids, scores in zip(indices, id_scores):
            score = score + scores[ids].view(batch, per_bag).mean(1)
        yield dense, indices, offsets, (score > 0).float()


def teacher_regression(batch, features, outputs, chunks=8, seed=0):
    """(inputs, targets) of a fixed random tanh teacher network, cycling over `chunks` batches."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.nn.Sequential(torch.nn.Linear(features, 32), torch.nn.Tanh(), torch.nn.Linear(32, outputs))
    with torch.no_grad():
        for p in teacher.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
        inputs = torch.randn(batch * chunks, features, generator=g)
        targets = teacher(inputs)
    step = 0
    while True:
        i = (step % chunks) * batch
        yield inputs[i : i + batch], targets[i : i + batch]
        step += 1
