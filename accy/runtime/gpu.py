"""The host side of a device launch, shared by the ``cuda`` backend (a GPU through
cuda.core or PyCUDA) and the ``ptx`` backend (the same PTX on accy's emulator).

Both pick the graph a launch runs with :func:`launch_graph` (32-bit indices where they
provably fit), compile it with :func:`kernel_ptx`, then one :class:`DeviceLaunch` stages the
arguments (a device buffer per host array, every buffer at least 8 bytes as the ABI
promises, device inputs used in place, device outputs through scratch), zeroes the
status word, marshals the parameters in ABI order (:class:`~.drivers.KernelLaunch`),
calls the driver, reads the status word back and copies outputs back only when the
launch succeeded.  Only the driver differs (:mod:`accy.runtime.drivers`: cuda.core,
PyCUDA, the emulator), so a bug in this half shows on the emulator, without a GPU.
"""

from __future__ import annotations

import numpy as np

from ..dsl.ir import Graph
from ..dsl.schedule import Launch
from ..codegen.abi import STATUS_WORDS, dynamic_shared_bytes, scalar_bits, scalar_words, status_error, tensor_maps
from ..emulator.tensor_map import MAP_BYTES
from .tensor_maps import describe, tensor_layout
from .arguments import Binding
from ..codegen.machine import emit_ptx
from .drivers import Driver, KernelLaunch
from ..targets import Target

_UNSIGNED = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def launch_graph(graph: Graph, binding: Binding, launch: Launch) -> Graph:
    """The graph a launch runs on the device: :func:`accy.lowering.narrow_indices.launch_graph`
    (its index arithmetic in 32 bits where the launch's values prove that exact)."""
    from ..lowering.narrow_indices import launch_graph as choose

    return choose(graph, binding, launch)


def kernel_ptx(graph: Graph, launch: Launch, arch: str, fast_math: bool = False) -> str:
    """The PTX both GPU backends launch: ``graph`` for ``arch``, built for ``launch``'s blocks."""
    return emit_ptx(graph, Target.nvptx(arch, fast_math=fast_math), launch.block)


class DeviceLaunch:
    """Device buffers for one launch on ``driver``: staged, run, checked, copied back, freed.
    Every call goes on ``stream`` (the driver's own object; None for its default)."""

    def __init__(self, driver: Driver, graph: Graph, binding: Binding, launch: Launch, stream=None):
        self.driver, self.graph, self.binding, self.launch = driver, graph, binding, launch
        self.stream = stream
        self.allocations: list[int] = []

    def _alloc(self, nbytes: int) -> int:
        address = self.driver.alloc(max(nbytes, 8))  # even an empty buffer: 8 readable bytes
        self.allocations.append(address)
        return address

    def _stage(self, name: str) -> int:
        info, array = self.binding.infos[name], self.binding.arrays[name]
        if info.nbytes == 0:
            return self._alloc(8)
        if info.space == "host":
            address = self._alloc(info.nbytes)
            self.driver.copy_to_device(address, np.ascontiguousarray(array), self.stream)
            return address
        if name not in self.binding.outputs:
            return info.address  # device inputs are read in place
        scratch = self._alloc(info.nbytes)
        self.driver.copy_device(scratch, info.address, info.nbytes, self.stream)
        return scratch

    def parameters(self) -> tuple[KernelLaunch, dict[str, int], int]:
        """The launch the driver gets (the kernel's parameters in ABI order, each its exact
        width), each buffer's device address, the status word's."""
        buffers = [p.name for p in self.graph.buffers]
        pointers = {name: self._stage(name) for name in buffers}
        status = self._alloc(STATUS_WORDS * 8)
        self.driver.memset(status, 0, STATUS_WORDS * 8, self.stream)
        scalars = [_UNSIGNED[scalar_bits(p.dtype)](word)
                   for p, word in zip(self.graph.scalars, scalar_words(self.graph, self.binding.scalars))]
        maps, ready = self.tensor_maps(pointers)
        params = (*(np.uint64(pointers[n]) for n in buffers), *(np.int64(self.binding.infos[n].size) for n in buffers),
                  *scalars, np.uint64(status), *maps, *ready)
        grid, block = (tuple(int(n) for n in dims) for dims in (self.launch.grid, self.launch.block))
        return KernelLaunch(grid, block, params, dynamic_shared_bytes(self.graph)), pointers, status

    def tensor_maps(self, pointers: dict[str, int]) -> tuple[list, list]:
        """Each tensor map's bytes as the driver encodes them (zeros where the tensor cannot be
        described: its kernel copies it another way) and its ready flag."""
        maps, ready = [], []
        for m in tensor_maps(self.graph):
            shape, strides, offset = tensor_layout(m.tensor, self.binding.scalars, len(m.box))
            fields = describe(m, pointers[m.tensor], shape, strides, offset)
            ok = not isinstance(fields, str)
            maps.append(np.void(self.driver.tensor_map(fields) if ok else bytes(MAP_BYTES)))
            ready.append(np.uint32(ok))
        return maps, ready

    def run(self, kernel, *, timing: bool = False) -> float | None:
        """Stage, launch ``kernel`` (a handle from the driver's ``load``), check, copy back,
        free; returns the kernel's time in ms with ``timing`` (events around the launch alone)."""
        driver, stream = self.driver, self.stream
        try:
            spec, pointers, status = self.parameters()
            start = driver.record(stream) if timing else None
            driver.launch(kernel, spec, stream)
            end = driver.record(stream) if timing else None
            words = np.zeros(STATUS_WORDS, np.int64)
            driver.copy_from_device(words, status, stream)  # waits for the kernel
            error = status_error(self.graph, tuple(self.graph.body.walk()), words, self.binding.sizes,
                                 self.launch.extents)
            if error is not None:
                raise error
            for name in sorted(self.binding.outputs):
                self._copy_back(name, pointers[name])
            driver.synchronize(stream)  # device-to-device copy-backs finish before the scratch is freed
            return driver.elapsed_ms(start, end) if timing else None
        finally:
            for address in self.allocations:
                driver.free(address)

    def _copy_back(self, name: str, address: int) -> None:
        info, array = self.binding.infos[name], self.binding.arrays[name]
        if not info.nbytes:
            return
        if info.space == "host":
            self.driver.copy_from_device(array, address, self.stream)  # contiguous (checked): written in place
        else:
            self.driver.copy_device(info.address, address, info.nbytes, self.stream)
