"""Analyses of the typed SSA graph: one module per question, asked by the builder and by
every backend.

- :mod:`.uniformity`: which values may differ between the threads that run together;
- :mod:`.intervals`: the integer interval an index value lies in;
- :mod:`.phases`: how a block body splits at its barriers, and what lives across them.
"""
