"""The host side of a GPU launch, shared by the ``cuda`` backend (a real GPU through
PyCUDA) and the ``ptx`` backend (the same PTX on the emulator in :mod:`.ptx`).

Both compile with :func:`kernel_ptx`, then one :class:`DeviceLaunch` stages the
arguments (a device buffer per host array, every buffer at least 8 bytes as the ABI
promises, device inputs used in place, device outputs through scratch), zeroes the
status word, marshals the parameters in ABI order, calls the driver, reads the status
word back and copies outputs back only when the launch succeeded.  Only the final
driver call differs, so a bug in this half shows on the emulator, without a GPU.

A device here is anything with the emulator's memory interface: ``alloc(nbytes) ->
address``, ``free(address)``, ``copy_to_device(address, array)``,
``copy_from_device(array, address)``, ``copy_device(dst, src, nbytes)`` and
``memset(address, byte, nbytes)``; :class:`PycudaDevice` adapts PyCUDA's driver to it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..dsl.ir import Graph
from ..dsl.schedule import Launch
from .abi import STATUS_WORDS, scalar_words, status_error
from .arguments import Binding
from .codegen import emit_ptx
from .targets import Target


def kernel_ptx(graph: Graph, launch: Launch, arch: str, fast_math: bool = False) -> str:
    """The PTX both GPU backends launch: ``graph`` for ``arch``, built for ``launch``'s blocks."""
    return emit_ptx(graph, Target.nvptx(arch, fast_math=fast_math), launch.block)


class PycudaDevice:
    """PyCUDA's driver behind the device interface (addresses are ints)."""

    def __init__(self, drv):
        self.drv = drv
        self.live: dict[int, object] = {}

    def alloc(self, nbytes: int) -> int:
        allocation = self.drv.mem_alloc(max(nbytes, 8))
        self.live[int(allocation)] = allocation
        return int(allocation)

    def free(self, address: int) -> None:
        self.live.pop(address).free()

    def copy_to_device(self, address: int, host: np.ndarray) -> None:
        self.drv.memcpy_htod(address, np.ascontiguousarray(host))

    def copy_from_device(self, host: np.ndarray, address: int) -> None:
        self.drv.memcpy_dtoh(host, address)

    def copy_device(self, dst: int, src: int, nbytes: int) -> None:
        self.drv.memcpy_dtod(dst, src, nbytes)

    def memset(self, address: int, value: int, nbytes: int) -> None:
        self.drv.memset_d8(address, value, nbytes)


class DeviceLaunch:
    """Device buffers for one launch: staged, run, checked, copied back, freed."""

    def __init__(self, device, graph: Graph, binding: Binding, launch: Launch):
        self.device, self.graph, self.binding, self.launch = device, graph, binding, launch
        self.allocations: list[int] = []

    def _alloc(self, nbytes: int) -> int:
        address = self.device.alloc(max(nbytes, 8))  # even an empty buffer: 8 readable bytes
        self.allocations.append(address)
        return address

    def _stage(self, name: str) -> int:
        info, array = self.binding.infos[name], self.binding.arrays[name]
        if info.nbytes == 0:
            return self._alloc(8)
        if info.space == "host":
            address = self._alloc(info.nbytes)
            self.device.copy_to_device(address, np.ascontiguousarray(array))
            return address
        if name not in self.binding.outputs:
            return info.address  # device inputs are read in place
        scratch = self._alloc(info.nbytes)
        self.device.copy_device(scratch, info.address, info.nbytes)
        return scratch

    def arguments(self) -> tuple[list, dict[str, int], int]:
        """The kernel's parameters in ABI order, each buffer's device address, the status word's."""
        buffers = [p.name for p in self.graph.buffers]
        pointers = {name: self._stage(name) for name in buffers}
        status = self._alloc(STATUS_WORDS * 8)
        self.device.memset(status, 0, STATUS_WORDS * 8)
        counts = [np.int64(self.binding.infos[n].size) for n in buffers]
        args = [pointers[n] for n in buffers] + counts + scalar_words(self.graph, self.binding.scalars) + [status]
        return args, pointers, status

    def run(self, call: Callable[[tuple, tuple, list], object]):
        """Stage, ``call(grid, block, args)`` (the driver's launch), check, copy back, free;
        returns what ``call`` returns (a timing)."""
        try:
            args, pointers, status = self.arguments()
            result = call(self.launch.grid, self.launch.block, args)
            words = np.zeros(STATUS_WORDS, np.int64)
            self.device.copy_from_device(words, status)
            error = status_error(self.graph, tuple(self.graph.body.walk()), words, self.binding.sizes,
                                 self.launch.extents)
            if error is not None:
                raise error
            for name in sorted(self.binding.outputs):
                self._copy_back(name, pointers[name])
            return result
        finally:
            for address in self.allocations:
                self.device.free(address)

    def _copy_back(self, name: str, address: int) -> None:
        info, array = self.binding.infos[name], self.binding.arrays[name]
        if not info.nbytes:
            return
        if info.space == "host":
            self.device.copy_from_device(array, address)  # contiguous (checked), so written in place
        else:
            self.device.copy_device(info.address, address, info.nbytes)
