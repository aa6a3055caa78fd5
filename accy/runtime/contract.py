"""What every backend is: a name, the options its runs take, how it describes an
argument, and one function that executes a graph.

:func:`accy.runtime.run` calls every backend the same way: it checks the options
against the backend's table (each :class:`Option` says what it takes), binds the
arguments (``describe`` turns each into an :class:`~accy.runtime.arguments.ArrayInfo`,
host arrays or device arrays), computes the launch (extents, grid and block,
checked against the limits), then calls ``execute(graph, binding, launch,
**options)``.
"""

from __future__ import annotations

import numbers
import os
from typing import Callable, Mapping

import attrs
import numpy as np

from ..errors import ArgumentError
from .arguments import ArrayInfo, host_info
from ..targets import VECTOR_WIDTHS, Target, is_known_arch, is_vector_width, nvptx_processors


NOT_HANDLED = object()  # a fast launcher's answer for a call the general path must take


class Refused(Exception):
    """An option's check refuses a value (the caller words the error)."""


@attrs.frozen
class Option:
    """One option a backend's runs take: ``check(value)`` returns the value to run with, or
    raises :class:`Refused`; ``takes`` says what it takes, in the error (or makes the text,
    when it is costly: only an error asks for it)."""

    name: str
    takes: str | Callable[[], str]
    check: Callable[[object], object]

    def checked(self, backend: str, value):
        try:
            return self.check(value)
        except Refused:
            takes = self.takes() if callable(self.takes) else self.takes
            raise ArgumentError(f"backend {backend!r}: option {self.name}={value!r}: "
                                f"{self.name} takes {takes}") from None


def _flag(value) -> bool:
    if isinstance(value, (bool, np.bool_)):  # not 1, nor "no" (truthy), nor None
        return bool(value)
    raise Refused


def _optional_flag(value) -> bool | None:
    return None if value is None else _flag(value)


def _whole(minimum: int, none: bool = False):
    def check(value):
        if value is None and none:
            return None
        if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)) and value >= minimum:
            return int(value)
        raise Refused

    return check


def _vector_width(value) -> int:
    width = _whole(0)(value)  # a whole number, not a bool
    if is_vector_width(width):
        return width
    raise Refused


def _debug_thread(value):
    if value is None or isinstance(value, dict):  # its axes and indices are checked against the launch
        return value
    raise Refused


def _schedule(value):
    if value is None:
        return None
    from ..emulator.errors import PtxError
    from ..emulator.schedule import Schedule

    try:
        return Schedule.parse(value)
    except PtxError:
        raise Refused from None


def _arch(value) -> str:
    if is_known_arch(value):
        return value
    raise Refused


def _arch_takes() -> str:
    return "an NVPTX processor LLVM knows: " + (", ".join(nvptx_processors()) or "sm_NN or sm_NNa")


# Every option a backend may take, with what it takes: a backend names the ones it takes
OPTIONS: dict[str, Option] = {option.name: option for option in (
    Option("checks", "True or False", _flag),
    Option("threads", "None (as many as pay, up to one per core) or a whole number >= 1", _whole(1, none=True)),
    Option("vector_width", f"one of {', '.join(map(str, VECTOR_WIDTHS))} (threads per vector; 0: the CPU's widest)",
           _vector_width),
    Option("memory_cap", "a whole number of bytes >= 1", _whole(1)),
    Option("check_memory", "True, False or None (ACCY_CHECK_MEMORY decides)", _optional_flag),
    Option("debug_thread", "None or a dict giving every logical axis its index ({'i': 3})", _debug_thread),
    Option("debug_cap", "a whole number >= 1", _whole(1)),
    Option("arch", _arch_takes, _arch),
    Option("fast_math", "True or False", _flag),
    Option("schedule", "None (ACCY_PTX_SCHEDULE decides, else lockstep), 'lockstep', 'reverse', 'random' or "
           "'random:SEED'", _schedule),
    Option("device", "a device number >= 0", _whole(0)),
    Option("timing", "True or False", _flag),
    Option("stream", "None or a stream (torch's, CuPy's or the driver's own)", lambda stream: stream),
)}


def _options(names) -> tuple[Option, ...]:
    if isinstance(names, str):
        names = (names,)
    unknown = sorted(set(names) - set(OPTIONS))
    if unknown:
        raise TypeError(f"no option {', '.join(unknown)} in accy.runtime.contract.OPTIONS: add it there, "
                        "with what it takes")
    return tuple(OPTIONS[name] for name in sorted(names))


def host_device() -> str:
    """This CPU, as autotune's store names the machine a wall time was measured on."""
    try:
        import llvmlite.binding as llvm

        cpu = llvm.get_host_cpu_name()
    except Exception:  # pragma: no cover - llvmlite is a dependency
        import platform

        cpu = platform.processor() or platform.machine()
    return f"{cpu} x{os.cpu_count()}"


@attrs.frozen
class Backend:
    name: str
    # the names of the options it takes (from OPTIONS), as their Options
    options: tuple[Option, ...] = attrs.field(converter=_options)
    # execute(graph, binding, launch, **options) -> what the run returns (a timing, a trace), usually None
    execute: Callable
    describe: Callable[[str, object], ArrayInfo] = host_info
    # raises BackendUnavailableError when the backend cannot run here (checked before the arguments)
    check_available: Callable[[dict], None] = lambda options: None
    # fast(graph, resolve, **options) -> a launcher for repeated calls: launcher(args) runs them and
    # returns the result, or NOT_HANDLED for a call the general path must take
    fast: Callable | None = None
    # target(arch) -> the Target its graphs are lowered for (arch: the run's option, None: the device's)
    target: Callable[[str | None], Target] = lambda arch: Target.reference()
    on_gpu: bool = False  # its arrays live in a GPU's memory (a CUDA tensor is used in place)
    # device(options) -> the machine its runs measure, for autotune's store: this CPU by default
    device: Callable[[Mapping], str] = lambda options: host_device()
    # how autotune ranks its configs: None by wall time, else estimate(program, args, options, limits) -> seconds
    estimate: Callable | None = None

    @property
    def option_names(self) -> frozenset[str]:
        return frozenset(option.name for option in self.options)

    def checked_options(self, options: Mapping[str, object]) -> dict[str, object]:
        """``options`` as the backend runs with them; an :class:`ArgumentError` naming the
        first one it does not know or take."""
        table = {option.name: option for option in self.options}
        unknown = sorted(set(options) - set(table))
        if unknown:
            raise ArgumentError(f"backend {self.name!r} takes no option {', '.join(map(repr, unknown))}; "
                                f"its options are {', '.join(sorted(table)) or 'none'}")
        return {name: table[name].checked(self.name, value) for name, value in options.items()}
