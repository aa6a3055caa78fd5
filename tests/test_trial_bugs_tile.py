"""Tile-level bugs found by outside trials of accy, each pinned by a small deterministic test."""

import numpy as np
import pytest

import accy
from accy import axis, i32, i64, u32
from accy.errors import ExecutionError

BACKENDS = ["numpy", "llvm", "ptx"]

# -- integer division of tiles loaded from a tensor ------------------------------------------------
# llvm's prepare pass (which checks a launch whole before it runs on the caller's arrays) skipped
# the loads of a tensor box (load_tile, or any masked load with a run-time stride) that lies
# wholly inside the tensor, "a whole tile needs no check", even where a division's check reads
# the loaded values: the divisor was read from an unwritten stack array and a false "remainder by
# zero" came out (reliably from 15 elements on, here).


def _divide(shape, dtype):
    @accy.kernel(q=accy.tensor(dtype, 2), r=accy.tensor(dtype, 2), x=accy.tensor(dtype, 2), y=accy.tensor(dtype, 2))
    def divide(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            a = p.x.load_tile((0, 0), shape)
            b = p.y.load_tile((0, 0), shape, other=1)
            p.q.store_tile((0, 0), a // b)
            p.r.store_tile((0, 0), a % b)

    return divide


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [i32, u32, i64], ids=str)
@pytest.mark.parametrize("shape", [(1, 15), (1, 16), (1, 17), (4, 16), (1, 1000), (4, 5)], ids=str)
def test_integer_division_of_a_tensor_box_has_no_false_zero(backend, dtype, shape):
    n = int(np.prod(shape))
    x = (np.arange(n) * 37 - 500).astype(dtype.numpy).reshape(shape)  # negative dividends where signed
    y = (np.arange(n) % 7 + 1).astype(dtype.numpy).reshape(shape)
    if not dtype.is_unsigned:
        y[:, ::3] *= -1
    q, r = np.zeros_like(x), np.zeros_like(x)
    _divide(shape, dtype).run(dict(q=q, r=r, x=x, y=y), backend=backend)
    np.testing.assert_array_equal(q, x // y)
    np.testing.assert_array_equal(r, x % y)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [i32, u32, i64], ids=str)
@pytest.mark.parametrize("shape", [(1, 15), (1, 16), (4, 16)], ids=str)
def test_a_zero_divisor_in_a_tensor_box_is_still_reported(backend, dtype, shape):
    n = int(np.prod(shape))
    x = np.arange(n).astype(dtype.numpy).reshape(shape)
    y = np.ones(shape, dtype.numpy)
    y[-1, -2] = 0
    q, r = np.zeros_like(x), np.zeros_like(x)
    with pytest.raises(ExecutionError, match=r"(div: .* division|mod: .* remainder) by zero in program m=0"):
        _divide(shape, dtype).run(dict(q=q, r=r, x=x, y=y), backend=backend)
    assert not q.any() and not r.any()  # a failing launch writes nothing


# -- a masked load's default `other` -----------------------------------------------------------------
# `other` defaulted to the Python int 0, an index constant, so a masked load of a bool parameter
# without `other` was refused ("other is index, but 'x' holds bool"); it is now a zero of the
# parameter's own dtype: False for bool.


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["load", "load_tile"])
def test_a_masked_bool_load_reads_false_where_masked_off(backend, how):
    @accy.kernel(out=accy.tensor(accy.boolean, 1), x=accy.tensor(accy.boolean, 1), n=accy.scalar(accy.index))
    def masked_bool(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            i = t.arange(32)
            v = p.x.load(i, mask=i < p.n) if how == "load" else p.x.load_tile((0,), (32,))
            p.out.store(i, v)

    x = np.ones(32 if how == "load" else 20, bool)  # load_tile masks past the tensor's edge, at 20
    out = np.ones(32, bool)
    masked_bool.run(dict(out=out, x=x, n=20), backend=backend)
    np.testing.assert_array_equal(out, np.arange(32) < 20)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [accy.u8, i32, accy.f16, accy.f32], ids=str)
def test_a_masked_load_reads_a_zero_of_its_dtype_by_default(backend, dtype):
    @accy.kernel(out=accy.dynamic_buffer(dtype), x=accy.dynamic_buffer(dtype))
    def masked(k, p):
        @k.for_each_tile(grid=axis("m", 1), warps=1)
        def body(t, pid):
            i = t.arange(16)
            p.out.store(i, p.x.load(i, mask=i % 2 == 0))

    x = np.arange(1, 17).astype(dtype.numpy)
    out = np.ones(16, dtype.numpy)
    masked.run(dict(out=out, x=x), backend=backend)
    np.testing.assert_array_equal(out, np.where(np.arange(16) % 2 == 0, x, 0).astype(dtype.numpy))
