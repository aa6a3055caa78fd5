"""Running compiled functions: the scheduler.

All threads of a batch of blocks run together, their registers held as NumPy
arrays (one element per thread).  While every live thread is at the same block
(*converged*), a block runs on whole arrays.  A branch that splits the threads
switches to per-thread block numbers; each step then runs the block with the
lowest number among the runnable threads, for exactly the threads at it.
Structured code places a branch's join after both of its sides, so the
threads meet again there and the scheduler goes back to whole arrays.

Threads that reach a ``ret``/``exit`` block leave at once and are dropped from
the arrays (*compaction*), so a kernel whose surplus threads return early runs
the rest converged.

Barriers (``bar.sync``) wait for every live thread of the block; warp-synchronous
instructions wait for every live thread of the warp's member mask.  When no
thread can run and some wait at barriers that cannot complete (threads of one
block at different barriers, or threads that will never arrive), a
:class:`PtxBarrierError` names the barrier lines.

A ``call`` runs the callee for the calling threads as a nested execution with
its own registers (its parameters are the caller's argument variables), on a
stack frame in each thread's local memory above the caller's.

That is the lockstep schedule.  Under the others (:mod:`.schedule`), the entry
function runs each warp alone up to its next barrier (:meth:`Frame.run_slots`):
warp slot k of every block runs as an execution of its own that stops (*parks*) its
threads at barriers; when every slot has run, the complete barriers release their
threads and the next round begins.  Completed barriers and warp-synchronous
instructions are reported to the race checker (:mod:`.races`), which orders
accesses by them.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from .. import time_limit
from .compiler import DONE, EXIT, FUNCTION_BASE, CompiledFunction
from .errors import PtxBarrierError, PtxError
from .memory import thread_text
from .wgmma_async import group_keys

PARKING = ("bar", "group")  # sync kinds that span warps: a warp running alone stops there
WAIT = 1 << 24  # pcs value WAIT + b: waiting at the sync block b
DEAD = 1 << 30  # pcs value of a thread that has left the function
STACK_CAP = 1 << 16  # bytes of stack per thread at most

# The endless-loop guard: warp instructions one batch of blocks may issue.  A count, not
# seconds, so it trips at the same instruction under any load; 2 million is about 1-10 s
# of a simple loop on a 2-core machine (0.5-5 us an instruction, more for big divergent batches).
DEFAULT_INSTRUCTION_BUDGET = 2_000_000
BUDGET_VARIABLE = "ACCY_EMULATOR_BUDGET"


def instruction_budget(given=None) -> int:
    """The budget a launch runs under: ``given`` (a launch's or a Device's), else the
    ``ACCY_EMULATOR_BUDGET`` environment variable, else DEFAULT_INSTRUCTION_BUDGET."""
    if given is None:
        text = os.environ.get(BUDGET_VARIABLE, "").strip().replace("_", "")
        if not text:
            return DEFAULT_INSTRUCTION_BUDGET
        if not text.isdigit() or int(text) < 1:
            raise PtxError(f"{BUDGET_VARIABLE} must be a positive number of warp instructions, "
                           f"got {os.environ[BUDGET_VARIABLE]!r}")
        return int(text)
    if isinstance(given, bool) or not isinstance(given, (int, np.integer)) or given < 1:
        raise PtxError(f"instruction_budget must be a positive int (warp instructions), got {given!r}")
    return int(given)


class Budget:
    """The warp instructions a batch may still issue, shared by its entry activation and
    every call it makes.  The scheduler counts each basic block it runs once, whichever of
    the batch's threads run it: a converged batch counts what each of its warps executes,
    and divergent paths add up, so the count is never below the busiest warp's own."""

    __slots__ = ("limit", "left")

    def __init__(self, limit: int):
        self.limit = limit
        self.left = limit


