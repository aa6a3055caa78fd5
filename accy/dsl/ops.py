"""The op table: every op of the IR, defined once.

An :class:`OpDef` holds everything that is a fact about the op itself: its
operands and type rule; its attribute schema, a small frozen attrs class whose
validators refuse bad attributes (the op's verify hook, with ``OpDef.verify`` for
what needs the operands too); its text form, a template from which the printer
and the parser are both made (:mod:`accy.dsl.textformat`); its traits (pure,
commutative, can fail, inexact, synchronising, memory, regions, identities for
folding, the reduction it names); and how a kernel author spells it (builder and
value methods, ``accy.math``).  Passes and analyses ask the traits, not op names.
The builder's and traced values' methods are generated from this table, and each
backend keeps one table from op name to implementation; a test checks that every
backend table covers exactly these ops.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Callable

import attrs

from ..errors import VerificationError
from . import textformat as tf
from .combines import COMBINES, Combine
from .types import DTYPES, INDEX_MAX, INDEX_MIN, MAX_TILE_RANK, DType, TileType, boolean, i32, index


class OpTypeError(Exception):
    """A type rule rejected its operands; the builder adds the op and source line."""


class OpAttrsError(VerificationError, TypeError):
    """An op's attributes do not fit its schema; the builder and the parser add the op and line."""


# -- attribute schemas -------------------------------------------------------------------------


class Space(enum.StrEnum):
    """The memory a load, store or atomic accesses (compares equal to its name)."""

    GLOBAL = "global"  # a buffer parameter
    SHARED = "shared"  # a block's shared array


class Bounds(enum.StrEnum):
    """What keeps a memory access inside its buffer (compares equal to its name)."""

    CHECKED = "checked"  # its own check at run time, against the buffer's length
    # every element it touches where its mask holds lies within its tensor's shape (a
    # ``load_tile``/``store_tile`` box): the launch checked that the tensor's layout lies
    # inside its buffer (accy.runtime.arguments.bind_arguments), so it needs no check of its own
    SHAPE = "shape"


class BlockUnit(enum.StrEnum):
    """What a block launch's blocks are, for its errors to name."""

    BLOCK = "block"  # blocks of cooperating threads: an error names the thread
    PROGRAM = "program"  # a tile launch's programs (the tile distribution's output): it names the program


class ShuffleMode(enum.StrEnum):
    IDX = "idx"  # lane src % 32
    XOR = "xor"  # lane ^ mask
    DOWN = "down"  # lane + d
    UP = "up"  # lane - d


class AtomicKind(enum.StrEnum):
    ADD = "add"
    MAX = "max"
    MIN = "min"
    EXCHANGE = "exchange"
    CAS = "cas"


class Precision(enum.StrEnum):
    """How ``dot`` multiplies f32 inputs: exactly (``ieee``), or each input first rounded to
    tf32 (10 mantissa bits, to nearest with ties away from zero, as ``cvt.rna.tf32.f32``)."""

    IEEE = "ieee"
    TF32 = "tf32"


class MmaKind(enum.StrEnum):
    """A tensor-core multiply-accumulate of one warp, ``mma.sync.aligned.m16n8kK.row.col``: the
    inputs' type names its shape (K) and its accumulator."""

    F16 = "f16"  # m16n8k16, f32 accumulator
    BF16 = "bf16"  # m16n8k16, f32 accumulator
    TF32 = "tf32"  # m16n8k8, f32 accumulator; operands are f32 already rounded to tf32
    S8 = "s8"  # m16n8k32, i32 accumulator (wrapping)
    # warpgroups only (wgmma m64nNk32, f32 accumulator; mma.sync takes fp8 widened to f16)
    E4M3 = "e4m3"
    E5M2 = "e5m2"

    @property
    def k(self) -> int:
        return {"f16": 16, "bf16": 16, "tf32": 8, "s8": 32, "e4m3": 32, "e5m2": 32}[self.value]

    @property
    def inputs(self) -> str:
        """The element type name of the operands (tf32 values travel as f32)."""
        return {"f16": "f16", "bf16": "bf16", "tf32": "f32", "s8": "i8", "e4m3": "f8e4m3", "e5m2": "f8e5m2"}[self.value]

    @property
    def transposes(self) -> bool:
        """Are its operands 16-bit, the ones wgmma transposes (the ISA's transpose bits) and
        ``ldmatrix.trans`` moves?"""
        return self in (MmaKind.F16, MmaKind.BF16)

    @property
    def bytes_wide(self) -> bool:
        """Are its operands bytes (k32: four to a register)?"""
        return self in (MmaKind.S8, MmaKind.E4M3, MmaKind.E5M2)

    @property
    def accumulator(self) -> str:
        return "i32" if self is MmaKind.S8 else "f32"

    @property
    def a_count(self) -> int:
        """A's elements per lane (16 x k over 32 lanes); B's are half as many."""
        return self.k // 2


MMA_SYNC_KINDS = (MmaKind.F16, MmaKind.BF16, MmaKind.TF32, MmaKind.S8)  # what mma.sync runs


class MatrixOrder(enum.StrEnum):
    """How ``ldmatrix`` hands an 8x8 matrix of 16-byte rows to the lanes."""

    ROW = "row"  # lane l: row l // 4, its 4-byte word l % 4
    TRANS = "trans"  # b16 only: the transposed matrix's (column l // 4, rows 2 (l % 4) and the next)


class OpAttrs(Mapping):
    """The base of every attribute schema.  Read by attribute (``op.attrs.buffer``); it also
    reads as a read-only mapping (``op.attrs["buffer"]``, ``op.attrs.get("space")``) for the
    code that has not moved to attributes yet."""

    __slots__ = ()
    _names: tuple[str, ...] = ()

    def __getitem__(self, key):
        if key in self._names:
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _schema(cls):
    cls = attrs.frozen(cls)
    cls._names = tuple(f.name for f in attrs.fields(cls))
    return cls


def _fail(instance, field, wanted, value):
    raise OpAttrsError(f"{type(instance).__name__}.{field.name} must be {wanted}, got {value!r}")


def _is_dtype(instance, field, value):
    if not isinstance(value, DType):
        _fail(instance, field, "a DType (accy.f32, ...)", value)


def _is_name(instance, field, value):
    if not isinstance(value, str) or not re.fullmatch(r"\w+", value):
        _fail(instance, field, "a name of letters, digits and _", value)


def _names_of(instance, field, value):
    if not isinstance(value, tuple) or not all(isinstance(v, str) and re.fullmatch(r"\w+", v) for v in value) \
            or len(set(value)) != len(value):
        _fail(instance, field, "a tuple of distinct names", value)


def _to_enum(cls, what):
    def convert(value):
        try:
            return cls(value)
        except ValueError:
            raise OpAttrsError(f"{what} must be one of {', '.join(m.value for m in cls)}, got {value!r}") from None

    return convert


def _field(codec, validator=None, **kw):
    return attrs.field(validator=validator, metadata={"text": codec}, **kw)


def _space_field():
    return _field(tf.enum_codec(Space), default=Space.GLOBAL, converter=_to_enum(Space, "space"))


@_schema
class NoAttrs(OpAttrs):
    """The pointwise ops, yield and barrier."""


def _const_value(instance, field, value):
    t = instance.dtype
    if t.is_bool:
        ok, wanted = isinstance(value, bool), "True or False"
    elif t.is_int:
        ok = isinstance(value, int) and not isinstance(value, bool) and t.min <= value <= t.max
        wanted = f"an int in [{t.min}, {t.max}]"
    else:
        ok, wanted = isinstance(value, float), "a Python float"
    if not ok:
        _fail(instance, field, f"{wanted} for a {t} constant", value)


@_schema
class ConstAttrs(OpAttrs):
    dtype: DType = _field(tf.DTYPE, _is_dtype)  # first: the value is read back by its type
    value: bool | int | float = _field(tf.LITERAL, _const_value)


@_schema
class SizeAttrs(OpAttrs):
    buffer: str = _field(tf.WORD, _is_name)


@_schema
class CastAttrs(OpAttrs):
    dtype: DType = _field(tf.DTYPE, _is_dtype)


