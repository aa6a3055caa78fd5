"""The PTX emulator's endless-loop guard: an instruction budget (warp instructions a batch of
blocks may issue), not seconds, so it trips at the same instruction under any load.  It is set
by ``ACCY_EMULATOR_BUDGET``, ``Device(instruction_budget=...)`` or
``Function.launch(..., instruction_budget=...)``, and its error names the budget, how to raise
it and the PTX block the kernel was spinning in."""

from __future__ import annotations

import re

import numpy as np
import pytest

from accy import axis, dynamic_buffer, f32, index, kernel, scalar
from accy.codegen.nvptx import toolchain
from accy.emulator import Device, PtxError
from accy.emulator.executor import BUDGET_VARIABLE, DEFAULT_INSTRUCTION_BUDGET


def _ptx(name: str, body: str) -> str:
    text = (".version 8.3\n.target sm_80\n.address_size 64\n\n"
            f".visible .entry {name}(\n  .param .u64 buf\n)\n{{\n"
            "  .reg .pred %p<4>;\n  .reg .b32 %r<8>;\n  .reg .b64 %rd<4>;\n" + body.strip("\n") + "\n}\n")
    if toolchain.find_ptxas() is not None:  # the emulator runs only PTX that ptxas accepts
        toolchain.assemble(text, "sm_80")
    return text


FOREVER = _ptx("forever", """
$SPIN:
  bra.uni $SPIN;
""")

# 1 + 3 * 10 warp instructions: mov, ten times (add, setp, bra); threads leave at the ret
# without running it as a block
TEN_TRIPS = _ptx("ten", """
  mov.u32 %r1, 0;
$LOOP:
  add.u32 %r1, %r1, 1;
  setp.lt.u32 %p1, %r1, 10;
  @%p1 bra $LOOP;
  ret;
""")
TEN_TRIPS_COST = 31


def _launch(ptx, name, device=None, grid=1, block=32, **options):
    device = device or Device()
    device.load_module(ptx).function(name).launch(grid, block, [0], **options)


def test_an_endless_loop_trips_the_budget_naming_it_how_to_raise_it_and_where_it_spins():
    with pytest.raises(PtxError) as caught:
        _launch(FOREVER, "forever", Device(instruction_budget=1000))
    message = str(caught.value)
    assert "more than 1,000 warp instructions" in message and "endless loop" in message
    for way in (f"{BUDGET_VARIABLE}=N", "Device(instruction_budget=N)", "instruction_budget=N)"):
        assert way in message
    assert "($SPIN)" in message and re.search(r"at PTX line \d+: bra\.uni \$SPIN;", message)
    assert "block (0, 0, 0) thread (0, 0, 0)" in message
    assert caught.value.line == FOREVER.splitlines().index("  bra.uni $SPIN;") + 1


def test_the_budget_counts_the_warp_instructions_a_converged_batch_runs():
    _launch(TEN_TRIPS, "ten", Device(instruction_budget=TEN_TRIPS_COST))  # exactly enough
    with pytest.raises(PtxError, match="more than 30 warp instructions") as caught:
        _launch(TEN_TRIPS, "ten", Device(instruction_budget=TEN_TRIPS_COST - 1))
    assert "the block at PTX lines" in str(caught.value) and "($LOOP)" in str(caught.value)


def test_each_batch_of_blocks_has_its_own_budget():
    # 32 blocks of 1024 threads run as two batches of 16 blocks: the budget bounds what one warp runs,
    # so the launch size does not use it up
    _launch(TEN_TRIPS, "ten", Device(instruction_budget=TEN_TRIPS_COST), grid=32, block=1024)


def test_a_launch_argument_overrides_the_device_and_the_environment(monkeypatch):
    monkeypatch.setenv(BUDGET_VARIABLE, "5")
    device = Device(instruction_budget=10**9)
    _launch(TEN_TRIPS, "ten", device)  # the device's budget, not the variable's
    with pytest.raises(PtxError, match="more than 100 warp instructions"):
        _launch(FOREVER, "forever", device, instruction_budget=100)


def test_the_environment_variable_sets_the_default_at_each_launch(monkeypatch):
    device = Device()
    monkeypatch.setenv(BUDGET_VARIABLE, "2_000")
    with pytest.raises(PtxError, match="more than 2,000 warp instructions"):
        _launch(FOREVER, "forever", device)
    monkeypatch.setenv(BUDGET_VARIABLE, "lots")
    with pytest.raises(PtxError, match=f"{BUDGET_VARIABLE} must be a positive number of warp instructions, "
                                       "got 'lots'"):
        _launch(TEN_TRIPS, "ten", device)
    monkeypatch.delenv(BUDGET_VARIABLE)
    assert DEFAULT_INSTRUCTION_BUDGET > 100 * TEN_TRIPS_COST
    _launch(TEN_TRIPS, "ten", device)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "100"])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(PtxError, match=r"instruction_budget must be a positive int \(warp instructions\), got "):
        Device(instruction_budget=bad)
    with pytest.raises(PtxError, match=r"instruction_budget must be a positive int"):
        _launch(TEN_TRIPS, "ten", instruction_budget=bad)


def test_a_fold_with_a_huge_run_time_trip_count_trips_the_budget_on_the_ptx_backend(monkeypatch):
    @kernel(dst=dynamic_buffer(f32), n=scalar(index))
    def spin(k, a):
        @k.for_each_1d(axis("i", a.dst.size))
        def each(inner, idx):
            a.dst[idx["i"]] = inner.fold_range(0, a.n, 1, 0.0, lambda inner, j, s: s + 1.0)

    monkeypatch.setenv(BUDGET_VARIABLE, "20000")
    dst = np.full(64, 7.0, np.float32)
    with pytest.raises(PtxError, match=r"more than 20,000 warp instructions in spin .*endless loop") as caught:
        spin.run([dst, 2**62], backend="ptx")
    assert caught.value.line is not None and "add.rn.f32" in str(caught.value)  # the loop's body
    assert (dst == 7.0).all()  # outputs untouched
