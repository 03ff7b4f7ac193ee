"""The one table of named cases that tests and benchmarks share, and the helper that turns
a case into a one-node graph. Not imported by `import rlxpy`.

A case is one op with its shapes and attributes. Its id is readable and made from its
fields (`conv2d-3x3-s2-p1-g4-n1x8x15x16-k8`); benchmark cases carry a name of their own
("3x3 64@56"). Tags say which suites draw it:
  fast       CPU fast kernels against the reference kernels (tests/test_fast_parity.py)
  reference  reference kernels against PyTorch float64 (tests/test_reference_kernels.py)
  gpu        Triton kernels against the CPU reference (tests/test_triton.py)
  bench      bench/conv_suite.py
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Optional, Tuple

import numpy as np

Shape = Tuple[int, ...]


@dataclass(frozen=True)
class Case:
    op: str                                   # the Graph builder method
    inputs: Tuple[Tuple[str, Shape], ...]     # graph inputs (batch first)
    params: Tuple[Tuple[str, Shape], ...]     # params (random, fixed per seed)
    attrs: Tuple[Tuple[str, object], ...]     # builder keyword arguments
    tags: FrozenSet[str] = frozenset()
    label: Optional[str] = None               # a benchmark's name; default: made from the fields
    id: str = field(default="", compare=False)

    @property
    def kw(self) -> Dict[str, object]:
        return dict(self.attrs)

    def shapes(self) -> Dict[str, Shape]:
        return dict(self.inputs + self.params)


def _axes(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _fmt(t) -> str:
    return "x".join(str(i) for i in t)


def _pad_str(p, n) -> str:
    if p == 0:
        return ""
    if isinstance(p, int):
        return f"-p{p}"
    return "-p" + "_".join(f"{a[0]}.{a[1]}" if isinstance(a, tuple) else str(a) for a in _axes(p, n))


def _geometry_id(kernel, stride, padding, dilation, groups, nsp) -> str:
    s = f"-{_fmt(kernel)}"
    s += "" if stride == 1 else f"-s{_fmt(_axes(stride, nsp))}"
    s += _pad_str(padding, nsp)
    s += "" if dilation == 1 else f"-d{_fmt(_axes(dilation, nsp))}"
    s += "" if groups == 1 else f"-g{groups}"
    return s


def conv(n, c, spatial, k, kernel, stride=1, padding=0, dilation=1, groups=1, bias=False, tags=(), label=None):
    """Conv (1-D, 2-D) or Conv3d (three spatial axes): x [n, c, *spatial], w [k, c/groups, *kernel]."""
    nsp = len(spatial)
    op = "conv3d" if nsp == 3 else "conv"
    params = (("w", (k, c // groups) + tuple(kernel)),) + ((("b", (k,)),) if bias else ())
    name = f"conv{nsp}d{_geometry_id(kernel, stride, padding, dilation, groups, nsp)}-n{n}x{c}x{_fmt(spatial)}-k{k}"
    return Case(op, (("x", (n, c) + tuple(spatial)),), params,
                (("stride", stride), ("padding", padding), ("dilation", dilation), ("groups", groups)),
                frozenset(tags), label, label or name + ("-b" if bias else ""))


def conv_transpose(n, c, spatial, kg, kernel, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                   bias=False, tags=(), label=None):
    """ConvTranspose2d / 3d: x [n, c, *spatial], w [c, kg, *kernel] (kg = output channels per group)."""
    nsp = len(spatial)
    params = (("w", (c, kg) + tuple(kernel)),) + ((("b", (kg * groups,)),) if bias else ())
    name = (f"conv_transpose{nsp}d{_geometry_id(kernel, stride, padding, dilation, groups, nsp)}"
            + ("" if output_padding == 0 else f"-op{_fmt(_axes(output_padding, nsp))}")
            + f"-n{n}x{c}x{_fmt(spatial)}-k{kg * groups}")
    return Case(f"conv_transpose{nsp}d", (("x", (n, c) + tuple(spatial)),), params,
                (("stride", stride), ("padding", padding), ("output_padding", output_padding),
                 ("dilation", dilation), ("groups", groups)), frozenset(tags), label, label or name + ("-b" if bias else ""))


def _conv_out(size, k, s, p, d):
    pb, pe = p if isinstance(p, tuple) else (p, p)
    return (size + pb + pe - d * (k - 1) - 1) // s + 1


def _out_spatial(spatial, kernel, stride, padding, dilation):
    nsp = len(spatial)
    return tuple(_conv_out(spatial[i], kernel[i], _axes(stride, nsp)[i], _axes(padding, nsp)[i], _axes(dilation, nsp)[i])
                 for i in range(nsp))


def backward_input(n, c, spatial, k, kernel, stride=1, padding=0, dilation=1, groups=1, tags=(), label=None):
    """Conv2dBackwardInput of the conv x [n, c, *spatial] -> [n, k, ...]: inputs dy, param w."""
    dy = (n, k) + _out_spatial(spatial, kernel, stride, padding, dilation)
    name = f"conv2d_backward_input{_geometry_id(kernel, stride, padding, dilation, groups, 2)}-n{n}x{c}x{_fmt(spatial)}-k{k}"
    return Case("conv2d_backward_input", (("dy", dy),), (("w", (k, c // groups) + tuple(kernel)),),
                (("input_shape", (None, c) + tuple(spatial)), ("stride", stride), ("padding", padding),
                 ("dilation", dilation), ("groups", groups)), frozenset(tags), label, label or name)


def backward_weight(n, c, spatial, k, kernel, stride=1, padding=0, dilation=1, groups=1, tags=(), label=None):
    """Conv2dBackwardWeight of the conv x [n, c, *spatial] -> [n, k, ...]: inputs x, dy."""
    dy = (n, k) + _out_spatial(spatial, kernel, stride, padding, dilation)
    name = f"conv2d_backward_weight{_geometry_id(kernel, stride, padding, dilation, groups, 2)}-n{n}x{c}x{_fmt(spatial)}-k{k}"
    return Case("conv2d_backward_weight", (("x", (n, c) + tuple(spatial)), ("dy", dy)), (),
                (("kernel_size", tuple(kernel)), ("stride", stride), ("padding", padding),
                 ("dilation", dilation), ("groups", groups)), frozenset(tags), label, label or name)


def pool(kind, shape, kernel, stride=None, padding=0, dilation=1, ceil_mode=False, count_include_pad=True,
         tags=(), label=None):
    nsp = len(shape) - 2
    k = _axes(kernel, nsp)
    name = (f"{kind}pool{nsp}d{_geometry_id(k, stride or kernel, padding, dilation, 1, nsp)}"
            + ("-ceil" if ceil_mode else "") + ("" if count_include_pad else "-nopadcount") + f"-n{_fmt(shape)}")
    return Case("pool", (("x", tuple(shape)),), (),
                (("kind", kind), ("kernel_size", kernel), ("stride", stride), ("padding", padding),
                 ("dilation", dilation), ("ceil_mode", ceil_mode), ("count_include_pad", count_include_pad)),
                frozenset(tags), label, label or name)


def max_pool2d_backward(shape, dy_shape, kernel, stride=None, padding=0, dilation=1, tags=()):
    name = (f"max_pool2d_backward{_geometry_id(_axes(kernel, 2), stride or kernel, padding, dilation, 1, 2)}"
            f"-n{_fmt(shape)}")
    return Case("max_pool2d_backward", (("x", tuple(shape)), ("dy", tuple(dy_shape))), (),
                (("kernel_size", kernel), ("stride", stride), ("padding", padding), ("dilation", dilation)),
                frozenset(tags), None, name)


def im2col(shape, kernel, stride=1, padding=0, dilation=1, tags=()):
    name = f"im2col{_geometry_id(_axes(kernel, 2), stride, padding, dilation, 1, 2)}-n{_fmt(shape)}"
    return Case("im2col", (("x", tuple(shape)),), (),
                (("kernel_size", kernel), ("stride", stride), ("padding", padding), ("dilation", dilation)),
                frozenset(tags), None, name)


def resize_nearest2x(shape, tags=()):
    return Case("resize_nearest2x", (("x", tuple(shape)),), (), (), frozenset(tags), None,
                f"resize_nearest2x-n{_fmt(shape)}")


# --- the table -------------------------------------------------------------------------
F, REF, GPU, BENCH = "fast", "reference", "gpu", "bench"

CASES: Tuple[Case, ...] = (
    # forward convolutions: the edges (odd sizes, asymmetric pads, groups, dilation,
    # stride > kernel, 1 and many channels, N > 1, 1-D)
    conv(1, 3, (9, 11), 8, (3, 3), padding=1, bias=True, tags=(F,)),           # winograd-eligible, odd output
    conv(3, 5, (7, 8), 6, (3, 3), padding=((2, 0), (1, 2)), tags=(F,)),        # winograd, asymmetric pads
    conv(3, 4, (10, 9), 6, (3, 3), groups=2, bias=True, tags=(F,)),
    conv(1, 64, (13, 13), 64, (3, 3), padding=1, bias=True, tags=(F,)),
    conv(3, 72, (7, 6), 80, (3, 3), padding=1, tags=(F,)),
    conv(2, 8, (11, 11), 8, (3, 3), padding=1, groups=8, bias=True, tags=(F,)),  # depthwise
    conv(1, 16, (15, 14), 16, (5, 5), stride=2, padding=2, groups=16, tags=(F,)),
    conv(2, 6, (13, 12), 6, (3, 3), padding=2, dilation=2, groups=6, bias=True, tags=(F,)),
    conv(1, 12, (9, 10), 12, (3, 3), stride=2, padding=((1, 0), (2, 1)), groups=12, bias=True,
         tags=(F,)),                                                             # depthwise 3x3 s2, asymmetric
    conv(2, 20, (9, 17), 20, (3, 3), stride=2, padding=1, groups=20, bias=True, tags=(F,)),  # dw s2 full tiles
    conv(2, 5, (2, 7), 5, (3, 3), stride=(1, 4), padding=(3, 1), groups=5, tags=(F,)),  # rows with no tap in x
    conv(1, 1, (9, 9), 4, (3, 3), tags=(F,)),                                  # C = 1
    conv(2, 1, (10, 9), 3, (2, 3), stride=2, padding=1, bias=True, tags=(F,)),
    conv(2, 2, (8, 8), 6, (3, 3), padding=1, groups=2, bias=True, tags=(F,)),  # channel multiplier 3
    conv(3, 6, (12, 11), 4, (3, 3), padding=2, dilation=2, bias=True, tags=(F,)),
    conv(1, 4, (15, 16), 8, (3, 3), stride=2, padding=1, bias=True, tags=(F,)),
    conv(3, 3, (11, 10), 5, (2, 2), stride=3, tags=(F,)),                      # stride > kernel
    conv(2, 3, (23, 21), 16, (7, 7), stride=2, padding=3, bias=True, tags=(F,)),  # stem-like
    conv(3, 12, (5, 7), 10, (1, 1), bias=True, tags=(F,)),                     # 1x1 -> Conv2D1x1
    conv(1, 64, (14, 14), 32, (1, 1), stride=2, tags=(F,)),                    # 1x1 stride 2 -> nchwc_1x1
    conv(2, 20, (9, 7), 44, (1, 1), stride=(2, 3), bias=True, tags=(F,)),       # odd blocks, a lone last one
    conv(2, 9, (13,), 17, (1,), bias=True, tags=(F,)),                          # 1-D pointwise
    conv(2, 16, (9, 10), 3, (1, 1), bias=True, tags=(F,)),                     # a head: 1x1 to < lanes
    conv(2, 4, (6, 6), 4, (4, 2), padding=((0, 3), (1, 0)), groups=2, bias=True, tags=(F,)),
    conv(3, 3, (17,), 8, (5,), stride=2, padding=((2, 1),), dilation=2, bias=True, tags=(F,)),  # 1-D
    conv(1, 4, (20,), 4, (3,), padding=1, groups=4, tags=(F,)),                # 1-D depthwise
    conv(1, 8, (16,), 12, (3,), padding=1, bias=True, tags=(F,)),              # 1-D stride 1
    # against PyTorch
    conv(1, 1, (5, 5), 1, (3, 3), tags=(REF,)),
    conv(3, 4, (7, 9), 6, (3, 3), padding=1, bias=True, tags=(REF,)),
    conv(2, 6, (11, 8), 4, (3, 2), stride=2, padding=((1, 0), (2, 1)), groups=2, bias=True, tags=(REF,)),
    conv(2, 4, (9, 9), 4, (3, 3), padding=2, dilation=2, groups=4, tags=(REF,)),
    conv(1, 3, (10, 10), 5, (2, 2), stride=3, bias=True, tags=(REF,)),
    conv(2, 8, (6, 5), 8, (1, 1), bias=True, tags=(REF,)),
    conv(2, 8, (7, 7), 4, (1, 1), stride=2, tags=(REF,)),
    conv(1, 64, (5, 6), 3, (3, 3), padding=1, bias=True, tags=(REF,)),
    conv(2, 2, (4, 4), 2, (5, 5), padding=2, tags=(REF,)),                     # kernel wider than the input
    conv(1, 6, (8, 8), 9, (3, 3), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=3, bias=True, tags=(REF,)),
    conv(2, 3, (17,), 5, (4,), stride=2, padding=((1, 2),), dilation=2, bias=True, tags=(REF,)),
    conv(3, 4, (9,), 4, (3,), padding=1, groups=4, tags=(REF,)),
    conv(2, 4, (5, 6, 7), 6, (3, 2, 3), stride=(1, 2, 1), padding=((1, 0), 1, (0, 2)), dilation=(1, 1, 2),
         groups=2, bias=True, tags=(REF,)),
    conv(1, 1, (4, 4, 4), 2, (1, 1, 1), tags=(REF,)),
    # the GPU lowering
    conv(2, 4, (7, 9), 6, (3, 3), padding=1, bias=True, tags=(GPU,)),
    conv(1, 8, (5, 6), 12, (3, 3), padding=1, tags=(GPU,)),
    conv(1, 32, (5, 6), 8, (3, 3), padding=1, bias=True, tags=(GPU,)),         # channels a multiple of BLOCK_K
    conv(1, 40, (4, 5), 6, (3, 3), padding=1, tags=(GPU,)),                    # more than BLOCK_K, not a multiple
    conv(2, 6, (9, 8), 4, (3, 2), stride=2, padding=((1, 0), (2, 1)), groups=2, bias=True, tags=(GPU,)),
    conv(1, 4, (9, 9), 4, (3, 3), padding=2, dilation=2, groups=4, tags=(GPU,)),
    conv(2, 3, (8, 8), 5, (2, 2), stride=3, bias=True, tags=(GPU,)),
    conv(1, 8, (5, 6), 10, (1, 1), bias=True, tags=(GPU,)),
    conv(2, 3, (13,), 4, (4,), stride=2, padding=((1, 2),), dilation=2, bias=True, tags=(GPU,)),
    # the other families against their reference kernels
    conv(3, 4, (5, 6, 7), 6, (3, 2, 3), stride=(1, 2, 1), padding=((1, 0), 1, (0, 2)), dilation=(1, 1, 2),
         groups=2, bias=True, tags=(F,)),
    conv(1, 64, (4, 5, 6), 8, (3, 3, 3), padding=1, tags=(F,)),
    conv(2, 16, (5, 4, 7), 16, (3, 3, 3), padding=1, bias=True, tags=(F,)),        # 3-D, whole blocks
    conv(1, 3, (6, 7, 5), 10, (3, 3, 2), stride=2, padding=(1, 1, 0), bias=True, tags=(F,)),   # few input channels
    conv(2, 11, (5, 6, 6), 11, (3, 3, 3), stride=(2, 1, 1), padding=(2, 1, 1), dilation=(2, 1, 1), groups=11,
         tags=(F,)),                                                             # depthwise
    conv(1, 9, (3, 6, 5), 9, (1, 3, 3), stride=(2, 1, 1), padding=(0, 1, 1), groups=9, bias=True,
         tags=(F,)),                                                             # depthwise 1x3x3
    conv_transpose(1, 12, (4, 5, 3), 9, (3, 3, 2), padding=(1, 1, 0), bias=True, tags=(F,)),    # stride 1: a conv
    conv_transpose(3, 4, (5, 6), 3, (3, 4), stride=(2, 3), padding=((1, 0), (2, 1)), output_padding=(1, 2),
                   groups=2, bias=True, tags=(F,)),
    conv_transpose(1, 64, (5, 5), 32, (4, 4), stride=2, padding=1, tags=(F,)),
    conv_transpose(2, 1, (3, 4), 2, (2, 2), stride=3, dilation=2, output_padding=1, tags=(F,)),
    conv_transpose(3, 4, (3, 4, 3), 2, (3, 2, 2), stride=(2, 1, 2), padding=((1, 0), 0, 1),
                   output_padding=(1, 0, 0), dilation=(1, 2, 1), groups=2, bias=True, tags=(F,)),
    conv_transpose(2, 12, (7, 6), 10, (3, 3), padding=1, bias=True, tags=(F,)),          # stride 1: a conv
    conv_transpose(1, 16, (5, 6), 8, (3, 2), padding=((2, 0), (1, 1)), dilation=(1, 2), groups=2, tags=(F,)),
    # kernel = stride: each input pixel writes a patch of its own (nchwc_subpixel's one 1x1 conv)
    conv_transpose(2, 20, (5, 7), 24, (2, 2), stride=2, bias=True, tags=(F,)),
    conv_transpose(2, 5, (4, 3), 9, (3, 2), stride=(3, 2), tags=(F,)),
    conv_transpose(1, 8, (3, 4, 5), 6, (2, 2, 2), stride=2, bias=True, tags=(F,)),
    backward_input(3, 6, (9, 8), 4, (3, 2), stride=2, padding=((1, 0), (0, 1)), dilation=(2, 1), groups=2,
                   tags=(F,)),
    backward_input(2, 16, (7, 8), 16, (3, 3), padding=2, dilation=2, groups=2, tags=(F,)),
    backward_input(1, 5, (6, 7), 7, (2, 3), padding=((1, 0), (0, 2)), tags=(F,)),
    backward_input(1, 64, (9, 9), 64, (3, 3), padding=1, tags=(F,)),
    backward_input(2, 12, (8, 10), 20, (2, 2), stride=2, tags=(F,)),        # kernel = stride: patches
    backward_input(1, 6, (9, 7), 5, (3, 3), stride=3, tags=(F,)),           # ... but a column the conv left out
    backward_weight(3, 6, (9, 8), 4, (3, 2), stride=2, padding=((1, 0), (0, 1)), dilation=(2, 1), groups=2,
                    tags=(F,)),
    backward_weight(3, 64, (9, 9), 64, (3, 3), padding=1, tags=(F,)),
    backward_weight(1, 4, (7, 7), 4, (3, 3), padding=1, groups=4, tags=(F,)),
    backward_weight(2, 13, (10, 9), 11, (2, 3), stride=3, padding=((0, 1), (2, 0)), dilation=(1, 2), tags=(F,)),
    backward_weight(2, 32, (7, 6), 32, (3, 3), padding=1, groups=2, tags=(F,)),     # groups of whole blocks at 8 lanes
    pool("max", (3, 5, 12, 11), 3, stride=2, padding=1, ceil_mode=True, tags=(F,)),
    pool("max", (1, 2, 9, 8), 3, stride=1, padding=1, dilation=2, tags=(F,)),
    pool("max", (2, 9, 8, 29), 3, stride=1, padding=1, tags=(F,)),            # rows of several whole tiles
    pool("max", (2, 9, 7, 29), 3, stride=2, padding=1, tags=(F,)),            # 3-wide s2 windows: whole tiles
    pool("max", (1, 3, 4, 5, 17), 3, stride=(1, 1, 2), padding=1, tags=(F,)),  # the same in 3-D
    pool("avg", (1, 11, 7, 40), (3, 2), stride=(2, 1), padding=(1, 0), count_include_pad=False, tags=(F,)),
    pool("avg", (3, 5, 12, 11), 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False, tags=(F,)),
    pool("avg", (3, 2, 13), 4, stride=3, padding=2, ceil_mode=True, tags=(F,)),
    pool("max", (1, 3, 5, 6, 7), 2, stride=2, padding=1, ceil_mode=True, tags=(F,)),
    pool("max", (2, 10, 7, 6, 8), 3, stride=(1, 2, 2), padding=1, dilation=(2, 1, 1), tags=(F,)),
    pool("avg", (2, 10, 7, 6, 8), 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False, tags=(F,)),
    pool("avg", (1, 9, 5, 6, 7), (2, 3, 3), stride=2, padding=(1, 1, 0), ceil_mode=True, tags=(F,)),
    # dilated average pools (ONNX allows them, PyTorch does not): divisors count dilated taps
    pool("avg", (2, 10, 11, 9), 3, stride=2, padding=2, dilation=2, ceil_mode=True, tags=(F,)),
    pool("avg", (1, 3, 6, 7, 8), 2, stride=(1, 2, 1), padding=1, dilation=(2, 1, 3), count_include_pad=False,
         tags=(F,)),
    max_pool2d_backward((3, 4, 9, 8), (3, 4, 5, 4), 3, stride=2, padding=1, tags=(F,)),
    max_pool2d_backward((2, 11, 9, 8), (2, 11, 5, 3), 3, stride=2, padding=1, dilation=(1, 2), tags=(F,)),
    max_pool2d_backward((1, 1, 7, 7), (1, 1, 6, 6), 2, stride=1, tags=(F,)),         # overlapping windows
    im2col((3, 5, 9, 9), (3, 2), stride=2, padding=((1, 0), (0, 2)), dilation=(2, 1), tags=(F,)),
    resize_nearest2x((3, 4, 5, 7), tags=(F,)),
    # the benchmark (bench/conv_suite.py), ResNet / MobileNet / MNIST / UNet-like layers
    conv(1, 3, (224, 224), 64, (7, 7), stride=2, padding=3, tags=(BENCH,), label="ResNet-18 stem"),
    conv(1, 64, (56, 56), 64, (3, 3), padding=1, tags=(BENCH,), label="3x3 64@56"),
    conv(1, 64, (56, 56), 128, (3, 3), stride=2, padding=1, tags=(BENCH,), label="3x3 s2 64->128"),
    conv(1, 128, (28, 28), 128, (3, 3), padding=1, tags=(BENCH,), label="3x3 128@28"),
    conv(1, 256, (14, 14), 256, (3, 3), padding=1, tags=(BENCH,), label="3x3 256@14"),
    conv(1, 512, (7, 7), 512, (3, 3), padding=1, tags=(BENCH,), label="3x3 512@7"),
    conv(1, 64, (56, 56), 128, (1, 1), stride=2, tags=(BENCH,), label="1x1 s2 downsample"),
    conv(8, 64, (56, 56), 64, (3, 3), padding=1, tags=(BENCH,), label="3x3 64@56 batch 8"),
    conv(1, 144, (56, 56), 144, (3, 3), padding=1, groups=144, tags=(BENCH,), label="depthwise 3x3"),
    conv(1, 144, (56, 56), 24, (1, 1), tags=(BENCH,), label="pointwise 1x1"),
    conv(64, 1, (28, 28), 32, (3, 3), tags=(BENCH,), label="MNIST conv1"),
    conv(64, 32, (26, 26), 64, (3, 3), tags=(BENCH,), label="MNIST conv2"),
    conv_transpose(8, 256, (16, 16), 128, (4, 4), stride=2, padding=1, tags=(BENCH,), label="ConvTranspose 4x4 s2"),
    conv(1, 16, (16, 16, 16), 32, (3, 3, 3), padding=1, tags=(BENCH,), label="Conv3d 3x3x3"),
    pool("max", (1, 64, 112, 112), 3, stride=2, padding=1, tags=(BENCH,), label="MaxPool 3x3 s2"),
    backward_input(8, 64, (56, 56), 64, (3, 3), padding=1, tags=(BENCH,), label="backward input 3x3"),
    backward_weight(8, 64, (56, 56), 64, (3, 3), padding=1, tags=(BENCH,), label="backward weight 3x3"),
)


def cases(tag: str) -> Tuple[Case, ...]:
    return tuple(c for c in CASES if tag in c.tags)


def case_ids(tag: str):
    return [c.id for c in cases(tag)]


# --- building and running ----------------------------------------------------------------
def _conv_like(method):
    return lambda g, v, kw: getattr(g, method)(v["x"], v["w"], bias=v.get("b"), **kw)


BUILD = {
    "conv": _conv_like("conv"),
    "conv3d": _conv_like("conv3d"),
    "conv_transpose2d": _conv_like("conv_transpose2d"),
    "conv_transpose3d": _conv_like("conv_transpose3d"),
    "conv2d_backward_input": lambda g, v, kw: g.conv2d_backward_input(v["dy"], v["w"], **kw),
    "conv2d_backward_weight": lambda g, v, kw: g.conv2d_backward_weight(v["x"], v["dy"], **kw),
    "pool": lambda g, v, kw: g.pool(v["x"], **kw),
    "max_pool2d_backward": lambda g, v, kw: g.max_pool2d_backward(v["x"], v["dy"], **kw),
    "im2col": lambda g, v, kw: g.im2col(v["x"], **kw),
    "resize_nearest2x": lambda g, v, kw: g.resize_nearest2x(v["x"], **kw),
}


def rand(rng, *shape, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def case_arrays(case: Case, seed: int = 0, scale: float = 1.0):
    """(inputs, params): random float32 arrays of the case's shapes."""
    rng = np.random.default_rng(seed)
    inputs = {k: rand(rng, *s, scale=scale) for k, s in case.inputs}
    params = {k: rand(rng, *s, scale=scale) for k, s in case.params}
    return inputs, params


def main_thunk(exe):
    """The thunk of a one-node graph's node (not a layout reorder the plan put around it)."""
    return next(t for t in exe.thunks if type(t.record).__name__ != "Reorder")


def one_node_graph(build, inputs: Dict[str, np.ndarray], params: Optional[Dict[str, np.ndarray]] = None,
                   dynamic_batch: bool = True, output: str = "out"):
    """A graph of one op: `build(g, values)` (or a Case) over inputs (batch dim dynamic
    unless asked otherwise) and params, its result marked as `output`."""
    import rlxpy as rx
    if isinstance(build, Case):
        case = build
        build = lambda g, v: BUILD[case.op](g, v, case.kw)  # noqa: E731
    g = rx.Graph()
    values = {name: g.input(name, ((None,) + a.shape[1:]) if dynamic_batch else a.shape)
              for name, a in inputs.items()}
    for name, a in (params or {}).items():
        values[name] = g.param(name, a)
    g.output(output, build(g, values))
    return g
