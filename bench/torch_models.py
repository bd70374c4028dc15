"""The shmtrain presets in PyTorch (same layers, same shapes), for the benchmarks."""
import torch.nn as nn


def build(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                             nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "resnet":
        return ResNet()
    raise SystemExit(f"torch_models: unknown model {name!r}")


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout))


class Block(nn.Module):
    """models/resnet.model's basic block: conv-bn-relu-conv-bn, plus the input
    (through a strided 1x1 convolution with bias where the shape changes), relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a, self.b = conv_bn(cin, cout, stride), conv_bn(cout, cout)
        self.proj = nn.Conv2d(cin, cout, 1, stride=stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.b(nn.functional.relu(self.a(x)))
        return nn.functional.relu(y + (self.proj(x) if self.proj is not None else x))


class ResNet(nn.Module):
    """models/resnet.model: 3 stages of one basic block for 32x32 colour images."""

    def __init__(self):
        super().__init__()
        self.stem = conv_bn(3, 16)
        self.blocks = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = self.blocks(nn.functional.relu(self.stem(x)))
        return self.head(x.mean((2, 3)))
