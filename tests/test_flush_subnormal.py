"""``flush_subnormal``: a value below its type's smallest normal number becomes a zero of its sign
(+0 in a type without -0), the same on every backend and in every float type; on NVPTX an f32
``flush_subnormal(exp2(x))`` is one ``ex2.approx.ftz`` (the tile attention's weights)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import accy
from accy import axis, kernel, tensor
from accy.dsl.types import DTYPES

BACKENDS = ("numpy", "llvm", "ptx")
FLOATS = [name for name, t in DTYPES.items() if t.is_float]


def reference(x: np.ndarray) -> np.ndarray:
    """Independently of accy: ml_dtypes' (NumPy's) smallest normal, in float64."""
    info = ml_dtypes.finfo(x.dtype) if x.dtype.itemsize <= 2 and x.dtype != np.float16 else np.finfo(x.dtype)
    wide = x.astype(np.float64)
    zero = np.zeros_like(wide) if "fnuz" in x.dtype.name else np.copysign(0.0, wide)
    return np.where(np.abs(wide) < float(info.smallest_normal), zero, wide).astype(x.dtype)


def values(dtype: np.dtype) -> np.ndarray:
    """Around the smallest normal, both signs, zeros, specials and a sample of subnormals."""
    info = ml_dtypes.finfo(dtype) if dtype.itemsize <= 2 and dtype != np.float16 else np.finfo(dtype)
    tiny = float(info.smallest_normal)
    smallest = float(info.smallest_subnormal)
    xs = [0.0, tiny, tiny * 1.5, tiny / 2, smallest, smallest * 3, tiny - smallest, 1.0, 3.0, np.inf, np.nan]
    xs += [-x for x in xs]
    return np.array(xs, np.float64).astype(dtype)


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit for bit, apart from NaNs (a NaN's payload and sign are no part of the rules)."""
    nan = np.isnan(want.astype(np.float64))
    return bool(np.array_equal(np.isnan(got.astype(np.float64)), nan)
                and np.array_equal(got[~nan].view(np.uint8 if got.itemsize == 1 else f"u{got.itemsize}"),
                                   want[~nan].view(np.uint8 if want.itemsize == 1 else f"u{want.itemsize}")))


def flush_tile(dtype, n):
    @kernel(dst=tensor(dtype, 1), x=tensor(dtype, 1))
    def flush(k, p):
        @k.for_each_tile(grid=(axis("i", 1),))
        def program(t, pid):
            p.dst.store_tile((0,), t.flush_subnormal(p.x.load_tile((0,), (n,))))

    return flush


def flush_scalar(dtype):
    @kernel(dst=tensor(dtype, 1), x=tensor(dtype, 1))
    def flush(k, p):
        (n,) = p.x.shape

        @k.for_each_1d(axis("i", n))
        def element(inner, idx):
            p.dst[idx["i"]] = inner.flush_subnormal(p.x[idx["i"]])

    return flush


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", ["tile", "scalar"])
@pytest.mark.parametrize("name", FLOATS)
def test_flush_subnormal_matches_the_reference_in_every_float_type(name, form, backend):
    dtype = DTYPES[name]
    x = values(np.dtype(dtype.numpy))
    dst = np.ones_like(x)
    program = flush_tile(dtype, x.size) if form == "tile" else flush_scalar(dtype)
    program.run([dst, x], backend=backend)
    assert same(dst, reference(x)), (x, dst)


@kernel(dst=tensor(accy.f32, 1), x=tensor(accy.f32, 1))
def flushed_exp2(k, p):
    @k.for_each_tile(grid=(axis("i", 1),))
    def program(t, pid):
        p.dst.store_tile((0,), t.flush_subnormal(t.exp2(p.x.load_tile((0,), (64,)))))


def test_a_flushed_exp2_is_one_ex2_approx_ftz_on_nvptx():
    ptx = flushed_exp2.ptx("sm_80")
    assert "ex2.approx.ftz.f32" in ptx
    assert "ex2.approx.f32" not in ptx  # the unflushed exp2 (libdevice's) is gone: no other use


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_flushed_exp2_agrees_with_numpy_and_flushes_below_2_to_the_minus_126(backend):
    x = np.concatenate([np.linspace(-160, 20, 60), [-126.0, -126.5, -149.0, np.nan]]).astype(np.float32)
    dst = np.full(64, 7.0, np.float32)
    flushed_exp2.run([dst, x], backend=backend)
    exact = np.exp2(x.astype(np.float64))
    want = np.where(exact < 2.0**-126, 0.0, exact)
    assert np.all((dst == 0) == (want == 0)) and np.isnan(dst[-1])
    normal = want > 0
    assert np.all(np.abs(dst[normal] - want[normal]) <= 2 * 2.0**-23 * want[normal])  # ex2.approx: 2 ulp
