"""The benchmark zoo's models (benchmarks/zoo.py): ten kinds of model at two sizes, written the way
a user writes them (plain torch.nn, no tuning for this backend), plus models from real libraries
where they are installed (Transformers' BERT and GPT-2, a Diffusers UNet, TorchRec's DLRM).

Each entry builds ``(model, inputs, target, loss_fn)`` for a size ("small" or "medium") from a
seeded generator; every contender trains its own copy from the same weights on the same batch.
"""

import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _ce(out, target):
    return F.cross_entropy(out, target)


def _mse(out, target):
    return F.mse_loss(out, target)


# ----------------------------------------------------------------------------- plain torch.nn
def mlp(size, g):
    d, batch = {"small": (128, 64), "medium": (512, 128)}[size]
    model = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(d, d), nn.LayerNorm(d), nn.GELU())],
                          nn.Linear(d, 10))
    return model, (torch.randn(batch, d, generator=g),), torch.randint(0, 10, (batch,), generator=g), _ce


class _BasicBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(h)))


def cnn(size, g):
    c, batch = {"small": (16, 16), "medium": (32, 32)}[size]
    model = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                          _BasicBlock(c), _BasicBlock(c), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))
    return model, (torch.randn(batch, 3, 32, 32, generator=g),), torch.randint(0, 10, (batch,), generator=g), _ce


class _ViT(nn.Module):
    def __init__(self, d, layers):
        super().__init__()
        self.patch = nn.Conv2d(3, d, 4, stride=4)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, 65, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        h = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1) + self.pos
        return self.head(self.encoder(h)[:, 0])


def vit(size, g):
    d, layers, batch = {"small": (64, 2, 8), "medium": (192, 4, 16)}[size]
    return (_ViT(d, layers), (torch.randn(batch, 3, 32, 32, generator=g),),
            torch.randint(0, 10, (batch,), generator=g), _ce)


class _LSTMClassifier(nn.Module):
    def __init__(self, vocab, d, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, d, layers, batch_first=True)
        self.head = nn.Linear(d, 5)

    def forward(self, tokens):
        out, _ = self.lstm(self.emb(tokens))
        return self.head(out[:, -1])


def lstm(size, g):
    d, layers, batch, seq = {"small": (64, 1, 16, 32), "medium": (256, 2, 32, 64)}[size]
    return (_LSTMClassifier(1000, d, layers), (torch.randint(0, 1000, (batch, seq), generator=g),),
            torch.randint(0, 5, (batch,), generator=g), _ce)


class _Decoder(nn.Module):
    """GPT-2 style: learned positions, pre-norm causal self-attention blocks, tied head."""

    def __init__(self, vocab, d, layers, seq):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        # a buffer, so it moves with the model (no host-to-device copy per step)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        h = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        h = self.blocks(h, mask=self.mask, is_causal=True)
        return self.norm(h) @ self.tok.weight.t()


def _lm_loss(out, target):
    return F.cross_entropy(out.flatten(0, 1), target.flatten())


def gpt(size, g):
    d, layers, batch, seq = {"small": (64, 2, 4, 32), "medium": (256, 4, 8, 64)}[size]
    tokens = torch.randint(0, 512, (batch, seq + 1), generator=g)
    return _Decoder(512, d, layers, seq), (tokens[:, :-1],), tokens[:, 1:], _lm_loss


class _Encoder(nn.Module):
    """BERT style: post-norm encoder over padded sequences (a key padding mask), [CLS] head."""

    def __init__(self, vocab, d, layers):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(1, 128, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, tokens, padding):
        h = self.tok(tokens) + self.pos[:, : tokens.shape[1]]
        return self.head(self.encoder(h, src_key_padding_mask=padding)[:, 0])


