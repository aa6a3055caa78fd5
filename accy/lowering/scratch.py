"""The shared-memory scratch of a distributed tile program (:mod:`accy.lowering.distribute`):
one array per element type, sized to its largest use, reused behind barriers."""

from __future__ import annotations

from ..dsl.ops import SharedAttrs
from ..dsl.schedule import Limits
from ..dsl.traced import SharedArray, Traced
from ..dsl.types import DType, TileType, boolean, u8
from ..errors import TraceError
from ..dsl.ir import Op
from .rebuild import Part, Rebuild

SHARED_LIMIT = Limits.default.max_shared_bytes


def pitch(elements: int, itemsize: int) -> int:
    """A shared row's length in elements: an odd number of 16-byte units, so the 8 rows an
    ldmatrix reads (or 8 consecutive rows at one column) fall in distinct banks."""
    units = -(-elements * itemsize // 16)
    return (units + (units % 2 == 0)) * 16 // itemsize


class Scratch(Part):
    """The program's scratch arrays (``pool``: element type -> [array, its ``shared`` op]) and
    the barriers around their reuse: ``dirty`` holds where a thread may have read the scratch
    since the last barrier, so a write must wait for every thread first."""

    def __init__(self, core: Rebuild):
        super().__init__(core)
        self.pool: dict[DType, list] = {}
        self.aligned: dict[DType, int] = {}  # element type -> its array's alignment past 16 bytes
        self.dirty = False

    def scratch(self, dtype: DType, count: int, op: Op, align: int = 16) -> SharedArray:
        dtype = u8 if dtype.is_bool else dtype
        entry = self.pool.get(dtype)
        needed = self._needed(dtype, count)
        if needed > SHARED_LIMIT:
            what = f"{op.opcode} of a {', '.join(str(v.type) for v in op.operands if isinstance(v.type, TileType))}"
            raise TraceError(f"{what}: its program needs {needed} bytes of shared memory on a GPU ({count} {dtype} "
                             f"here), over the limit of {SHARED_LIMIT} bytes (48 KiB) per program; use smaller tiles",
                             op.location)
        if entry is None:
            entry = self.pool[dtype] = list(self.core.launch.declare_scratch(dtype, count, "tile"))
        entry[0].count = max(entry[0].count, count)
        if align > self.aligned.get(dtype, 16):
            self.aligned[dtype] = align
        return entry[0]

    def _needed(self, dtype: DType, count: int) -> int:
        """The scratch's bytes once ``dtype``'s array (bool as u8) holds ``count`` elements."""
        entry = self.pool.get(dtype)
        total = sum(a.count * a.dtype.itemsize for a, _ in self.pool.values() if a.dtype != dtype)
        return total + max(count, entry[0].count if entry else 0) * dtype.itemsize

    def fits(self, dtype: DType, count: int) -> bool:
        """Would :meth:`scratch` of ``count`` ``dtype`` elements stay within the limit?"""
        return self._needed(u8 if dtype.is_bool else dtype, count) <= SHARED_LIMIT

    def bytes(self) -> int:
        """What the scratch takes now."""
        return sum(a.count * a.dtype.itemsize for a, _ in self.pool.values())

    def checkpoint(self) -> dict:
        """The arrays' sizes now, to :meth:`roll_back` to."""
        return {dtype: entry[0].count for dtype, entry in self.pool.items()}

    def roll_back(self, sizes: dict) -> None:
        """The scratch as it was at ``sizes`` (a :meth:`checkpoint`): arrays declared since are dropped."""
        for dtype in list(self.pool):
            if dtype in sizes:
                self.pool[dtype][0].count = sizes[dtype]
            else:
                declared = self.pool.pop(dtype)[1]
                self.core.launch.block.ops.remove(declared)

    def declare_sizes(self) -> None:
        """Each array declared at the size of its largest use (known once the program is built)."""
        for array, shared in self.pool.values():
            shared.attrs = SharedAttrs(name=array.name, dtype=array.dtype, count=array.count,
                                       align=self.aligned.get(array.dtype, 16))

    def before_write(self) -> None:
        if self.dirty:  # every thread has read the scratch's last contents before it changes
            self.b.barrier()
            self.dirty = False

    def written(self) -> None:
        self.b.barrier()

    def store(self, array: SharedArray, value, at) -> None:
        if value.type.is_bool:
            value = self.b.cast(value, u8)
        self.b.store(array, value, at)

    def load(self, array: SharedArray, at, dtype: DType) -> Traced:
        value = self.b.load(array, at)
        self.dirty = True
        return self.b.cast(value, boolean) if dtype.is_bool else value

    def scalar_to_all(self, value: Traced, op: Op) -> Traced:
        """``value`` as thread 0 holds it, in every thread, read from shared memory at a fixed
        place (so the uniformity analysis sees a value every thread shares)."""
        array = self.scratch(value.type, 1, op)
        self.before_write()
        self.b.if_(self.b.eq(self.tid, 0),
                   lambda inner: self.core.within(inner, lambda: self.store(array, value, 0)))
        self.written()
        return self.load(array, 0, value.type)
