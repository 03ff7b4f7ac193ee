"""Records and thunks: frozen data, one record type per kernel family.

A record is what a compile rule emits, device-neutral: the node it runs, its geometry, and
the value ids of its inputs and outputs, in fields named after their roles (`x`, `w`,
`b`, `y`, `dy`, `dx`, `dw`). Each type declares which roles are inputs and which are
outputs. A value id is never a byte offset: binding makes a Thunk, which keeps the record
and adds what the backend chose (algo, why, tiling) and the byte offsets of every role,
of its scratch and of its persistent data, under their own names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Tuple

from .layout import PLAIN, stored_bytes
from .geometry import ConvGeometry, Im2ColGeometry, PoolGeometry, ReorderGeometry, ResizeGeometry

ABSENT = -1   # a role with no value (a conv without bias), as value id and as offset


@dataclass(frozen=True, slots=True)
class Record:
    INPUTS: ClassVar[Tuple[str, ...]] = ()
    OUTPUTS: ClassVar[Tuple[str, ...]] = ()
    node: str         # the graph node this record runs
    geometry: object  # a frozen geometry type (each record type names its own)

    @classmethod
    def roles(cls) -> Tuple[str, ...]:
        """Input roles, then output roles: the order of a Thunk's offsets."""
        return cls.INPUTS + cls.OUTPUTS

    def value_ids(self) -> Tuple[int, ...]:
        return tuple(getattr(self, r) for r in self.roles())


@dataclass(frozen=True, slots=True)
class Epilogue:
    """What a forward conv does to its output before it is stored: y = act(y + r), with
    the residual r the record's `r` role (ABSENT: none) and act an activation of
    rlxpy.ir.tensor_ops.UNARY ("": none). Set where the graph rewrite fused nodes."""
    act: str = ""
    alpha: float = 0.0
    beta: float = 0.0


NO_EPILOGUE = Epilogue()


@dataclass(frozen=True, slots=True)
class ConvRecord(Record):
    """A conv-family record: x, w, optional b (and for a fused forward conv a residual r)
    -> y."""
    INPUTS: ClassVar = ("x", "w", "b", "r")
    OUTPUTS: ClassVar = ("y",)
    geometry: ConvGeometry
    x: int
    w: int
    b: int
    y: int
    weight_const: bool   # the weight is a param: data derived from it is computed once per arena
    r: int = ABSENT
    epilogue: Epilogue = NO_EPILOGUE

    @property
    def fused(self) -> bool:
        return self.r != ABSENT or self.epilogue.act != ""


@dataclass(frozen=True, slots=True)
class Conv2D(ConvRecord):
    pass


@dataclass(frozen=True, slots=True)
class Conv2D1x1(Conv2D):
    """1x1, stride 1, unpadded, groups 1: y[n] = W @ x[n] (+ b)."""


@dataclass(frozen=True, slots=True)
class Conv3d(ConvRecord):
    pass


@dataclass(frozen=True, slots=True)
class ConvTranspose2d(ConvRecord):
    """Weight [C_in, C_out/groups, kh, kw]; y_shape already includes output_padding."""


@dataclass(frozen=True, slots=True)
class ConvTranspose3d(ConvTranspose2d):
    pass


@dataclass(frozen=True, slots=True)
class Conv2dBackwardInput(Record):
    """dx of the forward conv: geometry.x_shape is dx's shape, y_shape is dy's."""
    INPUTS: ClassVar = ("dy", "w")
    OUTPUTS: ClassVar = ("dx",)
    geometry: ConvGeometry
    dy: int
    w: int
    dx: int
    weight_const: bool


@dataclass(frozen=True, slots=True)
class Conv2dBackwardWeight(Record):
    """dw [K, C/groups, kh, kw] of the forward conv, summed over the batch."""
    INPUTS: ClassVar = ("x", "dy")
    OUTPUTS: ClassVar = ("dw",)
    geometry: ConvGeometry
    x: int
    dy: int
    dw: int


@dataclass(frozen=True, slots=True)
class Pool2D(Record):
    """Rank 3 and 4 pools (a 1-D pool is a 2-D pool with H = 1)."""
    INPUTS: ClassVar = ("x",)
    OUTPUTS: ClassVar = ("y",)
    geometry: PoolGeometry
    kind: str                 # "max" | "avg"
    count_include_pad: bool
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Pool3D(Pool2D):
    pass