def bert(size, g):
    d, layers, batch, seq = {"small": (64, 2, 8, 32), "medium": (256, 4, 16, 64)}[size]
    tokens = torch.randint(0, 1000, (batch, seq), generator=g)
    lengths = torch.randint(seq // 4, seq + 1, (batch,), generator=g)
    padding = torch.arange(seq)[None, :] >= lengths[:, None]
    return _Encoder(1000, d, layers), (tokens, padding), torch.randint(0, 2, (batch,), generator=g), _ce


class _UNet(nn.Module):
    def __init__(self, c):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(4, o), nn.SiLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.GroupNorm(4, o), nn.SiLU())

        self.down1, self.down2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.up2, self.dec2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2), block(4 * c, 2 * c)
        self.up1, self.dec1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2), block(2 * c, c)
        self.out = nn.Conv2d(c, 3, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        m = self.mid(F.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(m), d2], dim=1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], dim=1))
        return self.out(u1)


def unet(size, g):
    c, batch, res = {"small": (16, 4, 32), "medium": (32, 8, 64)}[size]
    x = torch.randn(batch, 3, res, res, generator=g)
    return _UNet(c), (x,), x * 0.5, _mse


class _DLRM(nn.Module):
    def __init__(self, tables, rows, d, dense):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, 4 * d), nn.ReLU(), nn.Linear(4 * d, d), nn.ReLU())
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, d, mode="sum") for _ in range(tables))
        n = tables + 1
        self.top = nn.Sequential(nn.Linear(d + n * (n - 1) // 2, 4 * d), nn.ReLU(), nn.Linear(4 * d, 1))
        self.register_buffer("pairs", torch.triu_indices(n, n, offset=1), persistent=False)

    def forward(self, dense, ids, offsets):
        x = self.bottom(dense)
        feats = torch.stack([x] + [t(ids[i], offsets[i]) for i, t in enumerate(self.tables)], dim=1)
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, inter], dim=1)).squeeze(1)


def dlrm(size, g):
    tables, rows, d, batch = {"small": (4, 1000, 16, 64), "medium": (8, 10000, 64, 256)}[size]
    per_sample = 3
    ids = torch.randint(0, rows, (tables, batch * per_sample), generator=g)
    offsets = torch.arange(0, batch * per_sample, per_sample).expand(tables, -1).contiguous()
    target = torch.randint(0, 2, (batch,), generator=g).float()
    return (_DLRM(tables, rows, d, 13), (torch.randn(batch, 13, generator=g), ids, offsets), target,
            F.binary_cross_entropy_with_logits)


class _MoE(nn.Module):
    """A top-2 mixture-of-experts feed-forward block as small models write it: a softmax router,
    top-k gates, every expert applied and the outputs combined by the (mostly zero) gates."""

    def __init__(self, d, experts):
        super().__init__()
        self.norm, self.router = nn.LayerNorm(d), nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.SiLU(), nn.Linear(2 * d, d))
                                     for _ in range(experts))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        h = self.norm(x)
        probs = self.router(h).softmax(dim=-1)
        top, idx = probs.topk(2, dim=-1)
        gates = torch.zeros_like(probs).scatter(-1, idx, top / top.sum(-1, keepdim=True))
        out = sum(gates[..., e:e + 1] * expert(h) for e, expert in enumerate(self.experts))
        return self.head((x + out).mean(dim=1))


def moe(size, g):
    d, experts, batch, seq = {"small": (64, 4, 8, 16), "medium": (256, 8, 16, 32)}[size]
    return (_MoE(d, experts), (torch.randn(batch, seq, d, generator=g),),
            torch.randint(0, 10, (batch,), generator=g), _ce)


def llama(size, g):
    from models.llama import Llama, LlamaConfig

    d, hidden, batch, seq = {"small": (64, 128, 2, 32), "medium": (128, 512, 16, 64)}[size]
    cfg = LlamaConfig(vocab_size=256, dim=d, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=hidden, max_seq_len=64)
    tokens = torch.randint(0, 256, (batch, seq + 1), generator=g)
    return Llama(cfg), (tokens[:, :-1],), tokens[:, 1:], _lm_loss


