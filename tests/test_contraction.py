"""Multiply-add contraction (the front end's ``contract``, accy.dsl.passes.contract_multiply_adds):
on by default as Triton's ``enable_fp_fusion``, the same bits on every backend, off with
``fp_fusion=False``."""

import ml_dtypes  # noqa: F401  (the bf16 arrays of the tile tests)
import numpy as np
import pytest

from accy import axis, f16, f32, kernel, tensor
from accy.errors import TraceError


def _pointwise(expression, dtype=f32, fp_fusion=True):
    @kernel(dst=tensor(dtype, 1), x=tensor(dtype, 1), y=tensor(dtype, 1), z=tensor(dtype, 1), fp_fusion=fp_fusion)
    def pointwise(k, p):
        (n,) = p.x.shape

        @k.for_each_tile(grid=axis("i", (n + 31) // 32), warps=1)
        def body(t, pid):
            at = (pid["i"] * 32,)
            x, y, z = (v.load_tile(at, (32,)) for v in (p.x, p.y, p.z))
            p.dst.store_tile(at, expression(x, y, z))

    return pointwise


def _opcodes(program):
    """The ops of the optimised graph that compute floats."""
    return [op.opcode for op in program.graph.body.walk()
            if len(op.results) == 1 and getattr(op.result.type, "dtype", op.result.type).is_float]


@pytest.mark.parametrize("expression, negated", [
    (lambda x, y, z: x * y + z, 0), (lambda x, y, z: z + x * y, 0),
    (lambda x, y, z: x * y - z, 1), (lambda x, y, z: z - x * y, 1)], ids=["xy+z", "z+xy", "xy-z", "z-xy"])
def test_a_single_use_product_and_its_add_are_one_fma(expression, negated):
    ops = [op for op in _opcodes(_pointwise(expression)) if op not in ("tile_load", "const")]
    assert sorted(ops) == sorted(["fma"] + ["neg"] * negated)


def test_what_is_not_fused():
    # x * y used twice (after cse) stays a product; (x * y) * z, used once, fuses into the add
    shared = [op for op in _opcodes(_pointwise(lambda x, y, z: x * y + (x * y) * z)) if op not in ("tile_load", "const")]
    assert sorted(shared) == ["fma", "mul"]
    assert "fma" not in _opcodes(_pointwise(lambda x, y, z: x * y + z, dtype=f16))  # f16 rounds through f32
    assert "fma" not in _opcodes(_pointwise(lambda x, y, z: x * y + z, fp_fusion=False))
    assert "fma" in _opcodes(_pointwise(lambda x, y, z: x * y + z, fp_fusion=False).with_fp_fusion(True))


def test_fp_fusion_must_be_a_bool():
    with pytest.raises(TraceError, match="fp_fusion must be True or False, got 'yes'"):
        kernel(fp_fusion="yes")
    with pytest.raises(TraceError, match="with_fp_fusion: expected True or False, got 1"):
        _pointwise(lambda x, y, z: x * y + z).with_fp_fusion(1)


# (1 + 2**-12)**2 = 1 + 2**-11 + 2**-24: rounded to f32 it is 1 + 2**-11 (a tie, to even), so
# x * y - (1 + 2**-11) is 0 unfused and 2**-24 fused (exact in f64: the reference)
X = np.float32(1 + 2.0**-12)
Z = np.float32(1 + 2.0**-11)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_every_backend_gives_the_bits_of_the_rule(backend, fused):
    n = 37
    x = np.full(n, X, np.float32)
    z = np.full(n, Z, np.float32)
    dst = np.full(n, np.nan, np.float32)
    _pointwise(lambda x, y, z: x * y - z, fp_fusion=fused).run([dst, x, x, z], backend=backend)
    exact = np.float32(np.float64(X) * np.float64(X) - np.float64(Z))
    assert exact == np.float32(2.0**-24)
    assert (dst == (exact if fused else np.float32(0))).all()
