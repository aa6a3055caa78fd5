"""accy programs as PyTorch operators: ``accy.torch.custom_op("mylib::name", program,
mutates_args=("dst",))``.

The op takes the program's declared parameters in their order: a ``torch.Tensor`` for each
buffer or tensor parameter, a Python ``int``, ``float`` or ``bool`` for each scalar (by its
type) and each constexpr parameter (by the type it takes: each value runs the program
specialised on it, :meth:`accy.Program.specialized`).  The parameters named in ``mutates_args`` are its outputs, written in place; the op
returns None, as ``torch.library.custom_op`` requires of an op that mutates its arguments
and returns nothing (returning new tensors would mean allocating them, and accy's programs
write into arrays their caller owns).  CPU tensors run on ``llvm``, CUDA tensors on
``cuda`` (on the tensors' device and torch's current stream), both with no copy.

The fake (meta) implementation checks what the signature says, dtypes, ranks of tensor
parameters and the element counts of fixed-size buffers, and does nothing else, so
``torch.compile(fullgraph=True)`` traces through the op with no graph break.

Importing accy does not import torch; this module imports it when an op is made.
"""

from __future__ import annotations

import inspect
import threading
from typing import Iterable

import attrs

from .runtime import get_backend
from .dsl.constexpr import Constexpr
from .dsl.ir import Param
from .dsl.tensors import declared_parameters, tensor_parameters
from .dsl.types import DType
from .errors import AccyError, ArgumentError

# torch's device type -> the accy backend that runs tensors in that memory in place
BACKEND_FOR_DEVICE = {"cpu": "llvm", "cuda": "cuda"}


@attrs.frozen
class _Registered:
    program: object
    mutates_args: tuple[str, ...]
    op: object


_REGISTERED: dict[str, _Registered] = {}
_lock = threading.Lock()


def custom_op(qualname: str, program, *, mutates_args: Iterable[str]):
    """Register ``program`` as the torch operator ``qualname`` ("namespace::name") through
    ``torch.library.custom_op`` and return it (also ``torch.ops.namespace.name``).

    ``mutates_args`` names the parameters the op writes (every buffer the kernel stores to,
    and only buffers).  Registering one name again with the same program and
    ``mutates_args`` returns the op already made; with another, it is an :class:`AccyError`
    (torch cannot replace an op in place)."""
    mutates = _check_mutates(program, (mutates_args,) if isinstance(mutates_args, str) else tuple(mutates_args))
    with _lock:
        known = _REGISTERED.get(qualname)
        if known is not None:
            if known.program is program and known.mutates_args == mutates:
                return known.op
            raise AccyError(f"custom_op {qualname!r} is already registered for program '{known.program.name}' "
                            f"(mutates_args={known.mutates_args}); a torch op cannot be replaced: pick another name")
        op = _register(qualname, program, mutates)
        _REGISTERED[qualname] = _Registered(program, mutates, op)
        return op


def _check_mutates(program, mutates: tuple[str, ...]) -> tuple[str, ...]:
    declared = declared_parameters(program.parameters)
    buffers = [p.name for p in declared if not p.is_scalar]
    for name in mutates:
        if name not in buffers:
            raise AccyError(f"custom_op: mutates_args names {name!r}, which is not a buffer or tensor parameter of "
                            f"'{program.name}' (those are {', '.join(buffers) or 'none'})")
    if not program.constexprs:  # else what it stores to is known per value, and checked at each call
        _check_stores(program, mutates)
    return mutates


def _check_stores(program, mutates: tuple[str, ...], args=None) -> None:
    """Every buffer ``program`` stores to (with the constexpr values among ``args``) is in ``mutates``."""
    programs = getattr(program, "programs", (program,))  # an autotuned kernel: any config's
    stored = frozenset().union(*((p if args is None else p.specialized_for(args)[0]).stored_buffers()
                                 for p in programs))
    unlisted = sorted(stored - set(mutates))
    if unlisted:
        raise AccyError(f"custom_op: '{program.name}' stores to {', '.join(map(repr, unlisted))}, so mutates_args "
                        "must name it (torch must know every argument an op writes)")


def _annotation(p: Param | Constexpr):
    if isinstance(p, Constexpr):
        return p.spec.kind
    if not p.is_scalar:
        import torch

        return torch.Tensor
    return bool if p.dtype.is_bool else float if p.dtype.is_float else int


