"""The NVPTX target: a graph as a ``ptx_kernel`` (:mod:`.lowering`), its source lines in the PTX
(:mod:`.debug_lines`), NVIDIA's tools found without a GPU (:mod:`.toolchain`: ptxas, libdevice)
and the theoretical occupancy of what ptxas reports (:mod:`.occupancy`).
"""