class Context:
    """The threads running one function activation: their registers and identity."""

    PER_THREAD = ("tid", "ctaid")
    # bt: the thread's number in its batch (the race checker's clocks are indexed by it)
    ARRAYS = ("lane", "warp", "wkey", "cta", "sbase", "lbase", "orig", "bt")
    races = None  # the launch's race checker (accy.emulator.races.LaunchRaces)
    prof = None  # a profiled launch's counters (see .profile); the compiled code tests it

    def __init__(self):
        self.R: list = []
        self.n = 0

    def subset(self, pos) -> "Context":
        """A context for the threads ``pos`` (None: all) sharing this one's launch state."""
        T = Context.__new__(Context)
        T.__dict__.update(self.__dict__)
        if pos is None:
            T.tid = self.tid
            T.ctaid = self.ctaid
            for name in self.ARRAYS:
                setattr(T, name, getattr(self, name))
            T.orig = np.arange(self.n)
            T.n = self.n
        else:
            T.tid = tuple(a[pos] for a in self.tid)
            T.ctaid = tuple(a[pos] for a in self.ctaid)
            for name in self.ARRAYS:
                setattr(T, name, getattr(self, name)[pos])
            T.orig = np.arange(len(pos))
            T.n = len(pos)
        T.R = []
        return T

    def compact(self, keep) -> None:
        """Keep only the threads ``keep`` (positions, ascending)."""
        self.R = [r[keep] for r in self.R]
        self.tid = tuple(a[keep] for a in self.tid)
        self.ctaid = tuple(a[keep] for a in self.ctaid)
        for name in self.ARRAYS:
            setattr(self, name, getattr(self, name)[keep])
        self.n = len(keep)


class Program:
    """A module's compiled functions as loaded on one device."""

    def __init__(self, functions: dict[str, CompiledFunction], order: list[str]):
        self.functions = functions
        self.by_address = {FUNCTION_BASE + 16 * i: name for i, name in enumerate(order)}
        self.stack = _stack_sizes(functions)
        # a barrier inside a called function: such kernels run in lockstep (a warp cannot
        # stop at a barrier in the middle of a call and let the next warp run)
        self.barrier_in_call = any(cf.fc.fn.kind != "entry" and any(
            b.kind == "sync" and b.info.kind == "bar" and not b.info.arrive for b in cf.blocks)
            for cf in functions.values())


def _stack_sizes(functions) -> dict[str, int]:
    """Bytes of stack each function needs with its callees (None for recursion)."""
    sizes: dict = {}

    def need(name, path):
        if name in sizes:
            return sizes[name]
        if name in path:
            return None
        cf = functions.get(name)
        if cf is None:
            return 0
        own = cf.fc.depot
        deepest = 0
        for blk in cf.blocks:
            if blk.kind == "call":
                callee = blk.info.callee
                if callee is None:  # indirect: any function
                    cands = list(functions)
                else:
                    cands = [callee]
                for c in cands:
                    sub = need(c, path | {name})
                    if sub is None:
                        sizes[name] = None
                        return None
                    deepest = max(deepest, sub)
        sizes[name] = own + deepest
        return sizes[name]

    for name in functions:
        need(name, frozenset())
    return sizes


def _initial_registers(cf: CompiledFunction, n: int) -> list:
    fc = cf.fc
    zeros: dict = {}
    R = []
    for idx, S in enumerate(fc.storage):
        if S is None:
            R.append(np.zeros((n, fc.param_sizes[idx]), np.uint8))
            continue
        z = zeros.get(S)
        if z is None:
            z = zeros[S] = np.zeros(n, S)
        R.append(z)
    return R


