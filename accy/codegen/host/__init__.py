"""The host target: a launch as SPMD on SIMD (:mod:`.spmd`: threads as vector lanes, in chunks,
:mod:`.chunking`, :mod:`.masking`; blocks and barriers, :mod:`.blocks`; bounds proven once per
launch, :mod:`.launch_proof`; inline vector math, :mod:`.vecmath`), tile programs lowered whole
(:mod:`.tiles` and its ``tile_*`` emitters), and its machine code kept on disk (:mod:`.code_store`).
"""
