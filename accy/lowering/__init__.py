"""Lowering: graph-to-graph passes between the front end (:mod:`accy.dsl`) and code generation.

Each pass is named in :data:`accy.lowering.pipeline.PASSES` and each target lists the ones it
runs (:attr:`accy.targets.Target.passes`; ``accy ir KERNEL --passes``).  Here: the tile
distribution (:mod:`.distribute`: a tile program as a SIMT block launch of warps, its parts in
:mod:`.rebuild`, :mod:`.registers`, :mod:`.reductions`, :mod:`.tile_memory`, :mod:`.regions`,
:mod:`.fma_dot` and :mod:`.tensor_cores`, its layouts in :mod:`.layouts`) and the host's
access planning (:mod:`.tile_access`).
"""
