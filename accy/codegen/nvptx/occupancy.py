"""Theoretical occupancy: how many blocks of a kernel fit on one streaming multiprocessor,
from its registers and shared memory (``ptxas -v``) and the CUDA occupancy rules."""

from __future__ import annotations

import math

import attrs

from .toolchain import Resources


@attrs.frozen
class Multiprocessor:
    """One SM's limits (CUDA's occupancy calculator; the per-architecture tables)."""

    name: str
    max_threads: int = 2048
    max_blocks: int = 32
    max_warps: int = 64
    registers: int = 65536
    register_unit: int = 256  # registers are allocated per warp, in units of this many
    shared_bytes: int = 167936  # the most a kernel can have of the SM's shared memory
    shared_unit: int = 128
    shared_reserved: int = 1024  # per block, taken by the system


ARCHITECTURES = {
    "sm_80": Multiprocessor("A100 (sm_80)", shared_bytes=167936),
    "sm_86": Multiprocessor("sm_86", max_threads=1536, max_blocks=16, max_warps=48, shared_bytes=102400),
    "sm_89": Multiprocessor("sm_89", max_threads=1536, max_blocks=24, max_warps=48, shared_bytes=102400),
    "sm_90": Multiprocessor("H100/H200 (sm_90)", shared_bytes=233472),
}


@attrs.frozen
class Occupancy:
    arch: str
    blocks_per_sm: int
    warps_per_sm: int
    fraction: float  # resident warps / the SM's maximum
    limiter: str  # what bounds it: "registers", "shared memory", "warps", "blocks"


def occupancy(resources: Resources, threads_per_block: int) -> Occupancy:
    """The theoretical occupancy of a kernel using ``resources`` with blocks of ``threads_per_block``."""
    sm = ARCHITECTURES.get(resources.arch.rstrip("a"))  # sm_90a: sm_90's SM
    if sm is None:
        raise ValueError(f"no occupancy table for {resources.arch}; known: {', '.join(ARCHITECTURES)}")
    warps = math.ceil(threads_per_block / 32)
    per_warp = math.ceil(max(resources.registers, 1) * 32 / sm.register_unit) * sm.register_unit
    shared = resources.shared_bytes + sm.shared_reserved
    shared = math.ceil(shared / sm.shared_unit) * sm.shared_unit
    limits = {
        "warps": sm.max_warps // warps,
        "blocks": sm.max_blocks,
        "registers": (sm.registers // per_warp) // warps,
        "shared memory": sm.shared_bytes // shared,
    }
    limiter = min(limits, key=lambda k: limits[k])
    blocks = max(limits[limiter], 0)
    return Occupancy(resources.arch, blocks, blocks * warps, blocks * warps / sm.max_warps, limiter)
