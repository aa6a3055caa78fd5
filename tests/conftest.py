import os
import signal

import attrs
import numpy as np
import pytest

# The interpreter's memory checks (poisoned outputs, unwritten elements, races) are
# on for the whole suite: a kernel that leaves output unwritten fails loudly.
os.environ.setdefault("ACCY_CHECK_MEMORY", "1")
# The PTX emulator runs each warp alone up to its next barrier, in an order drawn anew for every
# launch (the library's default is lockstep): a kernel that works only in one order fails here.
# A RaceError names the seed of its launch; ACCY_PTX_SCHEDULE=random:SEED replays it.
os.environ.setdefault("ACCY_PTX_SCHEDULE", "random")

from accy import Program, axis, dynamic_buffer, f32

# Every backend runs every backend-parametrised test (one body, many backends):
# ptx is the PTX the cuda backend would launch, on the emulator; the GPU one skips,
# with the reason, where there is no GPU.
CPU_BACKENDS = ["numpy", "llvm", "ptx"]


def _cuda_unavailable() -> str | None:
    from accy.runtime.cuda import default_state
    from accy.errors import BackendUnavailableError

    try:
        default_state()
    except BackendUnavailableError as e:
        return str(e).split(":")[0]  # the reason; the full message says how to fix it
    return None


CUDA_UNAVAILABLE = _cuda_unavailable()
BACKENDS = CPU_BACKENDS + ([] if CUDA_UNAVAILABLE else ["cuda"])
CUDA_PARAM = pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    CUDA_UNAVAILABLE is not None, reason=f"no GPU backend here: {CUDA_UNAVAILABLE}")])


def pytest_addoption(parser):
    from fuzz_scaffold import add_fuzz_option

    add_fuzz_option(parser)  # --fuzz-long: many more fuzzer examples


# -- the quick subset: pytest's default, -m "not fuzz and not full" (pyproject.toml) ----------
# The fuzzers carry the fuzz marker themselves (tests/test_fuzz*.py).  The sweeps in QUICK_CASES
# keep only some of their cases in the quick subset (conftest marks the others full; the full
# suite, -m "", runs every case): on a compiled backend each case is a kernel of its own, LLVM's
# O3 each time, which is most of their time.


@attrs.frozen
class QuickCases:
    """The cases of a sweep that stay in the quick subset: those whose ``params`` (their str)
    are all in ``keep``; with ``compiled_only``, every case on numpy too.  No ``params``: the
    test runs in the full suite only."""

    params: tuple[str, ...]
    keep: frozenset[str]
    compiled_only: bool = True

    def keeps(self, values: dict) -> bool:
        if not self.params:
            return False
        if self.compiled_only and values.get("backend") == "numpy":
            return True
        return all(str(values[name]) in self.keep for name in self.params)


