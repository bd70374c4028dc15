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


class ResNet(nn.Module):
    """models/resnet.model: 3 stages of one basic block for 32x32 colour images
    (conv-bn-relu-conv-bn, plus the input through a strided 1x1 convolution
    with bias where the shape changes, relu).  Each module is registered
    under its layer's number in `shmtrain --model resnet --summary` less one,
    as nn.Sequential names its modules, so that its state_dict keys are the
    names `shmtrain export` writes for every image model ("0.weight",
    "1.running_mean", "15.weight" for the first shortcut, ...)."""

    # (index of the first conv, index of its batch norm, index of the second conv, its batch norm,
    #  the projection's index or None, in, out, stride)
    BLOCKS = [(3, 4, 6, 7, None, 16, 16, 1), (10, 11, 13, 14, 15, 16, 32, 2), (18, 19, 21, 22, 23, 32, 64, 2)]

    def __init__(self):
        super().__init__()
        self.add_module("0", nn.Conv2d(3, 16, 3, padding=1, bias=False))
        self.add_module("1", nn.BatchNorm2d(16))
        for c1, b1, c2, b2, proj, cin, cout, stride in self.BLOCKS:
            self.add_module(str(c1), nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False))
            self.add_module(str(b1), nn.BatchNorm2d(cout))
            self.add_module(str(c2), nn.Conv2d(cout, cout, 3, padding=1, bias=False))
            self.add_module(str(b2), nn.BatchNorm2d(cout))
            if proj is not None:
                self.add_module(str(proj), nn.Conv2d(cin, cout, 1, stride=stride))
        self.add_module("28", nn.Linear(64, 10))

    def m(self, index):
        return self._modules[str(index)]

    def forward(self, x):
        x = nn.functional.relu(self.m(1)(self.m(0)(x)))
        for c1, b1, c2, b2, proj, _, _, _ in self.BLOCKS:
            y = self.m(b2)(self.m(c2)(nn.functional.relu(self.m(b1)(self.m(c1)(x)))))
            x = nn.functional.relu(y + (self.m(proj)(x) if proj is not None else x))
        return self.m(28)(x.mean((2, 3)))
