"""The ``cuda`` backend's host half without a GPU: each driver (cuda.core, PyCUDA) is driven
with recording fakes of its library, and the backend's state with a recording driver, up to the
driver call: the parameters and their widths, the buffer sizes, the status word, copy-back,
streams, and ACCY_CUDA_DRIVER's choice and errors.  The ``ptx`` backend is checked to reach its
emulator through the same :class:`~accy.runtime.gpu.DeviceLaunch`.  The fakes live here only:
no backend is registered for them."""

from __future__ import annotations

import ctypes
import enum
import sys
import types

import numpy as np
import pytest

from accy import Program, axis, dynamic_buffer, f32, scalar
from accy.runtime import cuda, drivers
from accy.codegen.abi import STATUS_STORE_OOB, STATUS_WORDS
from accy.runtime.drivers import DRIVERS, KernelLaunch, choose, foreign_stream_handle
from accy.runtime.drivers.cuda_core import CudaCoreDriver
from accy.runtime.drivers.emulator import EmulatorDriver
from accy.runtime.drivers.pycuda_driver import PycudaDriver
from accy.errors import ArgumentError, BackendUnavailableError, ExecutionError, OutOfBoundsError


def scale_program():
    def body(k, a):
        k.for_each_1d(axis("i", a.src.size), lambda inner, idx: a.dst.store(inner, a.src[idx["i"]] * a.scale,
                                                                           idx["i"]))

    return Program("scale", {"dst": dynamic_buffer(f32), "src": dynamic_buffer(f32), "scale": scalar(f32)}, body)


def store_ordinal(graph) -> int:
    return next(i for i, op in enumerate(graph.body.walk()) if op.opcode == "store")


