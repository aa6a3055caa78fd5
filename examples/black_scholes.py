"""Black-Scholes option pricing: a call and a put per option, one thread each.

Every option is independent: a thread loads its spot price, strike and time to expiry,
computes d1 and d2 with ``log``, ``sqrt`` and ``exp``, the normal distribution function
with ``erf``, and stores both prices, in one pass over memory (NumPy needs a pass per
operation). The rate and volatility are scalars. Run with ``python examples/black_scholes.py``.
"""

import math

import numpy as np

from accy import axis, dynamic_buffer, f32, kernel, scalar
from accy.math import erf

RATE, VOLATILITY = 0.02, 0.30


def normal_cdf(x):
    return 0.5 * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


@kernel(call=dynamic_buffer(f32), put=dynamic_buffer(f32), spot=dynamic_buffer(f32), strike=dynamic_buffer(f32),
        years=dynamic_buffer(f32), rate=scalar(f32), volatility=scalar(f32))
def black_scholes(k, a):
    @k.for_each_1d(axis("option", a.spot.size))
    def each(inner, idx):
        i = idx["option"]
        s, x, t = a.spot[i], a.strike[i], a.years[i]
        root_t = t.sqrt()
        d1 = ((s / x).log() + (a.rate + 0.5 * a.volatility * a.volatility) * t) / (a.volatility * root_t)
        d2 = d1 - a.volatility * root_t
        discounted = x * (-a.rate * t).exp()
        a.call[i] = s * normal_cdf(d1) - discounted * normal_cdf(d2)
        a.put[i] = discounted * normal_cdf(-d2) - s * normal_cdf(-d1)


PROGRAMS = [black_scholes]


def options(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(5.0, 30.0, n).astype(np.float32), rng.uniform(1.0, 100.0, n).astype(np.float32),
            rng.uniform(0.25, 10.0, n).astype(np.float32))


def reference(spot, strike, years, rate=RATE, volatility=VOLATILITY):
    """Both prices in float64, with the C library's erf."""
    s, x, t = (a.astype(np.float64) for a in (spot, strike, years))
    d1 = (np.log(s / x) + (rate + 0.5 * volatility**2) * t) / (volatility * np.sqrt(t))
    d2 = d1 - volatility * np.sqrt(t)
    cdf = np.vectorize(lambda v: 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))))
    discounted = x * np.exp(-rate * t)
    return s * cdf(d1) - discounted * cdf(d2), discounted * cdf(-d2) - s * cdf(-d1)


def main() -> None:
    spot, strike, years = options(10_000)
    call_ref, put_ref = reference(spot, strike, years)
    errors = {}
    for backend in ("numpy", "llvm"):
        call, put = np.zeros_like(spot), np.zeros_like(spot)
        black_scholes.run([call, put, spot, strike, years, RATE, VOLATILITY], backend=backend)
        for got, want in ((call, call_ref), (put, put_ref)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=backend)
        errors[backend] = max(float(np.abs(call - call_ref).max()), float(np.abs(put - put_ref).max()))
    summary = ", ".join(f"{b} max abs err {e:.2g}" for b, e in errors.items())
    print(f"black_scholes of 10000 options: matches NumPy ({summary})")


if __name__ == "__main__":
    main()
