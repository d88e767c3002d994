"""ResNet-18: convolutions, BatchNorm (train and eval), max pooling, adaptive average pooling."""

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), width=16, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, planes, in_planes = [], width, width
        for i, n in enumerate(layers):
            for j in range(n):
                stride = 2 if (j == 0 and i > 0) else 1
                blocks.append(BasicBlock(in_planes, planes, stride))
                in_planes = planes
            planes *= 2
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))

    @staticmethod
    def example_batch(batch=4, size=32, num_classes=10, generator=None):
        return torch.randn(batch, 3, size, size, generator=generator), torch.randint(0, num_classes, (batch,), generator=generator)


def resnet18(width=16, num_classes=10):
    """ResNet-18 (BasicBlock, [2, 2, 2, 2]); `width` channels in the first stage (64 in the paper)."""
    return ResNet((2, 2, 2, 2), width, num_classes)
