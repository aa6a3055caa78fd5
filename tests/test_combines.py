"""The combine table (accy/dsl/combines.py): each rule's facts hold, and every reduction and scan
the table spells runs the same on every backend as its NumPy reference, t.xor_sum among them."""

import numpy as np
import pytest

import accy
from accy import axis, i32, kernel, tensor, u8
from accy.dsl.combines import COMBINES, Combine, accumulator_type
from accy.dsl.tiles import TileOps
from accy.dsl.types import DTYPES

BACKENDS = ("numpy", "llvm", "ptx")


@pytest.mark.parametrize("combine", list(Combine))
def test_the_identity_leaves_every_element_as_it_is(combine):
    rule = COMBINES[combine]
    for name in ("i8", "u16", "i32", "u64", "bool", "f16", "f32", "f64", "f8e4m3", "f8e4m3fnuz", "f8e5m2"):
        dtype = DTYPES[name]
        if rule.bits_only != (dtype.is_int or dtype.is_bool) and (rule.bits_only or dtype.is_bool):
            continue  # not a type this combine takes
        values = np.array([0, 1, 3, 100, -7 if dtype.is_signed or dtype.is_float else 7], np.float64)
        if dtype.is_float:
            values = np.concatenate([values, [-0.0, 0.5, -np.inf, np.inf] if dtype.format.inf_code else [-0.0, 0.5]])
        x = values.astype(dtype.numpy) if not dtype.is_bool else np.array([True, False])
        identity = np.array(rule.identity(dtype)).astype(dtype.numpy)
        got = rule.ufunc(identity, x) if not (dtype.is_float and dtype.is_narrow) else \
            rule.ufunc(identity.astype(np.float32), x.astype(np.float32)).astype(dtype.numpy)
        np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8), err_msg=f"{combine} {name}")


def test_each_spelled_name_is_a_tile_method_with_a_docstring():
    for rule in COMBINES.values():
        for name in (rule.reduction, rule.scan, rule.arg_reduction):
            if name:
                assert callable(getattr(TileOps, name)) and getattr(TileOps, name).__doc__, name


def test_narrow_floats_accumulate_wide_where_the_combine_rounds():
    assert accumulator_type(Combine.SUM, accy.f16) == accy.f32
    assert accumulator_type(Combine.MAX, accy.f16) == accy.f16
    assert accumulator_type(Combine.SUM, accy.i8) == accy.i8


def xor_kernel(dtype, axis_):
    out_shape = {None: (1, 1), 0: (1, 64), 1: (16, 1)}[axis_]

    @kernel(dst=tensor(dtype, 2), x=tensor(dtype, 2))
    def xor_rows(k, p):
        @k.for_each_tile(grid=(axis("i", 1),), warps=2)
        def body(t, pid):
            x = p.x.load_tile((0, 0), (16, 64))
            p.dst.store_tile((0, 0), t.xor_sum(x, axis=axis_, keepdims=True))

    return xor_rows, out_shape


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [i32, u8], ids=str)
@pytest.mark.parametrize("axis_", [None, 0, 1])
def test_xor_sum_is_numpys_bitwise_xor_reduce_on_every_backend(backend, dtype, axis_):
    program, out_shape = xor_kernel(dtype, axis_)
    rng = np.random.default_rng(7)
    x = rng.integers(0, 2**7 if dtype == u8 else 2**31, (16, 64)).astype(dtype.numpy)
    dst = np.zeros(out_shape, dtype.numpy)
    program.run([dst, x], backend=backend)
    np.testing.assert_array_equal(dst, np.bitwise_xor.reduce(x, axis=axis_, keepdims=True))


def test_xor_sum_refuses_floats():
    @kernel(dst=tensor(accy.f32, 1), x=tensor(accy.f32, 1))
    def xor_floats(k, p):
        @k.for_each_tile(grid=(axis("i", 1),))
        def body(t, pid):
            p.dst.store_tile((0,), t.xor_sum(p.x.load_tile((0,), (32,)), keepdims=True))

    with pytest.raises(accy.errors.TraceError, match="xor reduction needs integer or bool elements, got f32"):
        xor_floats.graph