class Frame:
    """The scheduler's state for one function activation."""

    def __init__(self, prog: Program, cf: CompiledFunction, T: Context, entry: bool):
        self.prog, self.cf, self.T, self.entry = prog, cf, T, entry
        self.blocks = cf.blocks
        if cf.exit_code is None:  # once per function: a schedule makes many frames
            cf.exit_code = np.array([b.exits for b in cf.blocks], np.int64)
            # what running each block costs the budget (an empty block, e.g. the implicit end, counts 1)
            cf.costs = [max(1, len(b.instructions)) for b in cf.blocks]
        self.exit_code, self.costs = cf.exit_code, cf.costs
        n = T.n
        self.n0 = n
        self.exited = np.zeros(n, bool)
        self.rets = []
        if not entry:
            fc = cf.fc
            self.rets = [(fc.param_regs[r.name], np.zeros((n, fc.param_sizes[fc.param_regs[r.name]]), np.uint8))
                         for r in fc.fn.rets]
        self.pcs = None
        self.ndead = 0
        self.park = False  # stop threads at barriers instead of completing them (one warp slot of a schedule)

    # -- leaving ---------------------------------------------------------------------------------
    def retire(self, pos, code: int) -> None:
        """Threads ``pos`` (positions in T) leave the function with ``code`` (DONE/EXIT)."""
        T = self.T
        if len(pos) == 0:
            return
        orig = T.orig[pos]
        if code == EXIT:
            self.exited[orig] = True
        for idx, buf in self.rets:
            buf[orig] = T.R[idx][pos]
        self.pcs[pos] = DEAD
        self.ndead += len(pos)

    def retire_all(self, code: int) -> None:
        T = self.T
        if code == EXIT:
            self.exited[T.orig] = True
        for idx, buf in self.rets:
            buf[T.orig] = T.R[idx]

    def assign(self, pos, targets) -> None:
        """Send threads ``pos`` to ``targets`` (a block number or an array of them)."""
        if isinstance(targets, (int, np.integer)):
            t = int(targets)
            code = t if t < 0 else int(self.exit_code[t])
            if code:
                self.retire(pos, code)
            else:
                self.pcs[pos] = t
            return
        targets = np.asarray(targets, np.int64)
        code = np.where(targets < 0, targets, self.exit_code[np.maximum(targets, 0)])
        if not code.any():
            self.pcs[pos] = targets
            return
        live = code == 0
        self.pcs[pos[live]] = targets[live]
        for c in (DONE, EXIT):
            m = code == c
            if m.any():
                self.retire(pos[m], c)

    def maybe_compact(self, force: bool = False) -> None:
        T = self.T
        if self.ndead and (force or self.ndead * 4 >= T.n):
            keep = np.flatnonzero(self.pcs < DEAD)
            T.compact(keep)
            self.pcs = self.pcs[keep]
            self.ndead = 0

    # -- running -----------------------------------------------------------------------------------
    def run(self, pc: int = 0):
        """Run to the end (or, with ``park``, until every thread waits at a barrier); converged
        from block ``pc``, or from ``self.pcs`` where that is set."""
        T = self.T
        blocks, costs, budget = self.blocks, self.costs, T.budget
        steps = 0
        limit = T.step_limit if T.step_limit is not None else sys.maxsize
        while True:
            steps += 1
            if not steps & 255:  # a run past its time limit (accy.time_limit) stops here
                time_limit.check()
            if steps > limit:
                info = blocks[pc if self.pcs is None else int(self.pcs.min()) % WAIT].instructions
                where = info[0] if info else None
                raise PtxError(f"the kernel ran more than {limit} blocks in {self.cf.name} without finishing "
                               f"(an endless loop?); Device(step_limit=...) raises the limit",
                               line=where.line if where else None, source=where.text if where else None)
            if self.pcs is None:
                if T.n == 0:
                    return self.finish()
                budget.left -= costs[pc]
                if budget.left < 0:
                    self.out_of_budget(pc, None)
                blk = blocks[pc]
                kind = blk.kind
                if kind == "code":
                    r = blk.full(T)
                elif kind == "sync":
                    if self.park and blk.info.kind in PARKING and not blk.info.arrive:
                        self.pcs = np.full(T.n, WAIT + pc, np.int64)
                        return self.finish()
                    if blk.info.kind == "mbar":  # an mbarrier wait: the threads whose phase is complete go on
                        self.pcs = np.full(T.n, pc, np.int64)
                        self.sync(pc, blk, np.arange(T.n))
                        continue
                    r = blk.full(T, None)
                    if T.races is not None and blk.info.kind not in ("group", "mbar"):
                        self.synced(blk.info, np.arange(T.n), None)
                else:
                    r = self.call(blk, None)
                    if self.pcs is not None:  # some threads exited inside the call
                        self.maybe_compact()
                        continue
                if type(r) is int:
                    if r >= 0:
                        code = blocks[r].exits
                        if not code:
                            pc = r
                            continue
                        r = code
                    self.retire_all(r)
                    return self.finish()
                # the threads split
                if isinstance(r, tuple):
                    p, a, b = r
                    targets = np.where(p, a, b)
                else:
                    targets = np.asarray(r, np.int64)
                self.pcs = np.zeros(T.n, np.int64)
                self.assign(np.arange(T.n), targets)
                self.maybe_compact()
                continue
            # diverged
            pcs = self.pcs
            m = int(pcs.min())
            if m >= WAIT:
                if m >= DEAD or self.park:  # parked: the scheduler completes the barriers
                    return self.finish()
                if self.poll_mbarriers():  # a wait whose phase completed meanwhile goes on
                    continue
                self.deadlock()
            sel = np.flatnonzero(pcs == m)
            if len(sel) == T.n - self.ndead:
                # every live thread is here: back to whole arrays
                self.maybe_compact(force=True)
                self.pcs = None
                pc = m
                continue
            budget.left -= costs[m]
            if budget.left < 0:
                self.out_of_budget(m, sel)
            blk = blocks[m]
            kind = blk.kind
            if kind == "code":
                r = blk.sel(T, sel)
                if type(r) is int:
                    self.assign(sel, r)
                elif isinstance(r, tuple):
                    p, a, b = r
                    self.assign(sel, np.where(p, a, b))
                else:
                    self.assign(sel, r)
                self.maybe_compact()
            elif kind == "sync":
                self.sync(m, blk, sel)
            else:
                self.call(blk, sel)
                self.maybe_compact()

    def finish(self):
        return self.exited, [buf for _, buf in self.rets]

    def out_of_budget(self, b: int, sel) -> None:
        """The batch issued its whole instruction budget: stop it as an endless loop, naming
        the block it was running (its label and PTX lines) and a thread there."""
        T, blk = self.T, self.blocks[b]
        first, last = (blk.instructions[0], blk.instructions[-1]) if blk.instructions else (None, None)
        labels = [name for name, at in self.cf.fc.labels_at.items() if at == blk.first and blk.instructions]
        where = ""
        if first is not None:
            lines = f"line {first.line}" if first.line == last.line else f"lines {first.line}-{last.line}"
            where = f"; it was running the block at PTX {lines}" + (f" ({labels[0]})" if labels else "")
        budget = T.budget.limit
        raise PtxError(f"the kernel issued more than {budget:,} warp instructions in {self.cf.name} without "
                       f"finishing (an endless loop?){where}. The emulator's instruction budget bounds each "
                       f"batch of blocks; raise it with {BUDGET_VARIABLE}=N, Device(instruction_budget=N) or "
                       f"Function.launch(..., instruction_budget=N)",
                       line=first.line if first is not None else None, source=first.text if first else None,
                       thread=thread_text(T, 0 if sel is None else sel[0]) if T.n else None)

    # -- barriers and warp synchronisation -------------------------------------------------------------
    def sync(self, m: int, blk, sel) -> None:
        T = self.T
        info = blk.info
        pcs = self.pcs
        if info.kind == "bar" and info.arrive:
            blk.sel(T, sel)
            self.assign(sel, blk.next)
            return
        if info.kind in PARKING and self.park:
            pcs[sel] = WAIT + m
            return
        waiting = np.flatnonzero(pcs == WAIT + m)
        arrived = np.union1d(sel, waiting) if len(waiting) else sel
        alive = pcs < DEAD
        if info.kind == "bar":
            release = self._complete(info, arrived, alive)
        elif info.kind == "mbar":
            release = arrived[np.asarray(info.group(T, arrived), bool)]
        elif info.kind == "group":
            release = self._group_complete(arrived, alive)
        else:
            masks = info.group(T, arrived).astype(np.uint64)
            wk = T.wkey[arrived]
            lane = T.lane[arrived].astype(np.uint64)
            nw = T.nwkeys
            arrived_bits = np.zeros(nw, np.uint64)
            np.add.at(arrived_bits, wk, np.left_shift(np.uint64(1), lane))
            alive_pos = np.flatnonzero(alive)
            alive_bits = np.zeros(nw, np.uint64)
            np.add.at(alive_bits, T.wkey[alive_pos], np.left_shift(np.uint64(1), T.lane[alive_pos].astype(np.uint64)))
            wanted = np.zeros(nw, np.uint64)
            np.bitwise_or.at(wanted, wk, masks)
            missing = wanted & alive_bits & ~arrived_bits
            release = arrived[missing[wk] == 0]
        if len(release):
            blk.sel(T, release)
            if T.races is not None and info.kind not in ("group", "mbar"):  # a collective orders no memory
                self.synced(info, release, None if info.kind == "bar" else alive_bits & ~wanted)
            self.assign(release, blk.next)
        held = np.setdiff1d(arrived, release, assume_unique=True)
        if len(held):
            pcs[held] = WAIT + m

    def poll_mbarriers(self) -> bool:
        """Release the threads waiting at mbarrier waits whose phase has completed; whether any."""
        pcs = self.pcs
        waiting = pcs[(pcs >= WAIT) & (pcs < DEAD)]
        released = False
        for m in np.unique(waiting) - WAIT:
            blk = self.blocks[int(m)]
            if blk.info.kind != "mbar":
                continue
            before = int(np.count_nonzero(pcs == WAIT + m))
            self.sync(int(m), blk, np.zeros(0, np.int64))
            released |= int(np.count_nonzero(self.pcs == WAIT + m)) < before
        return released

    def _complete(self, info, arrived, alive):
        """The threads of ``arrived`` (waiting at the barrier ``info``) whose block's barrier is
        complete: every live thread of the block there, or the barrier's thread count."""
        T = self.T
        cta = T.cta[arrived]
        ncta = int(T.cta.max()) + 1
        live = np.bincount(T.cta[alive], minlength=ncta)
        here = np.bincount(cta, minlength=ncta)
        expected = live
        if info.count is not None:
            counts = info.count(T, arrived).astype(np.int64)
            per = np.zeros(ncta, np.int64)
            per[cta] = counts
            expected = np.where(per > 0, np.minimum(per, live), live)
        complete = here >= expected
        return arrived[complete[cta]]

    def _group_complete(self, arrived, alive):
        """The threads of ``arrived`` (waiting at a warpgroup collective) whose warpgroup's live
        threads are all there (the instruction checks that they are 128)."""
        T = self.T
        keys = group_keys(T, np.arange(T.n))
        size = int(keys.max()) + 1
        live = np.bincount(keys[alive], minlength=size)
        here = np.bincount(keys[arrived], minlength=size)
        return arrived[(here >= live)[keys[arrived]]]

    # -- warps one at a time -----------------------------------------------------------------------
    def run_slots(self, schedule, first_block: int) -> None:
        """Run the entry function with each warp alone up to its next barrier: in each round,
        warp slot k of every block of the batch runs (vectorised across the blocks) until each
        of its threads waits at a barrier or has left, for k = 0, 1, ...; the schedule says
        which of a block's warps takes slot k.  Then the complete barriers release their
        threads, and the next round begins.  The threads keep their places in ``T``."""
        T = self.T
        warps = T.nwarps
        blocks = int(T.cta.max()) + 1
        T.budget.left = T.budget.limit * warps  # each warp runs on its own: as many block runs as warps
        self.pcs = pcs = np.zeros(T.n, np.int64)
        round_ = 0
        while True:
            runnable = pcs < WAIT
            if runnable.any():
                turn = np.asarray(schedule.slots(first_block, blocks, warps, round_))[T.cta, T.warp]
                for k in range(warps):
                    pos = np.flatnonzero(runnable & (turn == k))
                    if len(pos):
                        self._run_slot(pos)
                round_ += 1
            if not self._release_barriers():
                if (pcs < DEAD).any():
                    self.deadlock()
                return

    def _run_slot(self, pos) -> None:
        """Run the threads ``pos`` (one warp of each of some blocks) until they park at barriers
        or leave; their registers and places go back into ``T``."""
        T, pcs = self.T, self.pcs
        sub = T.subset(pos)
        gathered = [r[pos] for r in T.R]
        sub.R = list(gathered)
        frame = Frame(self.prog, self.cf, sub, entry=True)
        frame.park = True
        start = pcs[pos]
        if (start == start[0]).all():
            frame.run(int(start[0]))
        else:
            frame.pcs = start.copy()
            frame.run()
        # the threads the frame dropped have left; the others wait at barriers (or left too)
        pcs[pos] = DEAD
        if frame.pcs is None:
            return  # every one of them left
        stay = pos[sub.orig]
        pcs[stay] = frame.pcs
        for idx, (before, after) in enumerate(zip(gathered, sub.R)):
            if after is not before:
                T.R[idx] = _put_rows(T.R[idx], stay, after)

    def _release_barriers(self) -> bool:
        """Complete every barrier whose block's threads have all arrived; whether any did."""
        T, pcs = self.T, self.pcs
        waiting = np.flatnonzero((pcs >= WAIT) & (pcs < DEAD))
        released = False
        for m in np.unique(pcs[waiting]) - WAIT:
            blk = self.blocks[int(m)]
            if blk.info.kind not in PARKING + ("mbar",):
                continue  # a warp instruction waiting across rounds can never complete
            arrived = waiting[pcs[waiting] == WAIT + m]
            if blk.info.kind == "mbar":  # an mbarrier wait whose phase another warp completed
                release = arrived[np.asarray(blk.info.group(T, arrived), bool)]
            elif blk.info.kind == "group":  # the warpgroup's warps ran alone up to it
                release = self._group_complete(arrived, pcs < DEAD)
            else:
                release = self._complete(blk.info, arrived, pcs < DEAD)
            if len(release):
                blk.sel(T, release)
                if T.races is not None and blk.info.kind == "bar":
                    self.synced(blk.info, release, None)
                self.assign(release, blk.next)
                released = True
        return released

    def synced(self, info, pos, uncovered) -> None:
        """Tell the race checker that the threads ``pos`` completed the barrier or warp-synchronous
        instruction ``info``.  A warp instruction orders a warp's lanes only where its member mask
        covers every running lane of the warp (``uncovered``: per warp key, the running lanes no
        mask named; None: to be computed)."""
        T = self.T
        races = T.races
        if info.kind == "bar":
            if not info.arrive:
                races.barrier(T.bt[pos])
            return
        if uncovered is None and not info.full_mask:
            masks = info.group(T, pos).astype(np.uint64)
            nw = T.nwkeys
            wanted = np.zeros(nw, np.uint64)
            np.bitwise_or.at(wanted, T.wkey[pos], masks)
            running = np.zeros(nw, np.uint64)
            np.bitwise_or.at(running, T.wkey[pos], np.left_shift(np.uint64(1), T.lane[pos].astype(np.uint64)))
            uncovered = running & ~wanted
        if uncovered is not None:
            pos = pos[uncovered[T.wkey[pos]] == 0]
        races.warp_sync(T.bt[pos])
        proxy = getattr(T, "proxy", None)
        if proxy is not None and proxy.active:
            proxy.warp_sync(T, pos)

    def deadlock(self):
        """No thread can run and some wait: explain which barrier cannot complete."""
        T = self.T
        pcs = self.pcs
        waiting = np.flatnonzero((pcs >= WAIT) & (pcs < DEAD))
        alive = pcs < DEAD
        first = waiting[0]
        cta = T.cta[first]
        same_cta = waiting[T.cta[waiting] == cta]
        places = sorted(set(int(b) for b in pcs[same_cta] - WAIT))
        infos = [self.blocks[b].info for b in places]

        def where(b):
            info = self.blocks[b].info
            return (f"line {info.line} ({info.text.strip()}): "
                    f"{int(np.count_nonzero(pcs[same_cta] == WAIT + b))} threads")

        bars = [i for i in infos if i.kind == "bar"]
        info = bars[0] if bars else infos[0]
        thread = thread_text(T, same_cta[0])
        waits = [b for b in places if self.blocks[b].info.kind == "mbar"]
        if waits:
            info = self.blocks[waits[0]].info
            why = "; ".join(f"{where(b)}, {self.blocks[b].info.explain(T, same_cta[pcs[same_cta] == WAIT + b])}"
                            for b in waits)
            others = [where(b) for b in places if b not in waits]
            raise PtxBarrierError(f"deadlock: every live thread of the block waits, and no pending arrival or "
                                  f"asynchronous copy can complete the mbarrier phases waited on ({why})"
                                  + (f"; others wait at {'; '.join(others)}" if others else ""),
                                  line=info.line, source=info.text, thread=thread)
        if len(places) > 1 and len(bars) == len(infos):
            raise PtxBarrierError(f"the threads of a block wait at different barriers "
                                  f"({'; '.join(where(b) for b in places)})",
                                  line=info.line, source=info.text, thread=thread)
        if len(places) > 1:
            raise PtxBarrierError(f"a barrier can never complete: the block's threads wait at a barrier and at "
                                  f"warp-synchronous instructions that wait for each other "
                                  f"({'; '.join(where(b) for b in places)})",
                                  line=info.line, source=info.text, thread=thread)
        if info.kind == "bar":
            n_live = int(np.count_nonzero(alive & (T.cta == cta)))
            raise PtxBarrierError(f"barrier can never complete: {len(same_cta)} of the block's {n_live} live "
                                  f"threads arrived and the others cannot", line=info.line, source=info.text,
                                  thread=thread)
        if info.kind == "group":
            raise PtxBarrierError(f"{info.text.split()[0]} is warpgroup-collective (.sync.aligned): the 128 threads of "
                                  f"the warpgroup must execute it together, but some never arrive (they exited or "
                                  f"wait elsewhere)", line=info.line, source=info.text, thread=thread)
        raise PtxBarrierError("a warp-synchronous instruction waits for threads of its member mask that never "
                              "arrive (they exited or wait elsewhere)", line=info.line, source=info.text,
                              thread=thread)

    # -- calls ----------------------------------------------------------------------------------------------
    def call(self, blk, sel):
        """Run the callee for the threads ``sel`` (None: all); returns the next block (converged
        mode) after recording the threads that executed ``exit``."""
        T = self.T
        info = blk.info
        prog = self.prog
        pos = np.arange(T.n) if sel is None else sel
        callers = pos
        if info.guard is not None:
            g = info.guard(T, pos)
            callers = pos[np.asarray(g, bool)]
        groups = []
        if info.callee is not None:
            groups.append((info.callee, callers))
        elif len(callers):
            addrs = np.asarray(info.target(T, callers), np.uint64)
            for a in np.unique(addrs):
                name = prog.by_address.get(int(a))
                if name is None or name not in prog.functions:
                    raise PtxError(f"indirect call to 0x{int(a):x}, which is not a function",
                                   line=info.line, source=info.text, thread=thread_text(T, callers[0]))
                groups.append((name, callers[addrs == a]))
        exited = []
        for name, gp in groups:
            if len(gp) == 0:
                continue
            cf = prog.functions.get(name)
            if cf is None:
                raise PtxError(f"call of {name}, which is declared but not defined in this module",
                               line=info.line, source=info.text)
            exited.append(gp[self.invoke(cf, gp, info)])
        ex = np.concatenate(exited) if exited else np.zeros(0, np.int64)
        if sel is None:
            if len(ex) == 0:
                return blk.next
            self.pcs = np.zeros(T.n, np.int64)  # the threads split: run() sees self.pcs
            self.assign(pos, blk.next)
            self.retire(ex, EXIT)
            return None
        self.assign(sel, blk.next)
        if len(ex):
            self.retire(ex, EXIT)
        return None

    def invoke(self, cf: CompiledFunction, gp, info):
        T = self.T
        fc = cf.fc
        whole = len(gp) == T.n and (gp == np.arange(T.n)).all()
        T2 = T.subset(None if whole else gp)
        R2 = _initial_registers(cf, len(gp))
        params = fc.fn.params
        if len(info.args) != len(params):
            raise PtxError(f"call of {fc.fn.name} with {len(info.args)} arguments; it takes {len(params)}",
                           line=info.line, source=info.text)
        for reg, p in zip(info.args, params):
            value = T.R[reg] if whole else T.R[reg][gp]
            idx = fc.param_regs[p.name]
            R2[idx] = _fit(value, fc.param_sizes[idx])
        T2.R = R2
        T2.frame = T.frame + self.cf.fc.depot
        T2.local_limit = T2.frame + fc.depot
        if T2.local_limit > T.lstride:
            raise PtxError(f"stack overflow: calling {fc.fn.name} needs {T2.local_limit} bytes of local memory "
                           f"per thread, over the emulator's {T.lstride}", line=info.line, source=info.text)
        exited, rets = Frame(self.prog, cf, T2, entry=False).run()
        if len(info.rets) > len(rets):
            raise PtxError(f"call of {fc.fn.name} expects {len(info.rets)} results; it returns {len(rets)}",
                           line=info.line, source=info.text)
        for reg, value in zip(info.rets, rets):
            size = T.R[reg].shape[1]
            fitted = _fit(value, size)
            T.R[reg] = fitted if whole else _put_rows(T.R[reg], gp, fitted)
        return exited


def _fit(value, size):
    if value.shape[1] == size:
        return value
    out = np.zeros((value.shape[0], size), np.uint8)
    k = min(size, value.shape[1])
    out[:, :k] = value[:, :k]
    return out


def _put_rows(old, pos, rows):
    new = old.copy()
    new[pos] = rows
    return new


def run_entry(prog: Program, cf: CompiledFunction, T: Context, schedule=None, first_block: int = 0) -> None:
    """Run the kernel ``cf`` for the threads of ``T`` (a batch of whole blocks, ``first_block``
    the first) under ``schedule`` (None: lockstep)."""
    T.R = _initial_registers(cf, T.n)
    T.frame = 0
    T.local_limit = cf.fc.depot
    frame = Frame(prog, cf, T, entry=True)
    if schedule is None or schedule.lockstep or T.nwarps < 2 or prog.barrier_in_call:
        frame.run()
    else:
        frame.run_slots(schedule, first_block)