def _signature(params: tuple[Param | Constexpr, ...]) -> inspect.Signature:
    """The op's Python signature, from which torch infers its schema."""
    return inspect.Signature([inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                annotation=_annotation(p)) for p in params], return_annotation=None)


def _register(qualname: str, program, mutates: tuple[str, ...]):
    import torch

    params = program.call_order
    signature = _signature(params)

    def run(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        arguments = [bound.arguments[p.name] for p in params]
        if program.constexprs:
            _check_stores(program, mutates, arguments)
        run_on_tensors(program, arguments)

    def fake(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        check_signature(program, bound.arguments)

    run.__signature__ = fake.__signature__ = signature
    run.__name__ = fake.__name__ = program.name
    op = torch.library.custom_op(qualname, run, mutates_args=mutates)
    op.register_fake(fake)
    return op


def torch_dtype(dtype: DType):
    """The torch dtype of an accy type (``index`` is int64)."""
    import torch

    return getattr(torch, dtype.numpy.name if dtype.numpy.name != "bool" else "bool")


def check_signature(program, arguments: dict) -> None:
    """What the signature says of the tensors (dtype, a tensor parameter's rank, a fixed
    buffer's element count), checked on tensors that may hold no data (fake or meta)."""
    import torch

    ranks = {t.name: t.ndim for t in tensor_parameters(program.parameters)}
    for p in declared_parameters(program.parameters):
        value = arguments[p.name]
        if p.is_scalar:
            continue
        if not isinstance(value, torch.Tensor):
            raise ArgumentError(f"argument '{p.name}': expected a torch.Tensor of {torch_dtype(p.dtype)}, "
                                f"got {type(value).__name__}")
        if value.dtype != torch_dtype(p.dtype):
            raise ArgumentError(f"argument '{p.name}': expected dtype {torch_dtype(p.dtype)} ({p.dtype}), "
                                f"got {value.dtype}")
        if p.name in ranks and value.dim() != ranks[p.name]:
            raise ArgumentError(f"argument '{p.name}': expected a {ranks[p.name]}-d tensor "
                                f"(tensor({p.dtype}, {ranks[p.name]})), got a {value.dim()}-d tensor of shape "
                                f"{tuple(value.shape)}")
        if p.count is not None and p.name not in ranks and value.numel() != p.count:
            raise ArgumentError(f"argument '{p.name}': expected {p.count} elements, got {value.numel()} "
                                f"(shape {tuple(value.shape)})")


def backend_for(tensors: dict) -> tuple[str, int | None]:
    """(backend, CUDA device index) for tensors by parameter name: all on the CPU -> llvm,
    all on one CUDA device -> cuda; tensors on two devices are an error naming them."""
    devices = {name: t.device for name, t in tensors.items()}
    distinct = sorted({str(d) for d in devices.values()})
    if len(distinct) > 1:
        where = ", ".join(f"'{name}' on {d}" for name, d in devices.items())
        raise ArgumentError(f"the tensors are on {len(distinct)} devices ({where}); an op runs on one")
    if not devices:
        return "llvm", None
    device = next(iter(devices.values()))
    backend = BACKEND_FOR_DEVICE.get(device.type)
    if backend is None:
        name = next(iter(devices))
        raise ArgumentError(f"argument '{name}' is on {device}; accy runs CPU tensors on llvm and CUDA tensors on "
                            "cuda")
    return backend, device.index


def run_on_tensors(program, args: list) -> None:
    """Run ``program`` on the op's arguments (in parameter order) where the tensors are."""
    import torch

    params = program.call_order
    tensors = {p.name: a for p, a in zip(params, args) if isinstance(a, torch.Tensor)}
    check_signature(program, dict(zip((p.name for p in params), args)))
    backend, device = backend_for(tensors)
    options = {}
    if get_backend(backend).on_gpu:
        options = {"device": device or 0}
        get_backend(backend).check_available(options)  # accy's own error (how to install a driver) before torch's
        options["stream"] = torch.cuda.current_stream(device)  # ordered with torch's work on the tensors
    program.run(list(args), backend=backend, **options)


__all__ = ["custom_op", "check_signature", "backend_for", "run_on_tensors", "torch_dtype", "BACKEND_FOR_DEVICE"]