@dataclass(frozen=True, slots=True)
class MaxPool2dBackward(Record):
    """geometry.y_shape is dy's shape; dx has x_shape."""
    INPUTS: ClassVar = ("x", "dy")
    OUTPUTS: ClassVar = ("dx",)
    geometry: PoolGeometry
    x: int
    dy: int
    dx: int


@dataclass(frozen=True, slots=True)
class Im2Col(Record):
    INPUTS: ClassVar = ("x",)
    OUTPUTS: ClassVar = ("y",)
    geometry: Im2ColGeometry
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class ResizeNearest2x(Record):
    INPUTS: ClassVar = ("x",)
    OUTPUTS: ClassVar = ("y",)
    geometry: ResizeGeometry
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Reorder(Record):
    """A layout change the plan builder inserts (no graph node: `node` names the value and
    the layout, as "conv1:nchw8c")."""
    INPUTS: ClassVar = ("x",)
    OUTPUTS: ClassVar = ("y",)
    geometry: ReorderGeometry
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Tiling:
    """How a kernel cuts its work (CPU kernels; a backend with no tiling leaves the defaults)."""
    tile: int = 0        # im2col: output rows per column tile; winograd: 2x2 tiles per block; gemm1x1: columns
    k_blocks: int = 1    # output-channel blocks per work item (fills the cores on small images)
    lanes: int = 0       # float32 lanes of an explicit-vector kernel (RLX_SIMD_WIDTH), 0: not one


@dataclass(frozen=True, slots=True)
class Choice:
    """A backend's decision for one record, made before the arena is planned."""
    algo: str
    why: str                        # what was chosen and why not the faster alternatives
    scratch_bytes: int = 0          # live only while the thunk runs (per-worker slots included)
    persistent_bytes: int = 0       # kept for the arena's life (packed or re-arranged weights)
    tiling: Tiling = Tiling()
    layouts: Tuple[Tuple[str, str], ...] = ()   # (role, layout) the kernel prefers, where not plain (NCHWc)
    plain_ok: Tuple[str, ...] = ()              # roles among those it can also read or write plain
    # at a batch smaller than the threads, they split the output's channels (each writes some
    # channel blocks of every pixel), not its pixels: what a consumer's split may follow
    splits_channels: bool = False
    # output roles the kernel can also write inside a wider buffer, its images further apart
    # than its own (a blocked concat's slice at a batch over 1: in_place.find_aliases)
    strided_out: Tuple[str, ...] = ()

    def layout(self, role: str) -> str:
        return dict(self.layouts).get(role, PLAIN)


@dataclass(frozen=True, slots=True)
class Thunk:
    """A record bound to an arena: the backend's choice and byte offsets. Pure data."""
    record: Record
    algo: str
    why: str
    offsets: Tuple[int, ...]        # byte offset of each of record.roles() (ABSENT: no value)
    scratch_off: int = ABSENT
    scratch_bytes: int = 0
    persistent_off: int = ABSENT
    persistent_bytes: int = 0
    tiling: Tiling = Tiling()
    layouts: Tuple[Tuple[str, str], ...] = ()   # (role, layout) as stored in the arena, where not plain
    # (role, bytes from one image to the next) of a value stored inside a wider buffer (its
    # slice of a concat's output at a batch over 1); other roles' images are contiguous
    image_strides: Tuple[Tuple[str, int], ...] = ()

    def layout(self, role: str) -> str:
        return dict(self.layouts).get(role, PLAIN)

    def image_stride(self, role: str, shape) -> int:
        """Bytes from one image of a role (of this shape) to the next: its own stored bytes
        an image, unless it lives inside a wider buffer."""
        stride = dict(self.image_strides).get(role)
        return stored_bytes(shape, self.layout(role)) // shape[0] if stride is None else stride

    @property
    def node(self) -> str:
        return self.record.node

    def off(self, role: str) -> int:
        """The byte offset of a role ("x", "w", "y", ...)."""
        return self.offsets[self.record.roles().index(role)]

    @property
    def output_offsets(self) -> Tuple[int, ...]:
        n = len(self.record.INPUTS)
        return self.offsets[n:]
