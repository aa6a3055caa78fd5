"""Regressions the tile-level fuzzer (tests/test_fuzz_tiles.py) and its adversarial sweeps
found, minimised by hand.  Each test is deterministic and small and names the bug it pins;
a bug whose fix is still open is ``xfail(strict=True)`` with where the fault lies, so the fix
turns it into an XPASS to remove the mark (and the fuzzer's avoidance, fuzz_tiles.KNOWN_BUGS).
"""

import numpy as np
import pytest

import accy
from accy import axis, f32, i32

BACKENDS = ["numpy", "llvm", "ptx"]


def _scan_kernel(shape, axis_, op, dtype):
    n = int(np.prod(shape))

    @accy.kernel(out=accy.dynamic_buffer(dtype), x=accy.dynamic_buffer(dtype))
    def scan(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            i = t.arange(n)
            v = p.x.load(i).reshape(shape)
            p.out.store(i, getattr(t, op)(v, axis_).reshape((n,)))

    return scan


# -- bug 1: llvm's scan along a non-last axis drops the previous row in part of each line ------
# A (2, 25) i32 cumsum along axis 0 on llvm: row 1's first 7 columns (flat 25..31, up to the next
# multiple of 16) come out as x[1, j] alone, not x[0, j] + x[1, j]; cummin/cummax the same, any
# dtype, rank 2 or 3, whenever the elements after the axis number more than 16 and are no
# multiple of 16 (17..31, 33..47, 100).  The fault is in accy/backends/tile_host.py's scan over
# an outer axis (a vector chunk that straddles two lines reads its neighbour before it is
# written); numpy and ptx are right.


BUG1 = pytest.mark.xfail(strict=True, reason="bug 1: accy/backends/tile_host.py, a scan along a non-last axis "
                                             "whose lines hold more than 16 elements (no multiple of 16) loses the "
                                             "previous line in part of each line")


@pytest.mark.parametrize("backend", ["numpy", pytest.param("llvm", marks=BUG1), "ptx"])
@pytest.mark.parametrize("op", ["cumsum", "cummin"])
@pytest.mark.parametrize("shape", [(2, 25), (2, 17), (3, 4, 5)], ids=str)
def test_bug1_scan_along_an_outer_axis(backend, op, shape):
    x = (np.arange(int(np.prod(shape))) % 7 - 3).astype(np.int32)
    out = np.zeros_like(x)
    _scan_kernel(shape, 0, op, i32).run(dict(out=out, x=x), backend=backend)
    want = (np.cumsum if op == "cumsum" else np.minimum.accumulate)(x.reshape(shape), axis=0).reshape(-1)
    np.testing.assert_array_equal(out, want)


@BUG1
def test_bug1_f32_cumsum_along_axis_0_on_llvm():
    x = np.arange(1, 51, dtype=np.float32)
    out = np.zeros_like(x)
    _scan_kernel((2, 25), 0, "cumsum", f32).run(dict(out=out, x=x), backend="llvm")
    np.testing.assert_array_equal(out, np.cumsum(x.reshape(2, 25), axis=0).reshape(-1))
