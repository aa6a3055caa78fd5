"""The interpreter's memory checker (``check_memory=True``): what compute-sanitizer's
racecheck, synccheck and initcheck do on a GPU, done exactly on the CPU, with source lines.

The interpreter runs every thread of a launch in lockstep and tells the checker, for
each access, which threads touched which elements.  The checker keeps, per element of
every buffer the kernel writes and of every shared array, the last thread that wrote
it, up to two threads that read it, and up to two that used it atomically, each with
the op and the barrier epoch of the access, and raises:

- :class:`~accy.errors.RaceError` when two threads touch one element with at least one
  non-atomic write and nothing orders them: for shared memory, between two barriers;
  for global memory, anywhere in the launch, unless both threads are in one block and
  a barrier separates the accesses (in-out buffers included);
- :class:`~accy.errors.UninitializedError` when shared memory is read before its block
  wrote it;
- :class:`~accy.errors.UnwrittenOutputError` for elements of a write-only output that no
  thread wrote (such outputs are poisoned with NaN or the most negative integer first).
"""

from __future__ import annotations

import numpy as np

from ...dsl.ir import Axis, Op
from ...errors import RaceError, UninitializedError, UnwrittenOutputError
from ...diagnostics import at, thread_text


class _Tracker:
    """Who touched each element of one memory, and when."""

    def __init__(self, size: int):
        self.size = size
        self.writer = np.full(size, -1, np.int64)
        self.writer_op = np.full(size, -1, np.int64)
        self.writer_epoch = np.zeros(size, np.int64)
        self.readers = np.full((2, size), -1, np.int64)
        self.reader_op = np.full((2, size), -1, np.int64)
        self.reader_epoch = np.zeros((2, size), np.int64)
        self.atomics = np.full((2, size), -1, np.int64)
        self.atomic_op = np.full((2, size), -1, np.int64)
        self.atomic_epoch = np.zeros((2, size), np.int64)
        self.written = np.zeros(size, bool)  # ever written: initcheck and unwritten outputs

    def reset(self) -> None:
        """A barrier: every earlier access of the block is ordered before every later one."""
        for array in (self.writer, self.readers, self.atomics):
            array.fill(-1)


def _memory(op: Op) -> tuple[str, bool]:
    """The array an access touches and whether it is shared: an asynchronous copy's is the shared
    array it writes (attrs ``shared``; its read of a buffer is not tracked)."""
    shared_array = getattr(op.attrs, "shared", None)
    if shared_array is not None:
        return shared_array, True
    return op.attrs["buffer"], op.attrs.get("space", "global") == "shared"


