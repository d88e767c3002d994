"""A small UNet: convolutions, transposed convolutions, GroupNorm, upsampling, skip
concatenation, SiLU, MSE loss."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class UNetConfig:
    in_channels: int = 3
    base: int = 16
    groups: int = 4


class ConvBlock(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm1 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, cout)

    def forward(self, x):
        x = F.silu(self.norm1(self.conv1(x)))
        return F.silu(self.norm2(self.conv2(x)))


class UNet(nn.Module):
    def __init__(self, cfg=None):
        super().__init__()
        cfg = cfg or UNetConfig()
        b, g = cfg.base, cfg.groups
        self.enc1 = ConvBlock(cfg.in_channels, b, g)
        self.enc2 = ConvBlock(b, 2 * b, g)
        self.down = nn.Conv2d(2 * b, 2 * b, 3, stride=2, padding=1)
        self.mid = ConvBlock(2 * b, 4 * b, g)
        self.up_t = nn.ConvTranspose2d(4 * b, 2 * b, 2, stride=2)
        self.dec2 = ConvBlock(4 * b, 2 * b, g)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec1 = ConvBlock(2 * b + b, b, g)
        self.out = nn.Conv2d(b, cfg.in_channels, 1)

    def forward(self, x, target=None):
        e1 = self.enc1(x)                                    # [B, b, H, W]
        e2 = self.enc2(F.avg_pool2d(e1, 2))                  # [B, 2b, H/2, W/2]
        m = self.mid(self.down(e2))                          # [B, 4b, H/4, W/4]
        d2 = self.dec2(torch.cat([self.up_t(m), e2], dim=1))  # [B, 2b, H/2, W/2]
        d1 = self.dec1(torch.cat([self.up(d2), e1], dim=1))   # [B, b, H, W]
        y = self.out(d1)
        if target is None:
            return y
        return F.mse_loss(y, target)

    @staticmethod
    def example_batch(cfg=None, batch=2, size=16, generator=None):
        cfg = cfg or UNetConfig()
        x = torch.randn(batch, cfg.in_channels, size, size, generator=generator)
        return x, torch.randn(batch, cfg.in_channels, size, size, generator=generator)
