"""Memory in the tracing builder: buffer sizes, loads and stores, shared arrays and atomics
(a mixin of :class:`accy.dsl.builder.Builder`)."""

from __future__ import annotations

import numbers

import numpy as np

from .ir import Value
from .ops import AtomicAttrs, LoadAttrs, SharedAttrs, SizeAttrs, StoreAttrs
from .tensors import TensorHandle
from .traced import BufferHandle, MemoryHandle, SharedArray, Traced, _LaunchInfo, _error
from .types import as_dtype, element_type, index


class Memory:
    """Buffers, shared arrays and atomics."""

    # -- memory --------------------------------------------------------------------
    def _buffer(self, opcode: str, buffer) -> MemoryHandle:
        if not isinstance(buffer, MemoryHandle):
            raise _error(f"{opcode}: expected a kernel buffer parameter or a shared array, got {buffer!r}")
        if buffer.space == "shared" and self._launch_info() is None:
            raise _error(f"{opcode}: shared array '{buffer.name}' is used outside its block body")
        return buffer

    def size(self, buffer: BufferHandle) -> Traced:
        """The element count of ``buffer`` (an ``index``), e.g. for a launch extent."""
        if isinstance(buffer, TensorHandle):
            return buffer.size
        if not isinstance(buffer, BufferHandle):
            raise _error(f"size: expected a kernel buffer parameter, got {buffer!r}")
        return self._traced(self._record("size", (), SizeAttrs(buffer=buffer.name)))

    @staticmethod
    def _element(buffer, idx):
        """A tensor's element ``idx`` (a tuple) as its span buffer and the flat position there."""
        if isinstance(buffer, TensorHandle):
            return buffer.buffer, buffer.flat_index(idx)
        return buffer, idx

    def _index(self, opcode: str, idx) -> Value:
        if isinstance(idx, tuple):
            raise _error(f"{opcode}: buffers are 1-D; compute a flat index (row * columns + column)")
        v = self._lift(idx, index, opcode)
        t = element_type(v.type)
        if t.is_int and not t.is_index:  # any integer indexes (as Triton's offsets): converted here
            v = self.cast(Traced(v), index).value
        elif not t.is_index:
            raise _error(f"{opcode}: indices are integers, got {v.type}")
        return v

    def load(self, buffer: BufferHandle, idx) -> Traced:
        buffer, idx = self._element(buffer, idx)
        buffer = self._buffer("load", buffer)
        attrs_ = LoadAttrs(buffer=buffer.name, dtype=buffer.dtype, space=buffer.space)
        return self._traced(self._record("load", (self._index("load", idx),), attrs_))

    def store(self, buffer: BufferHandle, value, idx) -> None:
        """Write ``value`` at ``idx`` (argument order as in the seed: value, then index)."""
        buffer, idx = self._element(buffer, idx)
        buffer = self._buffer("store", buffer)
        if not self.in_launch:
            raise _error(
                f"store to '{buffer.name}' outside for_each: every GPU thread would write it; "
                "store inside a for_each body"
            )
        idx = self._index("store", idx)
        value = self._stored(value, buffer.dtype, "store")  # a store converts, as cast does
        self._record("store", (idx, value), StoreAttrs(buffer=buffer.name, dtype=buffer.dtype, space=buffer.space))

    def shared(self, dtype, count: int, name: str | None = None, align: int = 16) -> SharedArray:
        """A per-block array of ``count`` elements of ``dtype`` in shared memory: ``s[i]`` reads,
        ``s[i] = v`` writes.  Allocated at the top of the block body, its start a multiple of
        ``align`` bytes (a power of two, 16 or more: 1024 for a 128-byte swizzled TMA or wgmma
        operand); its bytes count against ``Limits.max_shared_bytes`` when the kernel is launched."""
        info = self._block_launch("shared")
        if self._active() is not info.body:
            raise _error("shared: shared arrays are allocated at the top of the block body, not inside a loop or "
                         "branch (allocate it before the loop and use it inside)")
        return self._declare_shared(info, dtype, count, name, align=align)

    def _declare_shared(self, info: _LaunchInfo, dtype, count, name, *, first: bool = False,
                        stem: str = "shared", align: int = 16) -> SharedArray:
        try:
            dtype = as_dtype(dtype)
        except TypeError as e:
            raise _error(f"shared: {e}") from None
        if isinstance(count, (bool, np.bool_)) or not isinstance(count, numbers.Integral) or count < 1:
            raise _error(f"shared: count must be a positive Python int (the size is fixed when the kernel is traced), "
                         f"got {count!r}")
        if name is None:  # the first free stem<k>: a name the kernel chose may look like one
            k = len(info.shared_names)
            while f"{stem}{k}" in info.shared_names:
                k += 1
            name = f"{stem}{k}"
        if not isinstance(name, str) or not name.isidentifier():
            raise _error(f"shared: name must be a new identifier, got {name!r}")
        if name in info.shared_names:
            raise _error(f"shared: name must be a new identifier, got {name!r}: this block already has a shared "
                         "array of that name (yours, or the scratch of a block_reduce, block_scan or block_arg* "
                         "traced before this line)")
        info.shared_names.add(name)
        # in the block body itself, also where a loop or branch inside it asked for the scratch
        op = self._record_here("shared", (), SharedAttrs(name=name, dtype=dtype, count=int(count), align=align))
        if first:  # scratch the builder needs: declared before everything else in the block body
            self.block.ops.remove(op)
            self.block.ops.insert(0, op)
        return SharedArray(name, dtype, int(count))

    # -- atomics ---------------------------------------------------------------------
    def _atomic(self, kind: str, target, idx, *values) -> Traced:
        target, idx = self._element(target, idx)
        target = self._buffer(f"atomic_{kind}", target)
        if not self.in_launch:
            raise _error(f"atomic_{kind} on '{target.name}' outside the launch; call it inside a launch body")
        operands = [self._index(f"atomic_{kind}", idx)]
        operands += [self._stored(v, target.dtype, f"atomic_{kind}") for v in values]
        attrs_ = AtomicAttrs(op=kind, buffer=target.name, dtype=target.dtype, space=target.space)
        return self._traced(self._record("atomic", operands, attrs_))

    def atomic_add(self, target, idx, value) -> Traced:
        """Add ``value`` to ``target[idx]`` atomically; returns the element's old value."""
        return self._atomic("add", target, idx, value)

    def atomic_max(self, target, idx, value) -> Traced:
        """``target[idx] = max(target[idx], value)`` atomically (IEEE maximum for floats); returns the old value."""
        return self._atomic("max", target, idx, value)

    def atomic_min(self, target, idx, value) -> Traced:
        """``target[idx] = min(target[idx], value)`` atomically; returns the old value."""
        return self._atomic("min", target, idx, value)

    def atomic_exchange(self, target, idx, value) -> Traced:
        """Store ``value`` at ``target[idx]`` atomically; returns the old value."""
        return self._atomic("exchange", target, idx, value)

    def atomic_cas(self, target, idx, compare, value) -> Traced:
        """Where ``target[idx]`` equals ``compare`` (bit for bit), store ``value``; atomically.
        Returns the old value (equal to ``compare`` when the store happened)."""
        return self._atomic("cas", target, idx, compare, value)