def _vec(instance, field, value):
    if isinstance(value, bool) or value not in (1, 2, 4, 8, 16):
        _fail(instance, field, "1, 2, 4, 8 or 16 (elements accessed at once)", value)


def _bounds_field():
    return _field(tf.enum_codec(Bounds), default=Bounds.CHECKED, converter=_to_enum(Bounds, "bounds"))


def _vec_field():
    # a SIMT load/store of ``vec`` consecutive elements at once (one vector access): its
    # first element's address must be a multiple of vec * the element size (the caller
    # checks, e.g. with ``aligned``); tile accesses take 1
    return _field(tf.INT, _vec, default=1)


@_schema
class LoadAttrs(OpAttrs):
    buffer: str = _field(tf.WORD, _is_name)
    dtype: DType = _field(tf.DTYPE, _is_dtype)
    space: Space = _space_field()
    vec: int = _vec_field()
    bounds: Bounds = _bounds_field()


@_schema
class StoreAttrs(OpAttrs):
    buffer: str = _field(tf.WORD, _is_name)
    dtype: DType = _field(tf.DTYPE, _is_dtype)
    space: Space = _space_field()
    vec: int = _vec_field()
    bounds: Bounds = _bounds_field()


@_schema
class AlignedAttrs(OpAttrs):
    buffer: str = _field(tf.WORD, _is_name)
    bytes: int = _field(tf.INT, _vec)


@_schema
class AtomicAttrs(OpAttrs):
    op: AtomicKind = _field(tf.enum_codec(AtomicKind), converter=_to_enum(AtomicKind, "atomic op"))
    buffer: str = _field(tf.WORD, _is_name)
    dtype: DType = _field(tf.DTYPE, _is_dtype)
    space: Space = _space_field()


def _step(instance, field, value):
    if isinstance(value, bool) or not isinstance(value, int) or value == 0 or not INDEX_MIN <= value <= INDEX_MAX:
        _fail(instance, field, "a non-zero int in the index range", value)


@_schema
class FoldAttrs(OpAttrs):
    step: int = _field(tf.INT, _step)


def _dtypes(instance, field, value):
    if not isinstance(value, tuple) or not all(isinstance(t, (DType, TileType)) for t in value):
        _fail(instance, field, "a tuple of DTypes (or TileTypes, in a tile program)", value)


class IfKind(enum.StrEnum):
    BRANCH = "branch"
    ROLES = "roles"


@_schema
class IfAttrs(OpAttrs):
    results: tuple[DType, ...] = _field(tf.DTYPE_LIST, _dtypes, default=())
    # ``roles``: the threads taking each side are warps of different roles, which wait for each
    # other (a warp-specialised program's producer and consumers): the sides run concurrently
    kind: "IfKind" = _field(tf.enum_codec(IfKind), default=IfKind.BRANCH, converter=_to_enum(IfKind, "if kind"))


@_schema
class ForEachAttrs(OpAttrs):
    axes: tuple[str, ...] = attrs.field(validator=_names_of)  # written by the template's $grid


def _thread_axes(instance, field, value):
    ok = isinstance(value, tuple) and 1 <= len(value) <= 3 and all(
        isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str) and re.fullmatch(r"\w+", a[0])
        and isinstance(a[1], int) and not isinstance(a[1], bool) and a[1] >= 1 for a in value)
    if not ok:
        _fail(instance, field, "1 to 3 (name, static positive extent) pairs", value)
    names = list(instance.axes) + [name for name, _ in value]
    if len(set(names)) != len(names):
        _fail(instance, field, "axes named unlike each other and the grid's", value)