QUICK_DTYPES = frozenset({"f32", "f16", "i8", "u64", "bool"})  # narrow and wide, float and integer
SM_80 = frozenset({"sm_80"})  # a PTX check at both arches: sm_90 is the full suite's
FP8_RUNS = frozenset({"{}", "{'arch': 'sm_80'}"})  # test_fp8's RUNS options: llvm, and ptx at sm_80
FULL_SUITE_ONLY = QuickCases((), frozenset())
QUICK_CASES = {  # (file, test function) -> the cases it keeps
    # QUICK_DTYPES on llvm and on ptx at sm_80 (the f32 sweep on the emulator is 5-7 s an arch)
    ("test_fp8.py", "test_every_type_casts_to_fp8_as_ml_dtypes"): QuickCases(
        ("src", "options"), QUICK_DTYPES | FP8_RUNS),
    ("test_fp8.py", "test_saturating_casts_clamp_to_the_largest_finite_value"): QuickCases(
        ("src", "options"), QUICK_DTYPES | FP8_RUNS),
    # the no-spill checks: the quick subset's ptx runs still assemble every PTX they emit
    # (conftest's listener), at sm_80
    ("test_tile_distribute.py", "test_every_kernel_assembles_without_spills"): FULL_SUITE_ONLY,
    ("test_tensor_cores.py", "test_tensor_core_ptx_assembles_without_spills"): FULL_SUITE_ONLY,
    ("test_examples.py", "test_example_programs_lower_to_ptx_that_ptxas_accepts"): QuickCases(
        ("arch",), SM_80, compiled_only=False),
    # inductor compiles C++ (about 17 s); the aot_eager torch.compile tests stay quick
    ("test_torch.py", "test_torch_compile_with_inductor_matches_eager"): FULL_SUITE_ONLY,
    # the 64 x 32 tiles' scans are 4 s a backend; the other shapes cover warps, axes and replicas
    ("test_tile_distribute.py", "test_scans_agree_with_numpy"): QuickCases(
        ("shape",), frozenset({"(256,)", "(4, 256)", "(2, 3, 8)", "(16, 1)", "(40,)"})),
    # bf16 (the tensor-core path) on llvm and ptx; every dtype on numpy
    ("test_attention_tile.py", "test_matches_reference"): QuickCases(("dtype",), frozenset({"bf16"})),
    ("test_tensor_cores.py", "test_attention_tile_entry_on_tensor_cores"): QuickCases(
        ("dtype",), frozenset({"bf16"}), compiled_only=False),
    ("test_tile_distribute.py", "test_vector_accesses_assemble_without_spills"): QuickCases(
        ("arch",), SM_80, compiled_only=False),
    # every dtype on numpy, QUICK_DTYPES on llvm and ptx
    ("test_dtypes.py", "test_op_matches_python_reference_bit_for_bit"): QuickCases(("t",), QUICK_DTYPES),
    ("test_dtypes.py", "test_cast_matches_python_reference"): QuickCases(("src", "dst"), QUICK_DTYPES),
    ("test_votes_scans.py", "test_block_scan_every_type"): QuickCases(("t",), QUICK_DTYPES),
    ("test_votes_scans.py", "test_block_argmax_argmin_every_type"): QuickCases(("t",), QUICK_DTYPES),
    # every float type on numpy, f32 and f64 (vecmath's and libdevice's own routines) on llvm and ptx
    ("test_math_accuracy.py", "test_math_function_within_documented_ulps"): QuickCases(
        ("t",), frozenset({"f32", "f64"})),
    # one kernel per dtype with every op and cast, for sm_80 and sm_90: the op and cast sweeps
    # above lower QUICK_DTYPES' to PTX in the quick subset
    ("test_dtypes.py", "test_every_op_and_cast_lowers_to_ptx_that_ptxas_accepts"): QuickCases((), frozenset()),
    # every block shape on numpy, f32's on llvm and ptx (a float scan's order shows in its bits)
    ("test_votes_scans.py", "test_block_scan_every_shape"): QuickCases(("t",), frozenset({"f32"})),
    ("test_votes_scans.py", "test_block_argmax_argmin_every_shape"): QuickCases(("t",), frozenset({"f32"})),
    # every variant at the three smaller shapes (the largest takes half the test's time)
    ("test_backends_agree.py", "test_attention_entry_agrees_across_backends"): QuickCases(
        ("shape",), frozenset({"(2, 2, 3, 2, 2)", "(1, 7, 5, 3, 9)", "(3, 16, 31, 8, 4)"}), compiled_only=False),
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        quick = QUICK_CASES.get((item.path.name, getattr(item, "originalname", None)))
        if quick is not None and not quick.keeps(item.callspec.params if hasattr(item, "callspec") else {}):
            item.add_marker(pytest.mark.full)


@pytest.fixture(params=CPU_BACKENDS + [CUDA_PARAM])
def backend(request):
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def elementwise(name, fn, n, *, dtypes=(f32, f32), out=f32):
    """A 1-D kernel: dst[i] = fn(inner, a[i], b[i], ...) over n threads."""
    params = {"dst": dynamic_buffer(out)}
    params.update({f"in{j}": dynamic_buffer(t) for j, t in enumerate(dtypes)})

    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            values = [args.param(f"in{j}")[i] for j in range(len(dtypes))]
            args.dst[i] = fn(inner, *values)

        k.for_each_1d(axis("i", n), each)

    return Program(name, params, body)


# -- every PTX the suite emits goes through ptxas ----------------------------------------------

import hashlib  # noqa: E402

from accy.codegen import machine as codegen
from accy.codegen.nvptx import toolchain
from accy.emulator import instruction_forms, unsupported  # noqa: E402

ASSEMBLED: dict[str, str] = {}
FORMS: dict[str, str] = {}  # every PTX instruction form the suite emitted -> a kernel that used it


def _assemble_every_ptx(ptx, target):
    if toolchain.find_ptxas() is None:
        pytest.skip("no ptxas on this machine: pip install nvidia-cuda-nvcc (the test extra does)")
    digest = hashlib.sha256(f"{target.arch}\n{ptx}".encode()).hexdigest()
    if digest not in ASSEMBLED:
        toolchain.assemble(ptx, target.arch)  # raises CompileError with ptxas's message
        ASSEMBLED[digest] = target.arch
        entry = next((line.split()[-1] for line in ptx.splitlines() if ".entry" in line), "?")
        for form in instruction_forms(ptx):
            FORMS.setdefault(form, entry)


codegen.ptx_listeners.append(_assemble_every_ptx)


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Compile fresh into a cache of the session's own, never the user's."""
    import os

    old = os.environ.get("ACCY_CACHE_DIR")
    os.environ["ACCY_CACHE_DIR"] = str(tmp_path_factory.mktemp("accy-cache"))
    yield
    if old is None:
        os.environ.pop("ACCY_CACHE_DIR", None)
    else:
        os.environ["ACCY_CACHE_DIR"] = old


# -- every graph the suite builds must read back from its text form ------------------------------

from accy.dsl import parse, passes  # noqa: E402

ROUND_TRIPPED: set[str] = set()
_parsing = []


def _text_form_parses_back(graph):
    if _parsing:
        return  # the parsed graph is verified too
    text = graph.text()
    if text in ROUND_TRIPPED:
        return
    _parsing.append(True)
    try:
        again = parse(text).text()
    finally:
        _parsing.pop()
    assert again == text, f"the text form does not parse back:\n{text}\n---\n{again}"
    ROUND_TRIPPED.add(text)


passes.verified_listeners.append(_text_form_parses_back)


def pytest_terminal_summary(terminalreporter):
    by_arch: dict[str, int] = {}
    for arch in ASSEMBLED.values():
        by_arch[arch] = by_arch.get(arch, 0) + 1
    detail = ", ".join(f"{arch}: {n}" for arch, n in sorted(by_arch.items())) or "none emitted"
    ptxas = toolchain.find_ptxas() or "not found"
    terminalreporter.write_line(f"ptxas ({ptxas}) assembled {len(ASSEMBLED)} distinct PTX modules ({detail})")
    terminalreporter.write_line(f"{len(ROUND_TRIPPED)} distinct graphs read back from their text form")
    missing = unsupported(FORMS)
    terminalreporter.write_line(f"the PTX emulator executes all {len(FORMS)} instruction forms the suite emitted"
                                if not missing else f"the PTX emulator lacks {sorted(missing)}")


def pytest_sessionfinish(session, exitstatus):
    """Coverage is checked, not hoped for: an instruction form the suite emitted that the
    emulator cannot execute fails the run."""
    missing = unsupported(FORMS)
    if missing and session.exitstatus == 0:
        details = ", ".join(f"{form} (in {FORMS[form]})" for form in sorted(missing))
        session.exitstatus = 1
        print(f"\nthe PTX emulator lacks instruction forms the suite emitted: {details}")


# The interrupt tests send SIGINT to the test process (_thread.interrupt_main).  A shell starts a
# background job with SIGINT ignored, and Python then keeps it ignored: the interrupt would never
# land.  Python's own handler, as in a foreground run, whatever started pytest.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