# ----------------------------------------------------------------------------- real libraries
def _logits(out):
    return out.logits if hasattr(out, "logits") else out


def hf_bert(size, g):
    import transformers

    d, layers, batch, seq = {"small": (64, 2, 8, 32), "medium": (256, 4, 16, 64)}[size]
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=d, num_hidden_layers=layers, num_attention_heads=4,
                                  intermediate_size=4 * d, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                  num_labels=2)
    tokens = torch.randint(0, 1000, (batch, seq), generator=g)
    lengths = torch.randint(seq // 4, seq + 1, (batch,), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    model = transformers.BertForSequenceClassification(cfg)
    return model, (tokens, mask), torch.randint(0, 2, (batch,), generator=g), lambda o, t: _ce(_logits(o), t)


def hf_gpt2(size, g):
    import transformers

    d, layers, batch, seq = {"small": (64, 2, 4, 32), "medium": (256, 4, 8, 64)}[size]
    cfg = transformers.GPT2Config(vocab_size=512, n_embd=d, n_layer=layers, n_head=4, n_positions=128,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    tokens = torch.randint(0, 512, (batch, seq + 1), generator=g)
    return (transformers.GPT2LMHeadModel(cfg), (tokens[:, :-1],), tokens[:, 1:],
            lambda o, t: _lm_loss(_logits(o), t))


def diffusers_unet(size, g):
    import diffusers

    c, batch, res = {"small": (16, 2, 32), "medium": (32, 4, 32)}[size]
    model = diffusers.UNet2DModel(sample_size=res, in_channels=3, out_channels=3, layers_per_block=1,
                                  block_out_channels=(c, 2 * c), norm_num_groups=8,
                                  down_block_types=("DownBlock2D", "DownBlock2D"),
                                  up_block_types=("UpBlock2D", "UpBlock2D"))
    x = torch.randn(batch, 3, res, res, generator=g)
    timesteps = torch.randint(0, 1000, (batch,), generator=g)
    return model, (x, timesteps), x * 0.5, lambda o, t: _mse(o.sample if hasattr(o, "sample") else o, t)


def torchrec_dlrm(size, g):
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.models.dlrm import DLRM

    tables, rows, d, batch = {"small": (4, 1000, 16, 64), "medium": (8, 10000, 64, 256)}[size]
    keys = [f"f{i}" for i in range(tables)]
    configs = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=d, num_embeddings=rows, feature_names=[k])
               for i, k in enumerate(keys)]
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("cpu"))
    model = DLRM(embedding_bag_collection=ebc, dense_in_features=13, dense_arch_layer_sizes=[4 * d, d],
                 over_arch_layer_sizes=[4 * d, 1])
    lengths = torch.randint(0, 5, (tables * batch,), generator=g)
    values = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
    features = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths)
    target = torch.randint(0, 2, (batch,), generator=g).float()
    return (model, (torch.randn(batch, 13, generator=g), features), target,
            lambda o, t: F.binary_cross_entropy_with_logits(o.squeeze(-1), t))


MODELS = {"mlp": mlp, "cnn": cnn, "vit": vit, "lstm": lstm, "gpt": gpt, "bert": bert, "unet": unet,
          "dlrm": dlrm, "moe": moe, "llama": llama}
LIBRARY_MODELS = {"hf_bert": hf_bert, "hf_gpt2": hf_gpt2, "diffusers_unet": diffusers_unet,
                  "torchrec_dlrm": torchrec_dlrm}
SIZES = ("small", "medium")


def available():
    """Every model this machine can build: the ten, and the library ones whose package imports."""
    names = dict(MODELS)
    for name, build in LIBRARY_MODELS.items():
        package = {"hf_bert": "transformers", "hf_gpt2": "transformers", "diffusers_unet": "diffusers",
                   "torchrec_dlrm": "torchrec"}[name]
        try:
            __import__(package)
        except Exception:  # noqa: BLE001 - not installed, or broken: skip it
            continue
        names[name] = build
    return names