class Memory:
    """Device memory for the fakes: addresses are ints, bytes are NumPy arrays."""

    def __init__(self):
        self.blocks: dict[int, np.ndarray] = {}
        self.next = 1 << 20

    def alloc(self, nbytes: int) -> int:
        address, self.next = self.next, self.next + ((nbytes + 511) // 256) * 256
        self.blocks[address] = np.full(nbytes, 0xAB, np.uint8)  # garbage until written
        return address

    def free(self, address: int) -> None:
        del self.blocks[address]

    def view(self, address: int, nbytes: int) -> np.ndarray:
        for start, block in self.blocks.items():
            if start <= address and address + nbytes <= start + block.size:
                return block[address - start:address - start + nbytes]
        raise AssertionError(f"no live allocation holds {nbytes} bytes at {address:#x}")


class RecordingDriver:
    """A driver that records every call; its kernel is a Python function of (memory, spec)."""

    name = "recording"
    arch = "sm_80"

    def __init__(self, kernel=None):
        self.memory, self.kernel = Memory(), kernel
        self.calls: list[tuple] = []
        self.sizes: dict[int, int] = {}
        self.launches: list[KernelLaunch] = []

    def push_context(self):
        self.calls.append(("push",))

    def pop_context(self):
        self.calls.append(("pop",))

    def stream(self, obj):
        if obj is not None and not isinstance(obj, str):
            raise drivers.stream_error(self.name, obj, "a str")
        return obj

    def load(self, ptx, entry):
        self.calls.append(("load", entry))
        assert f".entry {entry}" in ptx
        return ("kernel", entry)

    def alloc(self, nbytes):
        address = self.memory.alloc(nbytes)
        self.sizes[address] = nbytes
        self.calls.append(("alloc", nbytes))
        return address

    def free(self, address):
        self.memory.free(address)
        self.calls.append(("free", self.sizes[address]))

    def copy_to_device(self, address, host, stream):
        self.memory.view(address, host.nbytes)[:] = host.reshape(-1).view(np.uint8)
        self.calls.append(("htod", host.nbytes, stream))

    def copy_from_device(self, host, address, stream):
        host.reshape(-1).view(np.uint8)[:] = self.memory.view(address, host.nbytes)
        self.calls.append(("dtoh", host.nbytes, stream))

    def copy_device(self, dst, src, nbytes, stream):
        self.memory.view(dst, nbytes)[:] = self.memory.view(src, nbytes)
        self.calls.append(("dtod", nbytes, stream))

    def memset(self, address, value, nbytes, stream):
        self.memory.view(address, nbytes)[:] = value
        self.calls.append(("memset", value, nbytes, stream))

    def launch(self, kernel, spec, stream):
        self.launches.append(spec)
        self.calls.append(("launch", kernel, stream))
        if self.kernel is not None:
            self.kernel(self.memory, spec)

    def synchronize(self, stream):
        self.calls.append(("sync", stream))

    def record(self, stream):
        self.calls.append(("record", stream))
        return len(self.calls)

    def elapsed_ms(self, start, end):
        return 1.5


def scale_kernel(memory, spec):
    """What the scale kernel computes, from its parameters alone."""
    dst, src, n_dst, n_src, scale_bits, _ = (int(p) for p in spec.params)
    scale = np.uint32(scale_bits).view(np.float32)
    values = memory.view(src, 4 * n_src).view(np.float32)
    memory.view(dst, 4 * n_dst).view(np.float32)[:] = values * scale


@pytest.fixture
def gpu(monkeypatch):
    """The cuda backend's device 0 state, on a recording driver."""
    def use(driver):
        monkeypatch.setitem(cuda._states, 0, cuda.CudaBackendState(0, driver=driver))
        return driver

    return use


def test_parameters_reach_the_driver_in_abi_order_at_their_widths(gpu):
    driver = gpu(RecordingDriver(scale_kernel))
    dst, src = np.zeros(5, np.float32), np.arange(5, dtype=np.float32)
    scale_program().run([dst, src, 2.5], backend="cuda")
    assert dst.tolist() == [0.0, 2.5, 5.0, 7.5, 10.0]
    (spec,) = driver.launches
    launch = scale_program().launch(args=[dst, src, 2.5])
    assert (spec.grid, spec.block, spec.shared_bytes) == (launch.grid, launch.block, 0)
    assert [p.dtype for p in spec.params] == [np.uint64, np.uint64, np.int64, np.int64, np.uint32, np.uint64]
    assert spec.struct_format == "QQqqIQ"
    assert int(spec.params[4]) == int(np.float32(2.5).view(np.uint32))
    assert [int(p) for p in spec.params[2:4]] == [5, 5]
    # buffers of 20 bytes each and the 32-byte status word, zeroed before the launch, all freed after
    allocs = [c[1] for c in driver.calls if c[0] == "alloc"]
    assert allocs == [20, 20, STATUS_WORDS * 8]
    assert ("memset", 0, STATUS_WORDS * 8, None) in driver.calls
    assert sorted(c[1] for c in driver.calls if c[0] == "free") == sorted(allocs)
    assert driver.memory.blocks == {}
    assert [c[0] for c in driver.calls].count("load") == 1


def test_an_empty_buffer_still_gets_eight_bytes(gpu):
    driver = gpu(RecordingDriver(scale_kernel))
    scale_program().run([np.zeros(0, np.float32), np.zeros(0, np.float32), 1.0], backend="cuda")
    assert driver.launches == []  # nothing to run: no launch, no allocation
    driver.calls.clear()
    driver.kernel = None
    program = Program("two", {"dst": dynamic_buffer(f32), "empty": dynamic_buffer(f32)},
                      lambda k, a: k.for_each_1d(axis("i", 3), lambda inner, idx: a.dst.store(inner, 1.0, idx["i"])))
    program.run([np.zeros(3, np.float32), np.zeros(0, np.float32)], backend="cuda")
    assert [c[1] for c in driver.calls if c[0] == "alloc"] == [12, 8, STATUS_WORDS * 8]
    assert int(driver.launches[0].params[3]) == 0  # its count is 0


def test_a_failed_status_word_raises_and_leaves_outputs_untouched(gpu):
    graph = scale_program().graph

    def failing(memory, spec):
        scale_kernel(memory, spec)
        status = int(spec.params[-1])
        memory.view(status, 32).view(np.int64)[:] = [STATUS_STORE_OOB, store_ordinal(graph), 7, 2]

    gpu(RecordingDriver(failing))
    dst = np.full(4, -1.0, np.float32)
    with pytest.raises(OutOfBoundsError, match="store to 'dst'"):
        scale_program().run([dst, np.ones(4, np.float32), 3.0], backend="cuda")
    assert (dst == -1.0).all()


def test_timing_takes_events_around_the_launch_alone(gpu):
    driver = gpu(RecordingDriver(scale_kernel))
    ms = scale_program().run([np.zeros(4, np.float32), np.ones(4, np.float32), 1.0], backend="cuda", timing=True)
    assert ms == 1.5
    names = [c[0] for c in driver.calls]
    first = names.index("record")
    assert names[first:first + 3] == ["record", "launch", "record"]


def test_every_call_of_a_launch_goes_on_the_stream_it_was_given(gpu):
    driver = gpu(RecordingDriver(scale_kernel))
    dst = np.zeros(4, np.float32)
    scale_program().run([dst, np.ones(4, np.float32), 2.0], backend="cuda", stream="s1")
    assert dst.tolist() == [2.0] * 4
    on = [c[-1] for c in driver.calls if c[0] in ("htod", "dtoh", "dtod", "memset", "launch", "sync")]
    assert on and set(on) == {"s1"}
    with pytest.raises(ArgumentError, match="option 'stream': the recording driver takes a str"):
        scale_program().run([dst, np.ones(4, np.float32), 2.0], backend="cuda", stream=7)


# -- the stream objects of other libraries --------------------------------------------------------


class TorchLikeStream:
    cuda_stream = 0x5151


class ProtocolStream:
    def __cuda_stream__(self):
        return (0, 0x7272)


def test_foreign_streams_are_read_by_their_protocols():
    assert foreign_stream_handle(TorchLikeStream()) == 0x5151
    assert foreign_stream_handle(ProtocolStream()) == 0x7272
    assert foreign_stream_handle(7) is None and foreign_stream_handle(object()) is None


# -- cuda.core, its library faked -------------------------------------------------------------------


class FakeCu:
    """cuda.bindings.driver: results are (CUresult, *values); memory is a Memory."""

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_OUT_OF_MEMORY = 2

    def __init__(self, memory, count=1):
        self.memory, self.count, self.calls = memory, count, []

    def cuInit(self, flags):
        return (0,)

    def cuDeviceGetCount(self):
        return (0, self.count)

    def cuMemAlloc(self, nbytes):
        self.calls.append(("alloc", nbytes))
        if nbytes > 1 << 30:
            return (self.CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0)
        return (0, self.memory.alloc(nbytes))

    def cuMemFree(self, address):
        self.memory.free(address)
        self.calls.append(("free",))
        return (0,)

    def cuMemcpyHtoDAsync(self, dst, host_pointer, nbytes, stream):
        self.memory.view(dst, nbytes)[:] = np.frombuffer(ctypes.string_at(host_pointer, nbytes), np.uint8)
        self.calls.append(("htod", nbytes, stream))
        return (0,)

    def cuMemcpyDtoHAsync(self, host_pointer, src, nbytes, stream):
        ctypes.memmove(host_pointer, self.memory.view(src, nbytes).ctypes.data, nbytes)
        self.calls.append(("dtoh", nbytes, stream))
        return (0,)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        self.memory.view(dst, nbytes)[:] = self.memory.view(src, nbytes)
        self.calls.append(("dtod", nbytes, stream))
        return (0,)

    def cuMemsetD8Async(self, dst, value, nbytes, stream):
        self.memory.view(dst, nbytes)[:] = value
        self.calls.append(("memset", nbytes, stream))
        return (0,)

    def cuStreamSynchronize(self, stream):
        self.calls.append(("sync", stream))
        return (0,)


def fake_core(memory, kernel=scale_kernel):
    """cuda.core's Device, Stream, ObjectCode, LaunchConfig, EventOptions and launch."""
    core = types.SimpleNamespace(calls=[])

    class Stream:
        def __init__(self, handle):
            self.handle = handle

        @staticmethod
        def from_handle(handle):
            return Stream(handle)

        def sync(self):
            core.calls.append(("stream.sync", self.handle))

        def record(self, options=None):
            core.calls.append(("record", self.handle, options.enable_timing))
            return Event(len(core.calls))

    class Event:
        def __init__(self, at):
            self.at = at

        def sync(self):
            core.calls.append(("event.sync",))

        def __sub__(self, other):
            return 0.125 * (self.at - other.at)

    class Device:
        default_stream = Stream(0)

        def __init__(self, ordinal):
            self.ordinal = ordinal
            self.compute_capability = (9, 0)

        def set_current(self):
            core.calls.append(("set_current", self.ordinal))

    class ObjectCode:
        @staticmethod
        def from_ptx(text, name=""):
            core.calls.append(("from_ptx", name, text.endswith(b"\0")))
            code = types.SimpleNamespace(get_kernel=lambda entry: ("kernel", entry))
            return code

    def launch(stream, config, kernel_handle, *params):
        core.calls.append(("launch", stream.handle, config, kernel_handle, params))
        kernel(memory, KernelLaunch(config.grid, config.block, params, config.shmem_size))

    core.Stream, core.Device, core.ObjectCode, core.launch = Stream, Device, ObjectCode, launch
    core.LaunchConfig = lambda grid, block, shmem_size: types.SimpleNamespace(grid=grid, block=block,
                                                                              shmem_size=shmem_size)
    core.EventOptions = lambda enable_timing: types.SimpleNamespace(enable_timing=enable_timing)
    return core


def test_the_cuda_core_driver_marshals_a_launch(gpu):
    memory = Memory()
    core, cu = fake_core(memory), FakeCu(memory)
    driver = gpu(CudaCoreDriver(0, core=core, cu=cu))
    assert driver.arch == "sm_90a"  # compute capability 9.0: its architecture-specific PTX (wgmma)
    dst, src = np.zeros(6, np.float32), np.arange(6, dtype=np.float32)
    scale_program().run([dst, src, -1.0], backend="cuda")
    assert dst.tolist() == [-0.0, -1.0, -2.0, -3.0, -4.0, -5.0]
    (_, stream, config, kernel, params), = [c for c in core.calls if c[0] == "launch"]
    launch = scale_program().launch(args=[dst, src, -1.0])
    assert stream == 0 and (config.grid, config.block, config.shmem_size) == (launch.grid, launch.block, 0)
    assert kernel == ("kernel", "scale")
    assert [type(p) for p in params] == [np.uint64, np.uint64, np.int64, np.int64, np.uint32, np.uint64]
    assert ("from_ptx", "scale", True) in core.calls  # the PTX as C text
    assert [c[1] for c in cu.calls if c[0] == "alloc"] == [24, 24, 32]
    assert [c for c in cu.calls if c[0] == "free"] and memory.blocks == {}
    assert {c[-1] for c in cu.calls if c[0] in ("htod", "dtoh", "memset", "sync")} == {0}


def test_the_cuda_core_driver_takes_torch_and_protocol_streams(gpu):
    memory = Memory()
    core, cu = fake_core(memory), FakeCu(memory)
    gpu(CudaCoreDriver(0, core=core, cu=cu))
    for stream, handle in ((TorchLikeStream(), 0x5151), (ProtocolStream(), 0x7272), (core.Stream(0x99), 0x99)):
        core.calls.clear()
        cu.calls.clear()
        dst = np.zeros(3, np.float32)
        ms = scale_program().run([dst, np.ones(3, np.float32), 4.0], backend="cuda", stream=stream, timing=True)
        assert dst.tolist() == [4.0] * 3 and ms == 0.25  # the events on either side of the launch
        assert [c[1] for c in core.calls if c[0] in ("launch", "record")] == [handle] * 3
        assert {c[-1] for c in cu.calls if c[0] in ("htod", "dtoh", "memset", "sync")} == {handle}
    with pytest.raises(ArgumentError, match=r"option 'stream': the cuda-core driver takes a cuda.core Stream "
                                            r".*got int"):
        scale_program().run([dst, np.ones(3, np.float32), 4.0], backend="cuda", stream=0x5151)


def test_the_cuda_core_driver_words_driver_failures():
    memory = Memory()
    with pytest.raises(BackendUnavailableError, match="found no NVIDIA GPU"):
        CudaCoreDriver(0, core=fake_core(memory), cu=FakeCu(memory, count=0))
    with pytest.raises(BackendUnavailableError, match=r"no device 2 \(the driver reports 1\)"):
        CudaCoreDriver(2, core=fake_core(memory), cu=FakeCu(memory))
    driver = CudaCoreDriver(0, core=fake_core(memory), cu=FakeCu(memory))
    with pytest.raises(ExecutionError, match=r"cuMemAlloc\(2147483648\) failed with CUDA_ERROR_OUT_OF_MEMORY"):
        driver.alloc(1 << 31)


# -- PyCUDA, its library faked ------------------------------------------------------------------------


def fake_pycuda(memory, kernel=scale_kernel):
    """pycuda.driver: Device, Context, Stream, Event, mem_alloc, memcpy_*, module_from_buffer."""
    drv = types.SimpleNamespace(calls=[])

    class Allocation:
        def __init__(self, nbytes):
            self.address = memory.alloc(nbytes)
            drv.calls.append(("alloc", nbytes))

        def __int__(self):
            return self.address

        def free(self):
            memory.free(self.address)
            drv.calls.append(("free",))

    class Stream:
        def synchronize(self):
            drv.calls.append(("stream.sync", self))

    class Event:
        def record(self, stream=None):
            drv.calls.append(("record", stream))

        def synchronize(self):
            pass

        def time_till(self, other):
            return 0.25

    class Function:
        def prepare(self, fmt):
            drv.calls.append(("prepare", fmt))

        def prepared_async_call(self, grid, block, stream, *params, shared_size=0):
            drv.calls.append(("launch", grid, block, stream, params, shared_size))
            kernel(memory, KernelLaunch(grid, block, params, shared_size))

    class Device:
        @staticmethod
        def count():
            return 1

        def __init__(self, ordinal):
            pass

        def retain_primary_context(self):
            return types.SimpleNamespace(push=lambda: drv.calls.append(("push",)))

        def compute_capability(self):
            return (8, 6)

    def htod(dst, host, stream=None):
        memory.view(dst, host.nbytes)[:] = host.reshape(-1).view(np.uint8)
        drv.calls.append(("htod", host.nbytes, stream))

    def dtoh(host, src, stream=None):
        host.reshape(-1).view(np.uint8)[:] = memory.view(src, host.nbytes)
        drv.calls.append(("dtoh", host.nbytes, stream))

    def dtod(dst, src, nbytes, stream=None):
        memory.view(dst, nbytes)[:] = memory.view(src, nbytes)
        drv.calls.append(("dtod", nbytes, stream))

    def memset(dst, value, nbytes, stream=None):
        memory.view(dst, nbytes)[:] = value
        drv.calls.append(("memset", nbytes, stream))

    drv.init = lambda: None
    drv.Device, drv.Stream, drv.Event = Device, Stream, Event
    drv.Context = types.SimpleNamespace(pop=lambda: drv.calls.append(("pop",)),
                                        synchronize=lambda: drv.calls.append(("ctx.sync",)))
    drv.mem_alloc = Allocation
    drv.memcpy_htod = drv.memcpy_htod_async = htod
    drv.memcpy_dtoh = drv.memcpy_dtoh_async = dtoh
    drv.memcpy_dtod = drv.memcpy_dtod_async = dtod
    drv.memset_d8 = drv.memset_d8_async = memset
    drv.module_from_buffer = lambda text: types.SimpleNamespace(text=text, get_function=lambda name: Function())
    return drv


def test_the_pycuda_driver_marshals_a_prepared_launch(gpu):
    memory = Memory()
    drv = fake_pycuda(memory)
    driver = gpu(PycudaDriver(0, drv=drv))
    assert driver.arch == "sm_86"
    for _ in range(2):
        dst = np.zeros(4, np.float32)
        scale_program().run([dst, np.arange(4, dtype=np.float32), 0.5], backend="cuda")
        assert dst.tolist() == [0.0, 0.5, 1.0, 1.5]
    assert [c for c in drv.calls if c[0] == "prepare"] == [("prepare", "QQqqIQ")]  # once per kernel
    (_, grid, block, stream, params, shared), _ = [c for c in drv.calls if c[0] == "launch"]
    assert stream is None and shared == 0 and len(params) == 6
    assert [c[1] for c in drv.calls if c[0] == "alloc"] == [16, 16, 32] * 2 and memory.blocks == {}
    assert drv.calls.count(("push",)) == drv.calls.count(("pop",)) > 0


def test_the_pycuda_driver_takes_its_own_streams_only(gpu):
    memory = Memory()
    drv = fake_pycuda(memory)
    gpu(PycudaDriver(0, drv=drv))
    stream = drv.Stream()
    dst = np.zeros(4, np.float32)
    assert scale_program().run([dst, np.ones(4, np.float32), 3.0], backend="cuda", stream=stream, timing=True) == 0.25
    assert dst.tolist() == [3.0] * 4
    assert {c[-1] for c in drv.calls if c[0] in ("htod", "dtoh", "memset", "record")} == {stream}
    assert [c[3] for c in drv.calls if c[0] == "launch"] == [stream]
    with pytest.raises(ArgumentError, match=r"takes a pycuda.driver.Stream \(for a torch or CuPy stream use "
                                            r"ACCY_CUDA_DRIVER=cuda-core\)"):
        scale_program().run([dst, np.ones(4, np.float32), 3.0], backend="cuda", stream=TorchLikeStream())


# -- the emulator: the same host half ------------------------------------------------------------------


def test_the_ptx_backend_launches_through_the_same_marshalling(gpu, monkeypatch):
    specs = []
    launch = EmulatorDriver.launch

    def recording(self, kernel, spec, stream):
        specs.append(spec)
        return launch(self, kernel, spec, stream)

    monkeypatch.setattr(EmulatorDriver, "launch", recording)
    dst, src = np.zeros(5, np.float32), np.arange(5, dtype=np.float32)
    scale_program().run([dst, src, 2.0], backend="ptx")
    assert dst.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    fake = gpu(RecordingDriver(scale_kernel))
    scale_program().run([np.zeros(5, np.float32), src, 2.0], backend="cuda")
    (emulated,), (recorded,) = specs, fake.launches
    assert emulated.struct_format == recorded.struct_format == "QQqqIQ"
    assert (emulated.grid, emulated.block) == (recorded.grid, recorded.block)
    assert [int(p) for p in emulated.params[2:5]] == [int(p) for p in recorded.params[2:5]]


# -- ACCY_CUDA_DRIVER ------------------------------------------------------------------------------------


@pytest.fixture
def installed(monkeypatch):
    """Pretend exactly the named driver libraries are importable."""
    def pretend(*names):
        for choice in DRIVERS:
            top = choice.module.split(".")[0]
            if choice.name in names:
                monkeypatch.setitem(sys.modules, choice.module, types.ModuleType(choice.module))
            else:
                monkeypatch.setitem(sys.modules, top, None)  # import of it fails
                monkeypatch.delitem(sys.modules, choice.module, raising=False)

    monkeypatch.delenv(drivers.ENV, raising=False)
    return pretend


def test_the_default_driver_is_the_one_installed_cuda_core_first(installed, monkeypatch):
    installed("cuda-core", "pycuda")
    assert choose().name == "cuda-core"
    installed("pycuda")
    assert choose().name == "pycuda"
    installed("cuda-core", "pycuda")
    monkeypatch.setenv(drivers.ENV, "pycuda")
    assert choose().name == "pycuda"


def test_without_either_driver_the_error_names_both_and_how_to_install(installed):
    installed()
    with pytest.raises(BackendUnavailableError, match=r"backend 'cuda' needs cuda.core or pycuda, and neither "
                                                      r"could be imported") as err:
        cuda.CudaBackendState(0)
    assert "pip install 'accy[cuda]'" in str(err.value) and "pip install 'accy[pycuda]'" in str(err.value)


def test_a_named_driver_that_is_missing_says_which_and_how_to_install(installed, monkeypatch):
    installed("cuda-core")
    monkeypatch.setenv(drivers.ENV, "pycuda")
    with pytest.raises(BackendUnavailableError, match=r"ACCY_CUDA_DRIVER=pycuda needs pycuda.driver, which could "
                                                      r"not be imported .*pip install 'accy\[pycuda\]'"):
        choose()
    installed("pycuda")
    monkeypatch.setenv(drivers.ENV, "cuda-core")
    with pytest.raises(BackendUnavailableError, match=r"ACCY_CUDA_DRIVER=cuda-core needs cuda.core.*"
                                                      r"pip install 'accy\[cuda\]'"):
        choose()


def test_an_unknown_driver_name_is_refused(installed, monkeypatch):
    installed("cuda-core", "pycuda")
    monkeypatch.setenv(drivers.ENV, "cupy")
    with pytest.raises(BackendUnavailableError, match=r"ACCY_CUDA_DRIVER='cupy' names no driver; expected one of "
                                                      r"cuda-core, pycuda"):
        choose()


def test_importing_the_drivers_imports_no_gpu_library():
    import subprocess

    code = ("import sys, accy.runtime.cuda, accy.runtime.drivers.cuda_core, accy.runtime.drivers.pycuda_driver; "
            "print(sorted(m for m in ('cuda.core', 'cuda.bindings', 'pycuda') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
