"""accy's benchmarks: ``python -m bench`` (CPU backends and baselines), ``python -m bench.gpu``."""
