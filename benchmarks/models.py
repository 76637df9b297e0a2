"""The models the benchmarks train: a small GPT in two sizes and a small CNN."""
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class GPTConfig:
    layers: int
    d_model: int
    heads: int
    seq: int
    vocab: int = 512
    batch: int = 8


GPT_CONFIGS = {
    "tiny": GPTConfig(layers=2, d_model=128, heads=4, seq=64),
    "small": GPTConfig(layers=4, d_model=256, heads=4, seq=128),
}


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.out = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    def flops_per_step(self):
        """6 x parameters x tokens, plus attention (forward and backward)."""
        cfg = self.cfg
        params = sum(p.numel() for p in self.parameters())
        tokens = cfg.batch * cfg.seq
        attention = 12 * cfg.layers * cfg.d_model * cfg.seq * tokens
        return 6 * params * tokens + attention


def gpt_batch(cfg: GPTConfig, generator):
    idx = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1), generator=generator)
    return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()


class CNN(nn.Module):
    """A ResNet-style CNN for 32x32 images."""

    def __init__(self, classes=10, width=32):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, bias=False),
                                   nn.BatchNorm2d(width), nn.ReLU(),
                                   nn.Conv2d(width, width, 3, padding=1, bias=False),
                                   nn.BatchNorm2d(width))
        self.down = nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(2 * width), nn.ReLU())
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x, targets):
        x = self.stem(x)
        x = F.relu(x + self.block(x))
        x = F.adaptive_avg_pool2d(self.down(x), 1).flatten(1)
        return F.cross_entropy(self.head(x), targets)


def cnn_batch(batch, generator):
    return (torch.randn(batch, 3, 32, 32, generator=generator),
            torch.randint(0, 10, (batch,), generator=generator))
