"""Helpers for users' own test suites."""

from __future__ import annotations

from typing import Sequence

from .runtime import BACKENDS
from .compare import CompareReport, compare


def assert_backends_agree(kernel, args, backends: Sequence[str] = BACKENDS, *, rtol: float = 1e-5,
                          atol: float = 1e-6, min_backends: int = 2, options=None) -> CompareReport:
    """Fail (AssertionError with the comparison table) unless every backend that can run
    here agrees with the others, and at least ``min_backends`` of them ran.
    ``options`` gives per-backend run options, as for :func:`accy.compare`."""
    report = compare(kernel, args, backends, rtol=rtol, atol=atol, options=options)
    if len(report.ran) < min_backends:
        raise AssertionError(f"only {len(report.ran)} backend(s) could run (need {min_backends}):\n{report}")
    if not report.agree:
        raise AssertionError(str(report))
    return report