class Sanitizer:
    def __init__(self, lane_axes: tuple[Axis, ...], threads_per_block: int, ops: tuple[Op, ...]):
        self.axes = lane_axes
        self.block_size = max(threads_per_block, 1)  # plain launches: every thread is its own block
        self.ops = ops
        self.ordinal = {op: n for n, op in enumerate(ops)}
        self.epoch = 0
        self.global_memory: dict[str, _Tracker] = {}
        self.shared_memory: dict[str, _Tracker] = {}
        self.write_only: set[str] = set()
        self.layouts: dict = {}  # tensor outputs: name -> TensorLayout (which span elements are the tensor's)
        self.shared_counts: dict[str, int] = {}

    # -- setup ------------------------------------------------------------------------
    def track_buffer(self, name: str, size: int, write_only: bool, layout=None) -> None:
        """Track a global buffer; a tensor's ``layout`` says which elements of its span the
        kernel may write (the gaps between them are no output's)."""
        self.global_memory[name] = tracker = _Tracker(size)
        if layout is not None:
            self.layouts[name] = layout
            tracker.written.fill(True)
            tracker.written[layout.positions()] = False
        if write_only:
            self.write_only.add(name)

    def track_shared(self, name: str, blocks: int, count: int) -> None:
        self.shared_memory[name] = _Tracker(blocks * count)
        self.shared_counts[name] = count

    def tracker(self, op: Op) -> _Tracker | None:
        name, shared = _memory(op)
        return (self.shared_memory if shared else self.global_memory).get(name)

    # -- wording ----------------------------------------------------------------------
    def _thread(self, lane: int) -> str:
        return thread_text(self.axes, int(lane))

    def _where(self, op_ordinal: int) -> str:
        return at(self.ops[int(op_ordinal)]) if op_ordinal >= 0 else ""

    def _name(self, op: Op, element: int) -> str:
        name, shared = _memory(op)
        if shared:
            count = self.shared_counts[name]
            return f"shared array '{name}'[{element % count}] of block {element // count}"
        layout = self.layouts.get(op.attrs["buffer"])
        where = layout.index_of(element) if layout is not None else None
        if where is not None:
            return f"tensor '{op.attrs['buffer']}'[{', '.join(map(str, where))}]"
        return f"'{op.attrs['buffer']}'[{element}]"

    def _race(self, op: Op, element, lane, verb: str, other_lane, other_verb: str, other_op) -> RaceError:
        return RaceError(
            f"race on {self._name(op, int(element))}: {other_verb} by thread {self._thread(other_lane)}"
            f"{self._where(other_op)} and {verb} by thread {self._thread(lane)}{at(op)}, with nothing "
            "ordering them (a barrier orders threads of one block; atomics only race with plain accesses)"
        )

    # -- ordering -----------------------------------------------------------------------
    def _relevant(self, tracker: _Tracker, lanes, other, epochs, shared: bool):
        """Where an earlier access by ``other`` (in ``epochs``) is unordered with ``lanes``'s."""
        present = (other >= 0) & (other != lanes)
        if shared:
            return present  # shared trackers are cleared at every barrier
        same_block = (other // self.block_size) == (lanes // self.block_size)
        return present & (~same_block | (epochs == self.epoch))

    def _conflict(self, op, tracker, elements, lanes, shared, verb, table, ops, epochs, other_verb):
        rows = table[:, elements] if table.ndim == 2 else table[None, elements]
        row_ops = ops[:, elements] if ops.ndim == 2 else ops[None, elements]
        row_epochs = epochs[:, elements] if epochs.ndim == 2 else epochs[None, elements]
        for other, other_op, other_epoch in zip(rows, row_ops, row_epochs):
            bad = self._relevant(tracker, lanes, other, other_epoch, shared)
            if bad.any():
                k = int(np.argmax(bad))
                raise self._race(op, elements[k], lanes[k], verb, other[k], other_verb, other_op[k])

    def _same_op_writes(self, op, elements, lanes, verb):
        """One store by several threads to one element (their order is undefined)."""
        if elements.size < 2:
            return
        order = np.lexsort((lanes, elements))
        e, l_ = elements[order], lanes[order]
        clash = np.flatnonzero((e[1:] == e[:-1]) & (l_[1:] != l_[:-1]))
        if clash.size:
            k = int(clash[0])
            raise self._race(op, e[k], l_[k + 1], verb, l_[k], verb, self.ordinal[op])

    def _record(self, table, ops, epochs, elements, lanes, op_ordinal) -> None:
        """Keep up to two distinct threads per element: the first two of this access are
        offered to the element's slots, replacing entries from an earlier epoch."""
        if elements.size == 0:
            return
        order = np.lexsort((lanes, elements))
        e, l_ = elements[order], lanes[order]
        new_pair = np.ones(e.size, bool)
        new_pair[1:] = (e[1:] != e[:-1]) | (l_[1:] != l_[:-1])
        e, l_ = e[new_pair], l_[new_pair]
        first = np.ones(e.size, bool)
        first[1:] = e[1:] != e[:-1]
        second = np.zeros(e.size, bool)
        second[1:] = first[:-1] & ~first[1:]  # the next distinct thread of the same element
        for pick in (first, second):
            self._offer(table, ops, epochs, e[pick], l_[pick], op_ordinal)

    def _offer(self, table, ops, epochs, e, l_, op_ordinal) -> None:
        """Record thread ``l_[k]`` for distinct element ``e[k]`` in the first free or stale slot,
        unless a slot already holds it."""
        pending = np.ones(e.size, bool)
        for row in range(table.shape[0]):
            slot, slot_epoch = table[row, e], epochs[row, e]
            pending &= slot != l_
            free = pending & ((slot < 0) | (slot_epoch != self.epoch))
            table[row, e[free]] = l_[free]
            ops[row, e[free]] = op_ordinal
            epochs[row, e[free]] = self.epoch
            pending &= ~free

    # -- accesses -----------------------------------------------------------------------
    def load(self, op: Op, elements: np.ndarray, lanes: np.ndarray) -> None:
        tracker = self.tracker(op)
        if tracker is None:
            return
        shared = _memory(op)[1]
        if shared:
            self._initialised(op, tracker, elements, lanes)
        self._conflict(op, tracker, elements, lanes, shared, "read", tracker.writer, tracker.writer_op,
                       tracker.writer_epoch, "written")
        self._conflict(op, tracker, elements, lanes, shared, "read", tracker.atomics, tracker.atomic_op,
                       tracker.atomic_epoch, "updated atomically")
        self._record(tracker.readers, tracker.reader_op, tracker.reader_epoch, elements, lanes, self.ordinal[op])

    def store(self, op: Op, elements: np.ndarray, lanes: np.ndarray) -> None:
        tracker = self.tracker(op)
        if tracker is None:
            return
        shared = _memory(op)[1]
        self._same_op_writes(op, elements, lanes, "written")
        self._conflict(op, tracker, elements, lanes, shared, "written", tracker.writer, tracker.writer_op,
                       tracker.writer_epoch, "written")
        self._conflict(op, tracker, elements, lanes, shared, "written", tracker.readers, tracker.reader_op,
                       tracker.reader_epoch, "read")
        self._conflict(op, tracker, elements, lanes, shared, "written", tracker.atomics, tracker.atomic_op,
                       tracker.atomic_epoch, "updated atomically")
        tracker.writer[elements] = lanes
        tracker.writer_op[elements] = self.ordinal[op]
        tracker.writer_epoch[elements] = self.epoch
        tracker.written[elements] = True

    def copied(self, op: Op, elements: np.ndarray, lanes: np.ndarray) -> None:
        """A bulk copy's writes (``tma_load``): the elements are written (initialised), by no
        thread this checker orders by barriers: a copy and its readers are ordered by mbarrier
        phases, which it does not follow (the emulator's race checker does, by happens-before
        on the asynchronous proxy)."""
        tracker = self.tracker(op)
        if tracker is None:
            return
        tracker.writer[elements] = -1
        tracker.readers[:, elements] = -1
        tracker.written[elements] = True

    def atomic(self, op: Op, elements: np.ndarray, lanes: np.ndarray) -> None:
        tracker = self.tracker(op)
        if tracker is None:
            return
        shared = _memory(op)[1]
        if shared:
            self._initialised(op, tracker, elements, lanes)
        self._conflict(op, tracker, elements, lanes, shared, "updated atomically", tracker.writer,
                       tracker.writer_op, tracker.writer_epoch, "written")
        self._conflict(op, tracker, elements, lanes, shared, "updated atomically", tracker.readers,
                       tracker.reader_op, tracker.reader_epoch, "read")
        self._record(tracker.atomics, tracker.atomic_op, tracker.atomic_epoch, elements, lanes, self.ordinal[op])
        tracker.written[elements] = True

    def _initialised(self, op: Op, tracker: _Tracker, elements, lanes) -> None:
        fresh = ~tracker.written[elements]
        if fresh.any():
            k = int(np.argmax(fresh))
            raise UninitializedError(
                f"read of {self._name(op, int(elements[k]))} by thread {self._thread(lanes[k])}{at(op)} before "
                "any thread of its block wrote it (shared memory starts with garbage)"
            )

    def barrier(self) -> None:
        """A barrier: every block's accesses so far are ordered before its later ones."""
        self.epoch += 1
        for tracker in self.shared_memory.values():
            tracker.reset()

    def finish(self) -> None:
        """After the launch: write-only outputs must be written everywhere."""
        for name in sorted(self.write_only):
            unwritten = np.flatnonzero(~self.global_memory[name].written)
            if unwritten.size and name in self.layouts:
                layout = self.layouts[name]
                shown = [f"{name}[{', '.join(map(str, layout.index_of(int(e))))}]" for e in unwritten[:5]]
                raise UnwrittenOutputError(
                    f"output tensor '{name}': {unwritten.size} of {layout.size} elements were never written "
                    f"({', '.join(shown)}{', ...' if unwritten.size > 5 else ''}); nothing was written back")
            if unwritten.size:
                first = ", ".join(map(str, unwritten[:5])) + (", ..." if unwritten.size > 5 else "")
                raise UnwrittenOutputError(
                    f"output '{name}': {unwritten.size} of {self.global_memory[name].size} elements were never "
                    f"written (indices {first}); nothing was written back"
                )
