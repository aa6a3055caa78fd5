"""Launch geometry: how logical threads map onto GPU blocks, and device limits."""

from __future__ import annotations

import math
from typing import Sequence

import attrs

from ..errors import LaunchError

_SLOTS = ("x", "y", "z")


def positive_int(instance, attribute, value):
    """attrs validator: a positive Python int (a LaunchError, which is a ValueError, otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LaunchError(f"{type(instance).__name__}: {attribute.name} must be a positive int, got {value!r}")


@attrs.frozen
class Launch:
    """A concrete launch: blocks per grid dimension, threads per block dimension and,
    where known, the logical extents (x first) the launch covers."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    extents: tuple[int, ...] = ()

    @property
    def threadgroup(self) -> tuple[int, int, int]:
        """The seed's name for ``block``."""
        return self.block

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)

    @property
    def lanes(self) -> int:
        """Logical threads: the product of the extents."""
        return math.prod(self.extents)


@attrs.frozen
class ThreadBlocks:
    """Threads per block along x, y, z; logical axis i maps to GPU dimension i."""

    x: int = attrs.field(default=1, validator=positive_int)
    y: int = attrs.field(default=1, validator=positive_int)
    z: int = attrs.field(default=1, validator=positive_int)

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.x, self.y, self.z)

    def launch(self, extents: Sequence[int]) -> Launch:
        """The launch covering logical ``extents`` (x first) with blocks of this shape."""
        padded = list(extents) + [1] * (3 - len(extents))
        grid = tuple(-(-e // t) for e, t in zip(padded, self.block))
        return Launch(grid=grid, block=self.block, extents=tuple(extents))


def thread_blocks(x: int = 1, y: int = 1, z: int = 1) -> ThreadBlocks:
    """``schedule.thread_blocks(x=, y=, z=)``: the threads of one block per dimension."""
    return ThreadBlocks(x, y, z)


threadBlocks = thread_blocks


def axes_on_x(rank: int) -> int:
    """How many of a block or tile launch's ``rank`` grid axes the GPU's x dimension carries.
    Up to three axes, one: axis i is dimension i.  Past three, the first ``rank - 2``, folded
    into one number with the first fastest (x's limit, 2^31 - 1, is the largest), and the last
    two are y and z: blocks are still numbered with axis 0 fastest."""
    return 1 if rank <= 3 else rank - 2


def gpu_grid(extents: Sequence[int]) -> tuple[int, int, int]:
    """The GPU grid (x, y, z) of a block or tile launch over ``extents`` (see :func:`axes_on_x`)."""
    on_x = axes_on_x(len(extents))
    dimensions = (math.prod(extents[:on_x]),) + tuple(extents[on_x:])
    return dimensions + (1,) * (3 - len(dimensions))


DEFAULT_THREADS = {1: ThreadBlocks(256), 2: ThreadBlocks(16, 16), 3: ThreadBlocks(8, 8, 4)}


@attrs.frozen
class Limits:
    """What a device accepts. ``Limits.default`` is CUDA's; ``Limits.testing`` a small device."""

    max_threads_per_block: int
    max_block: tuple[int, int, int]
    max_grid: tuple[int, int, int]
    max_shared_bytes: int = 48 * 1024

    def check(self, launch: Launch) -> Launch:
        if launch.threads_per_block > self.max_threads_per_block:
            raise LaunchError(
                f"block {launch.block} has {launch.threads_per_block} threads, over the limit of "
                f"{self.max_threads_per_block} threads per block"
            )
        for slot, got, limit in zip(_SLOTS, launch.block, self.max_block):
            if got > limit:
                raise LaunchError(f"block {slot} dimension {got} exceeds the limit of {limit}")
        for slot, got, limit in zip(_SLOTS, launch.grid, self.max_grid):
            if got > limit:
                raise LaunchError(f"grid {slot} dimension {got} exceeds the limit of {limit} blocks")
        return launch


Limits.default = Limits(1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535))
Limits.testing = Limits(256, (256, 256, 64), (65535, 65535, 65535))
