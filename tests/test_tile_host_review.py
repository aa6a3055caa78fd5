"""Review of the host's shape guards, fusion and tails (issue 31): inputs where the llvm
backend disagreed with the numpy backend, each the smallest kernel that showed it."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy import axis, f32
from accy.codegen.host.tiles import TileHostLowering
from accy.targets import Target

BLOCK = 32


@accy.kernel(y=accy.tensor(f32, 2), x=accy.tensor(f32, 2))
def load_then_overwrite(k, p):
    """A row of x loaded, x's row overwritten, then the loaded row stored to y."""
    R, C = p.x.shape

    @k.for_each_tile(grid=axis("row", R))
    def program(t, pid):
        row = pid["row"]
        cols = t.arange(BLOCK)
        mask = cols < C
        x = p.x.load((row, cols), mask=mask, other=0.0)
        p.x.store((row, cols), t.full((BLOCK,), 7.0), mask=mask)
        p.y.store((row, cols), x, mask=mask)


@pytest.mark.parametrize("options", [{"backend": "numpy"}, {"backend": "llvm"},
                                     {"backend": "llvm", "checks": False}], ids=["numpy", "llvm", "llvm-no-checks"])
def test_a_load_keeps_the_values_it_read_before_a_store_to_its_buffer(options):
    """Without checks a launch may read a buffer it writes: a load fused into its reader read
    x after the store (7s, not x) on the host."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.zeros_like(x)
    load_then_overwrite.run([y, x.copy()], **options)
    np.testing.assert_array_equal(y, x)


def test_a_load_from_a_buffer_the_launch_writes_is_not_fused():
    fused = TileHostLowering(load_then_overwrite.graph, Target.host(checks=False), 16).fused
    assert {v.op.opcode for v in fused} == {"splat"}
