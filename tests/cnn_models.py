"""Real CNNs as plain PyTorch modules (random weights; torchvision does not import beside
the pinned torch), shared by the ONNX tests and bench/models.py: ResNet-18, MobileNetV2, a
small UNet, a 1-D audio-style CNN and a small Conv3d model."""
import io

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    CONFIG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
              (6, 320, 1, 1))

    def __init__(self, classes=1000):
        super().__init__()
        layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
        cin = 32
        for t, c, n, s in self.CONFIG:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x):
        x = self.features(x)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


class SmallUNet(nn.Module):
    """Two levels down, a bottleneck, one level up by ConvTranspose and one by nearest
    upsampling, concat skips."""

    def __init__(self, cin=3, classes=2, w=16):
        super().__init__()
        self.d1, self.d2, self.mid = _double_conv(cin, w), _double_conv(w, 2 * w), _double_conv(2 * w, 4 * w)
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.u2 = _double_conv(4 * w, 2 * w)
        self.u1 = _double_conv(3 * w, w)
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        m = self.mid(F.max_pool2d(b, 2))
        b2 = self.u2(torch.cat([self.up2(m), b], 1))
        a2 = self.u1(torch.cat([F.interpolate(b2, scale_factor=2, mode="nearest"), a], 1))
        return self.head(a2)


class Audio1d(nn.Module):
    """1-D convs with k = 5..9 and dilations, as in audio models."""

    def __init__(self, cin=1, classes=10):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(cin, 32, 9, stride=2, padding=4), nn.BatchNorm1d(32), nn.ReLU(),
            nn.Conv1d(32, 32, 5, padding=4, dilation=2), nn.BatchNorm1d(32), nn.ReLU(),
            nn.Conv1d(32, 64, 7, padding=9, dilation=3), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(64, 64, 5, padding=2, groups=4), nn.GELU())
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        return self.fc(self.body(x).mean(-1))


class Small3d(nn.Module):
    def __init__(self, cin=1, classes=4):
        super().__init__()
        self.body = nn.Sequential(nn.Conv3d(cin, 16, 3, padding=1), nn.BatchNorm3d(16), nn.ReLU(), nn.MaxPool3d(2),
                                  nn.Conv3d(16, 32, 3, padding=1), nn.ReLU())
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool3d(self.body(x), 1), 1))


# name -> (module class, input shape at batch 1)
MODELS = {"resnet18": (ResNet18, (1, 3, 224, 224)), "mobilenet_v2": (MobileNetV2, (1, 3, 224, 224)),
          "unet": (SmallUNet, (1, 3, 64, 64)), "audio1d": (Audio1d, (1, 1, 4000)),
          "conv3d": (Small3d, (1, 1, 16, 24, 24))}


def randomized(module: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights and batch-norm statistics (so a fold that drops them would show)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return module.eval()


def export(name: str, dynamic_batch: bool = True, seed: int = 0, fold: bool = True):
    """(onnx bytes, the module) for a model of MODELS, exported by the TorchScript exporter
    (fold=False: without its constant folding, so batch norms stay BatchNormalization nodes)."""
    torch.manual_seed(seed)
    cls, shape = MODELS[name]
    module = randomized(cls(), seed)
    buf = io.BytesIO()
    torch.onnx.export(module, torch.randn(*shape), buf, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}} if dynamic_batch else None,
                      opset_version=17, dynamo=False, do_constant_folding=fold)
    return buf.getvalue(), module