def _min_blocks(instance, field, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _fail(instance, field, "a non-negative int", value)


@_schema
class ForEachBlockAttrs(OpAttrs):
    axes: tuple[str, ...] = attrs.field(validator=_names_of)  # the grid axes ($grid)
    threads: tuple[tuple[str, int], ...] = attrs.field(validator=_thread_axes)  # ($threads)
    # blocks per SM a GPU lowering budgets registers for (CUDA's minBlocksPerMultiprocessor);
    # 0: the lowering's default.  The tile distribution sets it: its threads hold whole tiles
    min_blocks: int = _field(tf.INT, _min_blocks, default=0)
    unit: BlockUnit = _field(tf.enum_codec(BlockUnit), default=BlockUnit.BLOCK,
                             converter=_to_enum(BlockUnit, "unit"))


def _count(instance, field, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail(instance, field, "a positive int", value)


def _alignment(instance, field, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 16 or value & (value - 1):
        _fail(instance, field, "a power of two of at least 16 (bytes)", value)


@_schema
class SharedAttrs(OpAttrs):
    name: str = _field(tf.WORD, _is_name)
    dtype: DType = _field(tf.DTYPE, _is_dtype)
    count: int = _field(tf.INT, _count)
    align: int = _field(tf.INT, _alignment, default=16)  # bytes its start is a multiple of


@_schema
class ShuffleAttrs(OpAttrs):
    mode: ShuffleMode = _field(tf.enum_codec(ShuffleMode), converter=_to_enum(ShuffleMode, "shuffle mode"))


@_schema
class MmaAttrs(OpAttrs):
    kind: MmaKind = _field(tf.enum_codec(MmaKind), converter=_to_enum(MmaKind, "mma kind"))


def _matrices(instance, field, value):
    if isinstance(value, bool) or value not in (1, 2, 4):
        _fail(instance, field, "1, 2 or 4 (8x8 matrices)", value)


def _shared_only(instance, field, value):
    if value is not Space.SHARED:
        _fail(instance, field, "shared (ldmatrix reads a block's shared array)", value)


@_schema
class LdmatrixAttrs(OpAttrs):
    buffer: str = _field(tf.WORD, _is_name)  # a shared array
    dtype: DType = _field(tf.DTYPE, _is_dtype)
    count: int = _field(tf.INT, _matrices)
    order: MatrixOrder = _field(tf.enum_codec(MatrixOrder), default=MatrixOrder.ROW,
                                converter=_to_enum(MatrixOrder, "ldmatrix order"))
    space: Space = _field(tf.enum_codec(Space), _shared_only, default=Space.SHARED, converter=_to_enum(Space, "space"))


def _copy_bytes(instance, field, value):
    if isinstance(value, bool) or value not in (4, 8, 16):
        _fail(instance, field, "4, 8 or 16 (bytes a cp.async moves)", value)


@_schema
class AsyncCopyAttrs(OpAttrs):
    shared: str = _field(tf.WORD, _is_name)  # the shared array written
    buffer: str = _field(tf.WORD, _is_name)  # the buffer parameter read
    bytes: int = _field(tf.INT, _copy_bytes)
    dtype: DType = _field(tf.DTYPE, _is_dtype)
    bounds: Bounds = _bounds_field()

    @property
    def space(self) -> Space:
        """The space of ``buffer``, the memory it reads (it writes only shared memory)."""
        return Space.GLOBAL


@_schema
class AsyncWaitAttrs(OpAttrs):
    pending: int = _field(tf.INT, _min_blocks)  # groups a thread may leave in flight


def _barrier_threads(instance, field, value):
    if isinstance(value, bool) or value < 0 or value % 32:
        _fail(instance, field, "0 (every thread of the block) or a multiple of 32", value)


@_schema
class BarrierAttrs(OpAttrs):
    """barrier: ``threads`` 0 waits for every thread of the block; else for the block's first
    ``threads`` threads alone (the consumers of a warp-specialised program), which all reach it."""

    threads: int = _field(tf.INT, _barrier_threads, default=0)


@_schema
class MbarrierAttrs(OpAttrs):
    shared: str = _field(tf.WORD, _is_name)  # the u64 shared array of mbarriers


@_schema
class MbarrierInitAttrs(OpAttrs):
    shared: str = _field(tf.WORD, _is_name)
    count: int = _field(tf.INT, _count)  # the arrivals each phase waits for


class RegisterAction(enum.StrEnum):
    INC = "inc"
    DEC = "dec"


def _register_count(instance, field, value):
    if isinstance(value, bool) or not 24 <= value <= 256 or value % 8:
        _fail(instance, field, "a multiple of 8 from 24 to 256 (registers per thread)", value)


@_schema
class SetmaxnregAttrs(OpAttrs):
    action: RegisterAction = _field(tf.enum_codec(RegisterAction), converter=_to_enum(RegisterAction, "action"))
    count: int = _field(tf.INT, _register_count)


def _tma_box(instance, field, value):
    if not 1 <= len(value) <= 5 or any(isinstance(n, bool) or not 1 <= n <= 256 for n in value):
        _fail(instance, field, "1 to 5 extents of 1 to 256 elements (a tensor copy's box)", value)


def _tma_swizzle(instance, field, value):
    if value not in (0, 32, 64, 128) or isinstance(value, bool):
        _fail(instance, field, "0 (none), 32, 64 or 128 (the swizzle span in bytes)", value)


@_schema
class TensorMapAttrs(OpAttrs):
    """A tensor map's compile-time half: the tensor parameter it describes, the box one copy
    moves (outermost axis first) and the swizzle it writes shared memory in; the launch adds
    the tensor's address, shape and strides (``accy.runtime.tensor_maps``)."""

    tensor: str = _field(tf.WORD, _is_name)
    dtype: DType = _field(tf.DTYPE, _is_dtype)
    box: tuple[int, ...] = _field(tf.SHAPE, _tma_box)
    swizzle: int = _field(tf.INT, _tma_swizzle, default=0)


@_schema
class TmaLoadAttrs(OpAttrs):
    shared: str = _field(tf.WORD, _is_name)  # the shared array written
    barrier: str = _field(tf.WORD, _is_name)  # the mbarrier array its bytes complete on
    tensor: str = _field(tf.WORD, _is_name)
    dtype: DType = _field(tf.DTYPE, _is_dtype)
    box: tuple[int, ...] = _field(tf.SHAPE, _tma_box)
    swizzle: int = _field(tf.INT, _tma_swizzle, default=0)

    @property
    def map(self) -> TensorMapAttrs:
        return TensorMapAttrs(tensor=self.tensor, dtype=self.dtype, box=self.box, swizzle=self.swizzle)

    @property
    def bytes(self) -> int:
        n = self.dtype.itemsize
        for e in self.box:
            n *= e
        return n


class Major(enum.StrEnum):
    """Which axis of a warpgroup mma's operand is contiguous in its staged rows."""

    K = "k"  # rows along M (A) or N (B), each holding its K elements
    MN = "mn"  # rows along K, each holding N elements (B only; 16-bit types only)


def _swizzle(instance, field, value):
    if value not in (0, 32, 64, 128) or isinstance(value, bool):
        _fail(instance, field, "0 (registers), 32, 64 or 128 (the swizzle span in bytes)", value)


def _n_wide(instance, field, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 8 <= value <= 256 or value % 8:
        _fail(instance, field, "a multiple of 8 from 8 to 256", value)


def wgmma_n(kind: MmaKind, n: int) -> bool:
    """Has wgmma an m64nNk of ``kind`` (integer ones: N 8, 16, 24 or a multiple of 16)?"""
    return 8 <= n <= 256 and n % 8 == 0 and (kind is not MmaKind.S8 or n <= 24 or n % 16 == 0)


@_schema
class WgmmaAttrs(OpAttrs):
    """A warpgroup's ``wgmma.mma_async`` m64nNk: its operands' staged rows in the shared arrays
    ``a_shared`` and ``b_shared``.

    An operand in shared memory lies in rows of ``swizzle`` bytes (its contiguous axis cut into
    chunks of that width, ``chunk`` elements apart; each chunk's rows one after another), the
    16-byte units of row ``r`` XOR-swizzled by ``r``'s bits above the 8 rows' span (see
    :func:`accy.dsl.warpgroups.staged_offset`); ``a_swizzle`` 0: A is in registers."""

    kind: MmaKind = _field(tf.enum_codec(MmaKind), converter=_to_enum(MmaKind, "mma kind"))
    n: int = _field(tf.INT, _n_wide)
    a_shared: str = _field(tf.WORD, _is_name)  # (B's where A is in registers)
    b_shared: str = _field(tf.WORD, _is_name)
    a_swizzle: int = _field(tf.INT, _swizzle)
    a_chunk: int = _field(tf.INT, _min_blocks)
    b_major: Major = _field(tf.enum_codec(Major), converter=_to_enum(Major, "major"))
    b_swizzle: int = _field(tf.INT, _swizzle)
    b_chunk: int = _field(tf.INT, _min_blocks)


# -- the tile level --------------------------------------------------------------------------


def _shape(instance, field, value):
    if not isinstance(value, tuple) or not 1 <= len(value) <= MAX_TILE_RANK or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in value):
        _fail(instance, field, f"a tuple of 1 to {MAX_TILE_RANK} positive ints", value)


def _axis(instance, field, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _fail(instance, field, "a non-negative int", value)


@_schema
class ShapeAttrs(OpAttrs):
    """splat, broadcast and reshape: the result's shape."""

    shape: tuple[int, ...] = _field(tf.SHAPE, _shape)


def _perm(instance, field, value):
    if not isinstance(value, tuple) or sorted(value) != list(range(len(value))):
        _fail(instance, field, "a permutation of 0..rank-1", value)


@_schema
class PermAttrs(OpAttrs):
    perm: tuple[int, ...] = _field(tf.INTS, _perm)


def _ints(instance, field, value):
    if not isinstance(value, tuple) or not 1 <= len(value) <= MAX_TILE_RANK or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in value):
        _fail(instance, field, f"a tuple of 1 to {MAX_TILE_RANK} ints", value)


def _steps(instance, field, value):
    _ints(instance, field, value)
    if 0 in value:
        _fail(instance, field, "steps other than 0", value)


@_schema
class SliceAttrs(OpAttrs):
    """slice: result element ``i`` is the operand's ``starts + steps * i`` (per axis), for ``i``
    in ``shape``: a static box of the operand, strided, reversed where a step is negative."""

    starts: tuple[int, ...] = _field(tf.INTS, _ints)
    steps: tuple[int, ...] = _field(tf.INTS, _steps)
    shape: tuple[int, ...] = _field(tf.SHAPE, _shape)


@_schema
class CatAttrs(OpAttrs):
    """cat: the second operand follows the first along ``axis``."""

    axis: int = _field(tf.INT, _axis)


@_schema
class ArangeAttrs(OpAttrs):
    n: int = _field(tf.INT, _count)


@_schema
class ReduceAttrs(OpAttrs):
    op: Combine = _field(tf.enum_codec(Combine), converter=_to_enum(Combine, "reduction"))
    axis: int = _field(tf.INT, _axis)


@_schema
class ArgReduceAttrs(OpAttrs):
    op: Combine = _field(tf.enum_codec(Combine), converter=_to_enum(Combine, "arg reduction"))
    axis: int = _field(tf.INT, _axis)


@_schema
class DotAttrs(OpAttrs):
    precision: Precision = _field(tf.enum_codec(Precision), default=Precision.IEEE,
                                  converter=_to_enum(Precision, "dot precision"))


def _warps(instance, field, value):
    if isinstance(value, bool) or not isinstance(value, int) or value not in (1, 2, 4, 8, 16, 32):
        _fail(instance, field, "1, 2, 4, 8, 16 or 32", value)


def _stages(instance, field, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 8:
        _fail(instance, field, "an int from 1 to 8", value)


class Programs(enum.StrEnum):
    """How a GPU runs a tile launch's programs: a block each, or (``persistent``) one block per
    SM, each walking the programs in grouped order."""

    PER_BLOCK = "per_block"
    PERSISTENT = "persistent"


@_schema
class ForEachTileAttrs(OpAttrs):
    axes: tuple[str, ...] = attrs.field(validator=_names_of)  # written by the template's $grid
    warps: int = _field(tf.INT, _warps, default=4)
    # a GPU program's fold over tiles keeps the copies of num_stages - 1 trips ahead in flight
    num_stages: int = _field(tf.INT, _stages, default=2)
    programs: "Programs" = _field(tf.enum_codec(Programs), default=Programs.PER_BLOCK,
                                  converter=_to_enum(Programs, "programs"))


# -- operand classes ---------------------------------------------------------------------------


@attrs.frozen
class Operands:
    """Which types an operand may have, and how to say so."""

    accepts: Callable[[DType], bool]
    wanted: str


NUMERIC = Operands(lambda t: not t.is_bool, "a number type (an integer, index or float type)")
FLOAT = Operands(lambda t: t.is_float, "a float type (f16, bf16, f32, f64)")
INT = Operands(lambda t: t.is_int, "an integer type (i8..i64, u8..u64, index)")
BITS = Operands(lambda t: t.is_int or t.is_bool, "an integer type or bool")
ANY = Operands(lambda t: True, "any type")


def _hint(op: str, got: DType, operands: Operands) -> str:
    if operands is FLOAT and got.is_int:
        return f"; convert first: cast(value, f32).{op}()"
    if operands is FLOAT and got.is_bool:
        return "; use select(cond, 1.0, 0.0) to get a number"
    if operands is INT and got.is_float:
        return "; floats have floor(), trunc() and cast(value, i32)"
    return ""


def _check_class(op: str, types, operands: Operands) -> None:
    for t in types:
        if not operands.accepts(t):
            raise OpTypeError(f"operand is {t}; needs {operands.wanted}{_hint(op, t, operands)}")


def _check_same(types) -> DType:
    first = types[0]
    for t in types[1:]:
        if t != first:
            raise OpTypeError(f"operand types {first} and {t} differ; convert one with cast(value, {first})")
    return first


def elementwise(operands: Operands, result: DType | None = None):
    """All operands of one type from ``operands``; the result has that type (or ``result``)."""

    def infer(op: str, types, attrs_):
        t = _check_same(types)
        _check_class(op, types, operands)
        return (result or t,)

    return infer


def _select(op, types, attrs_):
    cond, a, b = types
    if not cond.is_bool:
        raise OpTypeError(f"condition is {cond}; select needs a bool condition (use a comparison)")
    if a != b:
        raise OpTypeError(f"branch types {a} and {b} differ; convert one with cast(value, {a})")
    return (a,)


def _cast(op, types, attrs_):
    return (attrs_.dtype,)


def _bitcast(op, types, attrs_):
    (t,), dst = types, attrs_.dtype
    t = t.dtype if isinstance(t, TileType) else t
    if t.is_bool or dst.is_bool or t.bits != dst.bits:
        raise OpTypeError(f"a bitcast keeps the bits: {t} ({t.bits} bits) and {dst} ({dst.bits} bits) must be "
                          "types of one width, bool excepted")
    return (dst,)


def _const(op, types, attrs_):
    return (attrs_.dtype,)


def _size(op, types, attrs_):
    return (index,)


def _index_operand(types, role: str = "index") -> None:
    if not types[0].is_index:
        hint = "; convert it with cast(value, index)" if types[0].is_int else ""
        raise OpTypeError(f"{role} is {types[0]}; buffer indices must be index{hint}")


def _load(op, types, attrs_):
    _index_operand(types)
    return (attrs_.dtype,) * attrs_.vec


def _store(op, types, attrs_):
    _index_operand(types)
    dtype = attrs_.dtype
    if len(types) != 1 + attrs_.vec:
        raise OpTypeError(f"a store of vec {attrs_.vec} takes {attrs_.vec} values, got {len(types) - 1}")
    for value in types[1:]:
        if value != dtype:
            raise OpTypeError(f"value is {value} but buffer '{attrs_.buffer}' holds {dtype}; "
                              f"convert it with cast(value, {dtype})")
    return ()


def _aligned(op, types, attrs_):
    return (boolean,)


def _fold(op, types, attrs_):
    start, stop, *inits = types
    for role, t in (("start", start), ("stop", stop)):
        if isinstance(t, TileType) or not t.is_index:
            raise OpTypeError(f"{role} is {t}; loop bounds must be index (cast(value, index))")
    return tuple(inits)


def _if(op, types, attrs_):
    (cond,) = types
    if isinstance(cond, TileType) or not cond.is_bool:
        raise OpTypeError(f"condition is {cond}; if_ needs a bool condition (use a comparison)")
    if attrs_.kind is IfKind.ROLES and attrs_.results:
        raise OpTypeError("a roles if_ yields no values (its sides run concurrently)")
    return tuple(attrs_.results)


def _for_each(op, types, attrs_):
    for t in types:
        if not t.is_index:
            raise OpTypeError(f"launch extent is {t}; extents must be index")
    return ()


def _no_results(op, types, attrs_):
    return ()


# -- tile type rules ---------------------------------------------------------------------------


def _tile(t, role: str) -> TileType:
    if not isinstance(t, TileType):
        raise OpTypeError(f"{role} is the scalar {t}; it must be a tile")
    return t


def _scalar(t, role: str) -> DType:
    if isinstance(t, TileType):
        raise OpTypeError(f"{role} is a {t}; it must be a scalar")
    return t


def _splat(op, types, attrs_):
    return (TileType(_scalar(types[0], "the value"), attrs_.shape),)


def _broadcast(op, types, attrs_):
    t = _tile(types[0], "the operand")
    if len(t.shape) != len(attrs_.shape) or any(a not in (1, b) for a, b in zip(t.shape, attrs_.shape)):
        raise OpTypeError(f"a tile of shape {t.shape} does not broadcast to {attrs_.shape} (each dimension must "
                          "match or be 1)")
    return (TileType(t.dtype, attrs_.shape),)


def _reshape(op, types, attrs_):
    t = _tile(types[0], "the operand")
    new = TileType(t.dtype, attrs_.shape)
    if new.size != t.size:
        raise OpTypeError(f"cannot reshape a tile of shape {t.shape} ({t.size} elements) to {attrs_.shape} "
                          f"({new.size} elements)")
    return (new,)


def _trans(op, types, attrs_):
    t = _tile(types[0], "the operand")
    if sorted(attrs_.perm) != list(range(t.rank)):
        raise OpTypeError(f"perm {attrs_.perm} is not a permutation of the {t.rank} axes of {t}")
    return (TileType(t.dtype, tuple(t.shape[k] for k in attrs_.perm)),)


def _slice(op, types, attrs_):
    t = _tile(types[0], "the operand")
    starts, steps, shape = attrs_.starts, attrs_.steps, attrs_.shape
    if not len(starts) == len(steps) == len(shape) == t.rank:
        raise OpTypeError(f"a slice of a rank-{t.rank} tile needs {t.rank} starts, steps and sizes, got "
                          f"{len(starts)}, {len(steps)} and {len(shape)}")
    for d, (n, start, step, size) in enumerate(zip(t.shape, starts, steps, shape)):
        last = start + step * (size - 1)
        if not (0 <= start < n and 0 <= last < n):
            raise OpTypeError(f"axis {d} of {t}: positions {start} to {last} (step {step}) are not all in [0, {n})")
    return (TileType(t.dtype, shape),)


def _cat(op, types, attrs_):
    a, b = _tile(types[0], "the first operand"), _tile(types[1], "the second operand")
    axis = attrs_.axis
    if a.dtype != b.dtype or a.rank != b.rank or axis >= a.rank or \
            any(m != n for d, (m, n) in enumerate(zip(a.shape, b.shape)) if d != axis):
        raise OpTypeError(f"cat along axis {axis} takes two tiles of one element type and rank whose other axes "
                          f"match, got {a} and {b}")
    return (TileType(a.dtype, a.shape[:axis] + (a.shape[axis] + b.shape[axis],) + a.shape[axis + 1:]),)


def _arange(op, types, attrs_):
    return (TileType(index, (attrs_.n,)),)


def _reduced(t: TileType, axis: int, dtype: DType):
    if axis >= t.rank:
        raise OpTypeError(f"axis {axis} is out of range for a {t} (rank {t.rank})")
    shape = t.shape[:axis] + t.shape[axis + 1:]
    return TileType(dtype, shape) if shape else dtype


def _check_combine(t: TileType, combine: Combine, allowed) -> None:
    if combine not in allowed:
        raise OpTypeError(f"{combine} is not one of {', '.join(allowed)} here")
    if COMBINES[combine].bits_only:
        if not (t.dtype.is_int or t.dtype.is_bool):
            raise OpTypeError(f"a {combine} reduction needs integer or bool elements, got {t.dtype}")
    elif t.dtype.is_bool:
        raise OpTypeError(f"a {combine} over bool elements: cast them to an integer type first")


def _reduce(op, types, attrs_):
    t = _tile(types[0], "the operand")
    _check_combine(t, attrs_.op, tuple(COMBINES))
    return (_reduced(t, attrs_.axis, t.dtype),)


def _argreduce(op, types, attrs_):
    t = _tile(types[0], "the operand")
    _check_combine(t, attrs_.op, tuple(c for c, rule in COMBINES.items() if rule.orders))
    return (_reduced(t, attrs_.axis, index),)


def _scan(op, types, attrs_):
    t = _tile(types[0], "the operand")
    _check_combine(t, attrs_.op, tuple(c for c, rule in COMBINES.items() if rule.scan))
    _reduced(t, attrs_.axis, t.dtype)  # checks the axis
    return (t,)


def dot_accumulator(dtype: DType) -> DType | None:
    """The type ``dot`` accumulates ``dtype`` inputs in, or None where it takes none."""
    if dtype.is_float:
        return dtype if dtype.bits >= 32 else DTYPES["f32"]
    if dtype.is_int and not dtype.is_index and dtype.bits == 8:
        return i32
    return None


def _dot(op, types, attrs_):
    a, b, acc = (_tile(t, role) for t, role in zip(types, ("a", "b", "the accumulator")))
    if a.rank != 2 or b.rank != 2:
        raise OpTypeError(f"dot multiplies 2-D tiles, got {a} and {b}")
    if a.shape[1] != b.shape[0]:
        raise OpTypeError(f"inner dimensions differ: a is {a.shape[0]}x{a.shape[1]} and b is "
                          f"{b.shape[0]}x{b.shape[1]} ({a.shape[1]} != {b.shape[0]})")
    if a.dtype != b.dtype:
        raise OpTypeError(f"a holds {a.dtype} and b {b.dtype}; cast one so both match")
    wanted = dot_accumulator(a.dtype)
    if wanted is None:
        raise OpTypeError(f"dot takes float or 8-bit integer inputs, got {a.dtype}")
    if acc.shape != (a.shape[0], b.shape[1]) or acc.dtype != wanted:
        raise OpTypeError(f"the accumulator must be a {TileType(wanted, (a.shape[0], b.shape[1]))} for {a.dtype} "
                          f"inputs, got a {acc}")
    if attrs_.precision is Precision.TF32 and a.dtype.name != "f32":
        raise OpTypeError(f"precision='tf32' is for f32 inputs, got {a.dtype}")
    return (acc,)


def _tile_access(types, attrs_, value_position: int | None) -> TileType:
    if getattr(attrs_, "vec", 1) != 1:
        raise OpTypeError(f"vec is {attrs_.vec}; tile accesses take 1 (the lowering chooses vector accesses)")
    offsets = _tile(types[0], "the offsets")
    if not offsets.dtype.is_index:
        raise OpTypeError(f"offsets are {offsets}; they must be index elements")
    mask = _tile(types[-1], "the mask")
    if not mask.dtype.is_bool or mask.shape != offsets.shape:
        raise OpTypeError(f"the mask is a {mask}; it must be a tile of bool shaped like the offsets {offsets.shape}")
    if value_position is not None:
        value = _tile(types[value_position], "the value")
        if value != TileType(attrs_.dtype, offsets.shape):
            raise OpTypeError(f"the value is a {value}, but buffer '{attrs_.buffer}' holds {attrs_.dtype} and the "
                              f"offsets are shaped {offsets.shape}")
    return offsets


def _tile_load(op, types, attrs_):
    offsets = _tile_access(types[:1] + types[2:], attrs_, None)  # (offsets, other, mask)
    if _scalar(types[1], "other") != attrs_.dtype:
        raise OpTypeError(f"other is {types[1]} but buffer '{attrs_.buffer}' holds {attrs_.dtype}")
    return (TileType(attrs_.dtype, offsets.shape),)


def _tile_store(op, types, attrs_):
    _tile_access(types, attrs_, 1)
    return ()


def _tile_atomic(op, types, attrs_):
    _tile_access(types, attrs_, 1)
    if attrs_.op not in (AtomicKind.ADD, AtomicKind.MAX, AtomicKind.MIN) or attrs_.dtype.name not in ATOMIC_DTYPES[
            attrs_.op.value]:
        raise OpTypeError(f"atomic {attrs_.op} on {attrs_.dtype} tiles is not supported")
    return ()


# which element types each atomic takes (PTX has no 8- or 16-bit integer atomics)
_ATOMIC_INTS = ("i32", "i64", "u32", "u64", "index")
ATOMIC_DTYPES = {
    "add": _ATOMIC_INTS + ("f16", "bf16", "f32", "f64"),
    "max": _ATOMIC_INTS + ("f32", "f64"),
    "min": _ATOMIC_INTS + ("f32", "f64"),
    "exchange": _ATOMIC_INTS + ("f32", "f64"),
    "cas": _ATOMIC_INTS + ("f32", "f64"),
}


def _atomic(op, types, attrs_):
    kind, dtype = attrs_.op, attrs_.dtype
    _index_operand(types)
    if dtype.name not in ATOMIC_DTYPES[kind]:
        raise OpTypeError(f"atomic_{kind} on {dtype} is not supported; it takes {', '.join(ATOMIC_DTYPES[kind])}")
    for role, t in zip(("value", "value") if kind != "cas" else ("compare", "value"), types[1:]):
        if t != dtype:
            raise OpTypeError(f"{role} is {t} but '{attrs_.buffer}' holds {dtype}; convert it with cast(value, {dtype})")
    return (dtype,)


def _shuffle(op, types, attrs_):
    value, lane = types
    if not lane.is_index:
        raise OpTypeError(f"the lane operand is {lane}; it must be index")
    return (value,)


def _mma(op, types, attrs_):
    kind = attrs_.kind
    if kind not in MMA_SYNC_KINDS:
        raise OpTypeError(f"mma {kind}: mma.sync takes {', '.join(MMA_SYNC_KINDS)} (fp8 runs widened to f16)")
    a, b, c = kind.a_count, kind.a_count // 2, 4
    if len(types) != a + b + c:
        raise OpTypeError(f"mma {kind} takes {a} A, {b} B and {c} C elements per lane, got {len(types)} operands")
    wanted = [kind.inputs] * (a + b) + [kind.accumulator] * c
    for position, (t, name) in enumerate(zip(types, wanted)):
        if not isinstance(t, DType) or t.name != name:
            raise OpTypeError(f"mma {kind}: operand {position} is {t}, expected {name}")
    return (types[-1],) * c


def _wgmma(op, types, attrs_):
    kind, n = attrs_.kind, attrs_.n
    if not wgmma_n(kind, n):
        raise OpTypeError(f"wgmma {kind} has no N of {n} (integer wgmma: 8, 16, 24 or a multiple of 16)")
    a = 1 if attrs_.a_swizzle else kind.a_count
    if len(types) != a + 1 + n // 2:
        raise OpTypeError(f"wgmma {kind} n {n} takes {'an A offset' if a == 1 else f'{a} A elements'}, a B offset "
                          f"and {n // 2} accumulators per thread, got {len(types)} operands")
    wanted = (["index"] if a == 1 else [kind.inputs] * a) + ["index"] + [kind.accumulator] * (n // 2)
    for position, (t, name) in enumerate(zip(types, wanted)):
        if not isinstance(t, DType) or t.name != name:
            raise OpTypeError(f"wgmma {kind}: operand {position} is {t}, expected {name}")
    if attrs_.b_major is Major.MN and not kind.transposes:
        raise OpTypeError(f"wgmma {kind}: a B with rows along K (mn-major) takes 16-bit types only")
    return tuple(types[-(n // 2):])


def _same_as_operands(op, types, attrs_):
    return tuple(types)


def _ldmatrix(op, types, attrs_):
    _index_operand(types)
    dtype = attrs_.dtype
    if dtype.bits not in (8, 16, 32) or dtype.is_bool:
        raise OpTypeError(f"ldmatrix moves 8-, 16- or 32-bit elements, got {dtype}")
    if attrs_.order is MatrixOrder.TRANS and dtype.bits != 16:
        raise OpTypeError(f"ldmatrix .trans moves 16-bit elements only, got {dtype}")
    return (dtype,) * (attrs_.count * 32 // dtype.bits)


def _async_copy(op, types, attrs_):
    for role, t in zip(("the shared index", "the buffer index", "the bytes to read"), types):
        if not t.is_index:
            raise OpTypeError(f"{role} is {t}; it must be index")
    if attrs_.bytes % attrs_.dtype.itemsize:
        raise OpTypeError(f"{attrs_.bytes} bytes is no whole number of {attrs_.dtype} elements")
    return ()


def _index_operands(what: str):
    def infer(op, types, attrs_):
        for k, t in enumerate(types):
            if not t.is_index:
                raise OpTypeError(f"{what}: operand {k} is {t}; it must be index")
        return ()
    return infer


def _tma_load(op, types, attrs_):
    _index_operands("tma_load")(op, types, attrs_)
    if len(types) != 2 + len(attrs_.box):
        raise OpTypeError(f"tma_load: {len(types) - 2} coordinates for a box of {len(attrs_.box)} axes")
    return ()


def _thread_index(op, types, attrs_):
    if len(types) != 1 or not types[0].is_index:
        raise OpTypeError("setmaxnreg passes one index (the thread's) through")
    return (types[0],)


def _tma_ready(op, types, attrs_):
    return (boolean,)


# -- constant folding on Python values (integer and bool types only) ---------------------------


def _floor_div(t, a, b):
    return None if b == 0 else a // b


def _mod(t, a, b):
    return None if b == 0 else a % b


def _shl(t, a, n):
    return 0 if not 0 <= n < t.bits else a << n


def _shr(t, a, n):
    if not 0 <= n < t.bits:
        return -1 if a < 0 else 0
    return a >> n  # constants of unsigned types are non-negative, so this is logical for them


def _not(t, a):
    return (not a) if t.is_bool else ~a


# -- the table ---------------------------------------------------------------------------------


class RegionKind(enum.Enum):
    """What an op's regions are, which fixes their arguments, count and ending."""

    LAUNCH = "launch"  # one region run once per thread; arguments: the indices; no yield
    LOOP = "loop"  # one region; arguments: the induction variable, the accumulators; yields them
    BRANCH = "branch"  # a then region and an optional else region; no arguments; yield the results


class Sync(enum.Enum):
    """Which threads an op makes wait for each other."""

    BLOCK = "block"  # every thread of the block (a barrier)
    WARP = "warp"  # the warp's lanes (a shuffle reads another lane's value)


GENERIC = " $0... : $type"  # a pointwise op's text: ``%2 = add %0, %1 : f32``


@attrs.frozen
class OpDef:
    name: str
    # (op name, operand types, attrs) -> result types; raises OpTypeError
    infer: Callable
    schema: type = NoAttrs  # the attribute class; its validators are the op's verify hook
    text: tf.TextFormat | None = None  # made from the template and the schema by _def
    arity: int | None = None  # value operands of a pointwise op; None for structural ops
    pure: bool = True  # no side effects: may be removed if unused, merged if equal
    commutative: bool = False
    # can fail at run time for these operand types (integer division by zero, a load out of
    # bounds): such an op must not run where the program would not have run it (no hoisting)
    can_fail: Callable[[DType], bool] = lambda t: False
    fold: Callable | None = None  # (operand type, *Python values) -> Python value, or None
    identity: int | None = None  # x op identity == x (either side when commutative), integers
    absorbing: int | None = None  # x op absorbing == absorbing, integers
    reduction: str | None = None  # the name a reduction over this op goes by ("sum", "max")
    methods: tuple[str, ...] = ()  # builder and value method names; the first is the main one
    math: bool = False  # also a function of accy.math
    numpy: str | None = None  # the NumPy ufunc that records this op on traced values (np.arctan)
    doc: str = ""
    # computed to within documented ulps, not bit for bit: backends may differ in the last bits
    inexact: bool = False
    constant: bool = False  # its result is its attribute ``value``, known when tracing
    reads: bool = False  # reads the memory its attributes name (buffer, space)
    writes: bool = False  # writes it (an output of the kernel when the space is global)
    regions: RegionKind | None = None
    terminator: bool = False  # ends a loop or branch region, handing its operands back
    in_blocks: bool = False  # legal only inside a block launch (for_each_block)
    thread_blocks: bool = False  # a launch of blocks of cooperating threads
    declares_shared: bool = False  # declares a block's shared array (at the top of the block body)
    synchronises: Sync | None = None
    own_result: bool = False  # each thread gets its own result, whatever its operands (uniformity)
    tiles: bool = False  # a tile-level op: it takes or makes tiles (for_each_tile launches only)
    tile_launch: bool = False  # launches programs over a grid, one per point (for_each_tile)
    # only the NVPTX lowering has it (and the interpreter, its reference): tensor cores and
    # asynchronous copies (sm_80+), which the tile distribution emits for NVPTX
    nvptx_only: bool = False
    verify: Callable | None = None  # (op) -> a message when the op's operands and attrs disagree

    @property
    def pointwise(self) -> bool:
        return self.arity is not None

    @property
    def launch(self) -> bool:
        return self.regions is RegionKind.LAUNCH

    @property
    def memory(self) -> bool:
        """Accesses memory (a load, store or atomic)."""
        return self.reads or self.writes

    @property
    def names_buffer(self) -> bool:
        """Its attributes name a buffer (or shared array): memory ops and ``size``."""
        return "buffer" in self.schema._names

    def attributes(self, **values):
        """This op's attribute schema instance (``OPS["load"].attributes(buffer=..., ...)``)."""
        return self.schema(**values)


def _def(name, infer, schema=NoAttrs, text=GENERIC, **kw) -> OpDef:
    return OpDef(name, infer, schema, tf.TextFormat(text, schema), **kw)


def _pointwise(name, arity, operands, *, result=None, methods=None, **kw) -> OpDef:
    return _def(name, elementwise(operands, result), arity=arity, methods=methods or (name,), **kw)


_NUM, _FLT, _INT, _BITS = NUMERIC, FLOAT, INT, BITS


def _math(name, doc, arity=1, inexact=True, numpy=None):
    return _pointwise(name, arity, _FLT, math=True, doc=doc, inexact=inexact, numpy=numpy)


def _exact(name, doc, arity=1):
    return _math(name, doc, arity, inexact=False)


_int_only = lambda t: t.is_int  # noqa: E731
_always = lambda t: True  # noqa: E731


def _launch_axes(op) -> str | None:
    if len(op.attrs.axes) != len(op.operands):
        return f"{len(op.attrs.axes)} axis names for {len(op.operands)} extents"
    return None


_MEMORY = " {?{space} }%{buffer}"  # ``%x``, or ``shared %tile``

OPS: dict[str, OpDef] = {
    d.name: d
    for d in (
        # structural ops: attributes and regions, spelled by hand-written builder methods
        _def("const", _const, ConstAttrs, " {value} : {dtype}", constant=True),
        _def("size", _size, SizeAttrs, " %{buffer} : $type"),  # a buffer's element count
        _def("cast", _cast, CastAttrs, " $0 : $0:type -> {dtype}", fold=lambda t, a: a),
        # the same bits read as another type of their width (f32 <-> i32/u32, f16/bf16 <-> i16, ...)
        _def("bitcast", _bitcast, CastAttrs, " $0 : $0:type -> {dtype}"),
        _def("select", _select, arity=3, methods=("select", "where"), math=True,
             fold=lambda t, c, a, b: a if c else b,
             doc="if_true where the condition holds, else if_false; both are evaluated"),
        # pure unless the kernel stores to its buffer (see passes); fails out of bounds
        _def("load", _load, LoadAttrs, _MEMORY + "[$0] : {dtype}{? vec {vec}}{? bounds {bounds}}", reads=True, can_fail=_always),
        _def("store", _store, StoreAttrs, _MEMORY + "[$0] = $1... : {dtype}{? vec {vec}}{? bounds {bounds}}", pure=False, writes=True),
        # is the buffer's first element's address a multiple of ``bytes``? (vector accesses' guard)
        _def("aligned", _aligned, AlignedAttrs, " %{buffer} {bytes}"),
        _def("fold", _fold, FoldAttrs, (" $0 to $1 step {step} init($2...) -> ($types) {", "^($args):"),
             regions=RegionKind.LOOP),  # pure unless its body stores
        _def("if", _if, IfAttrs, " $0{? {kind}}{? -> ({results})} {", regions=RegionKind.BRANCH),  # likewise
        _def("for_each", _for_each, ForEachAttrs, " ($grid) {", pure=False, regions=RegionKind.LAUNCH,
             verify=_launch_axes),
        _def("yield", _no_results, NoAttrs, "{? $0...}", pure=False, terminator=True),
        # the block level: blocks of cooperating threads, shared memory, barriers, atomics, warps
        _def("for_each_block", _for_each, ForEachBlockAttrs,
             " ($grid) threads ($threads){? as {unit}}{? min_blocks {min_blocks}} {", pure=False,
             regions=RegionKind.LAUNCH, thread_blocks=True, verify=_launch_axes),
        # declares a per-block array (name, dtype, count)
        _def("shared", _no_results, SharedAttrs, " %{name} : {dtype}[{count}]{? align {align}}", pure=False, in_blocks=True,
             declares_shared=True),
        _def("barrier", _no_results, BarrierAttrs, "{? threads {threads}}", pure=False, in_blocks=True,
             synchronises=Sync.BLOCK),
        # returns the element's old value
        _def("atomic", _atomic, AtomicAttrs, " {op}" + _MEMORY + "[$0], $1... : {dtype}", pure=False, reads=True,
             writes=True, own_result=True),
        # reads another lane: never moved
        _def("shuffle", _shuffle, ShuffleAttrs, " {mode} $0, $1 : $type", can_fail=_always, in_blocks=True,
             synchronises=Sync.WARP, own_result=True),
        # NVPTX only: tensor cores (a warp's m16n8k matrix product, and its 8x8 matrices' loads
        # from shared memory; each lane holds its elements of the fragments)
        _def("mma", _mma, MmaAttrs, " {kind} $0... : $types", can_fail=_always, in_blocks=True,
             synchronises=Sync.WARP, own_result=True, nvptx_only=True),
        _def("ldmatrix", _ldmatrix, LdmatrixAttrs, " {space} %{buffer}[$0] x{count}{? {order}} : {dtype}", reads=True,
             can_fail=_always, in_blocks=True, synchronises=Sync.WARP, own_result=True, nvptx_only=True),
        # NVPTX only: asynchronous copies (cp.async): a thread's copy of ``bytes`` from a buffer
        # into a shared array, of which it reads the first $2 and fills the rest with zeros; it
        # lands once the thread has waited for its group (commit closes one; wait leaves at most
        # ``pending`` of the thread's groups in flight), and other threads see it after a barrier
        _def("async_copy", _async_copy, AsyncCopyAttrs, " %{shared}[$0] = %{buffer}[$1] bytes {bytes} valid $2 : {dtype}{? bounds {bounds}}",
             pure=False, reads=True, can_fail=_always, in_blocks=True, nvptx_only=True),
        _def("async_commit", _no_results, NoAttrs, "", pure=False, in_blocks=True, nvptx_only=True),
        _def("async_wait", _no_results, AsyncWaitAttrs, " {pending}", pure=False, in_blocks=True, nvptx_only=True),
        # NVPTX at sm_90a only: a warpgroup's (4 warps') tensor-core product from shared memory,
        # in flight until a wait; its accumulators pass through the wait (their values are
        # final only after one that leaves none of its group pending); fence before the first
        # after the accumulators were written, commit closes a group; shared writes meet the
        # async proxy (the mma's reads) through fence_proxy_async
        _def("wgmma", _wgmma, WgmmaAttrs, " {kind} n {n} a %{a_shared} {a_swizzle} {a_chunk} b %{b_shared} {b_major} "
             "{b_swizzle} {b_chunk} $0... : $types", pure=False, can_fail=_always, in_blocks=True,
             synchronises=Sync.WARP, own_result=True, nvptx_only=True),
        _def("wgmma_fence", _no_results, NoAttrs, "", pure=False, in_blocks=True, nvptx_only=True),
        _def("wgmma_commit", _no_results, NoAttrs, "", pure=False, in_blocks=True, nvptx_only=True),
        _def("wgmma_wait", _same_as_operands, AsyncWaitAttrs, " {pending} $0... : $types", pure=False,
             in_blocks=True, nvptx_only=True),
        _def("fence_proxy_async", _no_results, NoAttrs, "", pure=False, in_blocks=True, nvptx_only=True),
        # NVPTX at sm_90a only: the tensor memory accelerator.  An mbarrier (an element of a u64
        # shared array) completes a phase when its arrivals and the bytes it expects have come;
        # tma_load copies a box of a tensor parameter at coordinates $2... (outermost axis first;
        # past the tensor's edges, zeros) into a shared array, in the map's swizzle, and completes
        # its bytes on mbarrier $1; tma_ready says whether the launch could describe the tensor
        # to the hardware (else the lowering's other path copies it)
        _def("mbarrier_init", _index_operands("mbarrier_init"), MbarrierInitAttrs, " %{shared}[$0] count {count}",
             pure=False, in_blocks=True, nvptx_only=True),
        _def("mbarrier_arrive", _index_operands("mbarrier_arrive"), MbarrierAttrs, " %{shared}[$0] expect $1",
             pure=False, in_blocks=True, nvptx_only=True),
        _def("mbarrier_wait", _index_operands("mbarrier_wait"), MbarrierAttrs, " %{shared}[$0] parity $1",
             pure=False, in_blocks=True, nvptx_only=True),
        _def("tma_load", _tma_load, TmaLoadAttrs, " %{shared}[$0] = %{tensor}[$2...] box {box} swizzle {swizzle} "
             "barrier %{barrier}[$1] : {dtype}", pure=False, in_blocks=True, nvptx_only=True),
        # a warpgroup's registers per thread moved to or from its block's pool (all four warps
        # together; the reference has no registers: nothing to do there); the thread's index
        # passes through it, so what the code after computes from it is not computed before
        _def("setmaxnreg", _thread_index, SetmaxnregAttrs, " {action} {count} $0 : $type", pure=False,
             in_blocks=True, nvptx_only=True),
        _def("tma_ready", _tma_ready, TensorMapAttrs, " %{tensor} box {box} swizzle {swizzle} : {dtype}",
             nvptx_only=True),
        # the tile level: programs over a grid, each computing on whole tiles
        _def("for_each_tile", _for_each, ForEachTileAttrs, " ($grid) warps {warps}{? stages {num_stages}}{? {programs}} {",
             pure=False,
             regions=RegionKind.LAUNCH, verify=_launch_axes, tiles=True, tile_launch=True),
        _def("splat", _splat, ShapeAttrs, " $0 to {shape} : $0:type", tiles=True),
        _def("broadcast", _broadcast, ShapeAttrs, " $0 to {shape} : $0:type", tiles=True),
        _def("reshape", _reshape, ShapeAttrs, " $0 to {shape} : $0:type", tiles=True),
        _def("trans", _trans, PermAttrs, " $0 perm {perm} : $0:type", tiles=True),
        _def("slice", _slice, SliceAttrs, " $0 start {starts} step {steps} to {shape} : $0:type", tiles=True),
        _def("cat", _cat, CatAttrs, " $0, $1 axis {axis} : $0:type, $1:type", tiles=True),
        _def("arange", _arange, ArangeAttrs, " {n}", tiles=True),
        _def("reduce", _reduce, ReduceAttrs, " {op} $0 axis {axis} : $0:type -> $type", tiles=True),
        _def("argreduce", _argreduce, ArgReduceAttrs, " {op} $0 axis {axis} : $0:type -> $type", tiles=True),
        _def("scan", _scan, ReduceAttrs, " {op} $0 axis {axis} : $0:type", tiles=True),
        _def("dot", _dot, DotAttrs, " $0, $1, $2{? precision {precision}} : $0:type, $2:type", tiles=True),
        # element e: mask[e] ? buffer[offsets[e]] : other; masked-off elements are never touched
        _def("tile_load", _tile_load, LoadAttrs, _MEMORY + "[$0] else $1 mask $2 : {dtype}{? vec {vec}}{? bounds {bounds}}", reads=True,
             can_fail=_always, tiles=True),
        _def("tile_store", _tile_store, StoreAttrs, _MEMORY + "[$0] = $1 mask $2 : {dtype}{? vec {vec}}{? bounds {bounds}}", pure=False,
             writes=True, tiles=True),
        _def("tile_atomic", _tile_atomic, AtomicAttrs, " {op}" + _MEMORY + "[$0], $1 mask $2 : {dtype}", pure=False,
             reads=True, writes=True, tiles=True),
        # arithmetic
        _pointwise("add", 2, _NUM, commutative=True, fold=lambda t, a, b: a + b, identity=0, reduction="sum"),
        _pointwise("sub", 2, _NUM, fold=lambda t, a, b: a - b),
        _pointwise("mul", 2, _NUM, commutative=True, fold=lambda t, a, b: a * b, identity=1, absorbing=0,
                   reduction="prod"),
        _pointwise("div", 2, _NUM, fold=_floor_div, can_fail=_int_only, identity=1,
                   doc="IEEE division for floats; floor division (Python's //) for integers"),
        _pointwise("mod", 2, _NUM, fold=_mod, can_fail=_int_only, methods=("mod", "rem"),
                   doc="remainder with the sign of the divisor, as Python's %"),
        _pointwise("max", 2, _NUM, commutative=True, fold=lambda t, a, b: max(a, b), reduction="max", math=True,
                   doc="NaN propagates; -0.0 < +0.0"),
        _pointwise("min", 2, _NUM, commutative=True, fold=lambda t, a, b: min(a, b), reduction="min", math=True,
                   doc="NaN propagates; -0.0 < +0.0"),
        _pointwise("neg", 1, _NUM, fold=lambda t, a: -a),
        _pointwise("abs", 1, _NUM, fold=lambda t, a: abs(a), math=True,
                   doc="integers wrap: abs of the most negative value is itself"),
        _pointwise("fma", 3, _FLT, math=True, doc="a * b + c, rounded once"),
        _math("pow", "C's pow (powf), with its special cases", arity=2),
        _exact("copysign", "the magnitude of a with the sign of b", arity=2),
        _exact("flush_subnormal", "x, or a zero of its sign where x is subnormal (its magnitude below its type's "
               "smallest normal number; +0 in a type without -0): a flush-to-zero unit's reading of it"),
        # math functions (floats; f16 and bf16 compute in f32 and round once)
        _math("exp", "e**x", numpy="exp"),
        _math("exp2", "2**x", numpy="exp2"),
        _math("expm1", "e**x - 1, accurate near 0", numpy="expm1"),
        _math("log", "natural logarithm; log(-1) is NaN, log(0) is -inf", numpy="log"),
        _math("log2", "base-2 logarithm", numpy="log2"),
        _math("log1p", "log(1 + x), accurate near 0", numpy="log1p"),
        _exact("sqrt", "square root; sqrt(-1) is NaN"),
        _math("rsqrt", "1 / sqrt(x)"),
        _math("erf", "the error function"),
        _math("tanh", "hyperbolic tangent", numpy="tanh"),
        _math("sigmoid", "1 / (1 + exp(-x))"),
        _math("sin", "sine (radians)", numpy="sin"),
        _math("cos", "cosine (radians)", numpy="cos"),
        _math("atan", "arctangent (radians, in [-pi/2, pi/2])", numpy="arctan"),
        _math("atan2", "atan2(y, x): the angle of the point (x, y), in [-pi, pi], with C's special cases "
                       "(NumPy's arctan2)", arity=2, numpy="arctan2"),
        _exact("floor", "round toward -inf"),
        _exact("ceil", "round toward +inf"),
        _exact("round", "round to nearest, ties to even (as Python's round and NumPy's rint)"),
        _exact("trunc", "round toward zero"),
        _pointwise("isnan", 1, _FLT, result=boolean, math=True),
        _pointwise("isinf", 1, _FLT, result=boolean, math=True),
        # comparisons: ordered for floats (false with a NaN), except ne
        _pointwise("lt", 2, _NUM, result=boolean, fold=lambda t, a, b: a < b),
        _pointwise("le", 2, _NUM, result=boolean, fold=lambda t, a, b: a <= b),
        _pointwise("gt", 2, _NUM, result=boolean, fold=lambda t, a, b: a > b),
        _pointwise("ge", 2, _NUM, result=boolean, fold=lambda t, a, b: a >= b),
        _pointwise("eq", 2, ANY, result=boolean, commutative=True, fold=lambda t, a, b: a == b),
        _pointwise("ne", 2, ANY, result=boolean, commutative=True, fold=lambda t, a, b: a != b,
                   doc="true when either operand is NaN"),
        # bits: logical on bool, bitwise on integers
        _pointwise("and", 2, _BITS, commutative=True, fold=lambda t, a, b: a & b, absorbing=0, reduction="and",
                   methods=("logical_and", "bitwise_and")),
        _pointwise("or", 2, _BITS, commutative=True, fold=lambda t, a, b: a | b, identity=0, reduction="or",
                   methods=("logical_or", "bitwise_or")),
        _pointwise("xor", 2, _BITS, commutative=True, fold=lambda t, a, b: a ^ b, identity=0, reduction="xor",
                   methods=("logical_xor", "bitwise_xor")),
        _pointwise("not", 1, _BITS, fold=_not, methods=("logical_not", "bitwise_not", "invert")),
        _pointwise("shl", 2, _INT, fold=_shl, methods=("shl", "left_shift"),
                   doc="a shift count outside [0, bits) gives 0"),
        _pointwise("shr", 2, _INT, fold=_shr, methods=("shr", "right_shift"),
                   doc="arithmetic for signed types, logical for unsigned; a count outside [0, bits) "
                       "gives 0 (or -1 for a negative signed value)"),
    )
}

# the SIMT level's ops, which every backend lowers; the tile level's, which the numpy backend runs
# and the tile distribution (accy.lowering.distribute) rewrites into SIMT ops for the others
TILE_OPS = frozenset(name for name, d in OPS.items() if d.tiles)
NVPTX_OPS = frozenset(name for name, d in OPS.items() if d.nvptx_only)
SIMT_OPS = frozenset(OPS) - TILE_OPS - NVPTX_OPS

# the ops a fold can accumulate with, by reduction name ("sum" -> add)
REDUCTIONS: dict[str, str] = {d.reduction: d.name for d in OPS.values() if d.reduction}


# structural ops that carry tiles through (loop-carried values, branch results) as they carry scalars
_CARRY_TILES = ("fold", "if", "yield")


def infer(opcode: str, types, attrs_) -> tuple:
    """The result types of ``opcode`` on operands of ``types``; raises OpTypeError.

    A pointwise op (and ``cast``) takes tiles of one shape as it takes scalars: its rule runs
    on the element types and the result is a tile of that shape (the builder broadcasts
    before it records)."""
    opdef, types = OPS[opcode], tuple(types)
    tiles = [t for t in types if isinstance(t, TileType)]
    if tiles and (opdef.pointwise or opcode in ("cast", "bitcast")):
        shapes = {t.shape for t in tiles}
        if len(shapes) > 1 or len(tiles) != len(types):
            raise OpTypeError(f"operands {', '.join(map(str, types))} differ in shape; broadcast them first")
        (shape,) = shapes
        return tuple(TileType(r, shape) for r in opdef.infer(opcode, tuple(t.dtype for t in types), attrs_))
    if tiles and not (opdef.tiles or opcode in _CARRY_TILES):
        raise OpTypeError(f"{opcode} takes scalars, got a {tiles[0]}")
    return tuple(opdef.infer(opcode, types, attrs_))
