import numpy as np
import pytest

import accy
from accy import Program, axis, dynamic_buffer, f32

# Every CPU backend runs every backend-parametrised test (one body, many backends).
CPU_BACKENDS = ["numpy", "llvm"]


@pytest.fixture(params=CPU_BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def elementwise(name, fn, n, *, dtypes=(f32, f32), out=f32):
    """A 1-D kernel: dst[i] = fn(inner, a[i], b[i], ...) over n threads."""
    params = {"dst": dynamic_buffer(out)}
    params.update({f"in{j}": dynamic_buffer(t) for j, t in enumerate(dtypes)})

    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            values = [args.param(f"in{j}")[i] for j in range(len(dtypes))]
            args.dst[i] = fn(inner, *values)

        k.for_each_1d(axis("i", n), each)

    return Program(name, params, body)
