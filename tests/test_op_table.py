"""The op table is the op: every op has an attribute schema whose validators refuse bad
attributes, a text template the printer and the parser are both made from, and traits the
passes ask instead of op names."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import accy
from accy import axis, bf16, boolean, dynamic_buffer, f32, i8, i32, index, kernel, tensor
from accy.dsl import ir, ops, parse, textformat
from accy.dsl.ops import (OPS, AtomicAttrs, Bounds, ConstAttrs, FoldAttrs, ForEachAttrs, ForEachBlockAttrs, IfAttrs,
                          LoadAttrs, NoAttrs, OpAttrs, OpAttrsError, RegionKind, SharedAttrs, ShuffleAttrs, SizeAttrs,
                          Space, Sync)
from accy.errors import VerificationError

# -- every op has a schema and a text form ----------------------------------------------------


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_has_a_schema_and_a_text_form(name):
    opdef = OPS[name]
    assert issubclass(opdef.schema, OpAttrs) and attrs.has(opdef.schema)
    assert opdef.text is not None and opdef.text.schema is opdef.schema
    for field in attrs.fields(opdef.schema):
        assert field.validator is not None or field.converter is not None, (name, field.name)
    if opdef.pointwise:
        assert opdef.schema is NoAttrs and opdef.text.template == (ops.GENERIC,)
    if opdef.regions is not None:
        assert opdef.text.template[0].endswith(" {")


def test_attributes_are_immutable_and_read_as_a_mapping_too():
    a = LoadAttrs(buffer="x", dtype=f32, space="shared")
    assert a.space is Space.SHARED and a.space == "shared"
    assert a["buffer"] == "x" and a.get("space", "global") == "shared" and dict(a) == {
        "buffer": "x", "dtype": f32, "space": Space.SHARED, "vec": 1, "bounds": Bounds.CHECKED}
    assert SizeAttrs(buffer="x").get("space", "global") == "global"
    with pytest.raises(KeyError):
        a["keys"]  # fields only, not methods
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        a.dtype = i32
    assert hash(a) == hash(LoadAttrs(buffer="x", dtype=f32, space=Space.SHARED))


@pytest.mark.parametrize("make, message", [
    (lambda: LoadAttrs(buffer="x", dtype="f32"), r"LoadAttrs\.dtype must be a DType \(accy\.f32, \.\.\.\), got 'f32'"),
    (lambda: LoadAttrs(buffer="x", dtype=f32, space="local"), r"space must be one of global, shared, got 'local'"),
    (lambda: SizeAttrs(buffer="a b"), r"SizeAttrs\.buffer must be a name of letters, digits and _, got 'a b'"),
    (lambda: ConstAttrs(dtype=i8, value=300), r"ConstAttrs\.value must be an int in \[-128, 127\] for a i8 constant"),
    (lambda: ConstAttrs(dtype=f32, value=1), r"ConstAttrs\.value must be a Python float for a f32 constant, got 1"),
    (lambda: ConstAttrs(dtype=boolean, value=1), r"must be True or False for a bool constant, got 1"),
    (lambda: ConstAttrs(dtype=index, value=True), r"must be an int in .* for a index constant, got True"),
    (lambda: FoldAttrs(step=0), r"FoldAttrs\.step must be a non-zero int in the index range, got 0"),
    (lambda: FoldAttrs(step=True), r"FoldAttrs\.step must be a non-zero int"),
    (lambda: FoldAttrs(step=2**63), r"FoldAttrs\.step must be a non-zero int in the index range"),
    (lambda: IfAttrs(results=("f32",)), r"IfAttrs\.results must be a tuple of DTypes .*, got \('f32',\)"),
    (lambda: ForEachAttrs(axes=("i", "i")), r"ForEachAttrs\.axes must be a tuple of distinct names"),
    (lambda: ForEachAttrs(axes=["i"]), r"ForEachAttrs\.axes must be a tuple of distinct names"),
    (lambda: ForEachBlockAttrs(axes=("b",), threads=()), r"threads must be 1 to 3 \(name, static positive extent\)"),
    (lambda: ForEachBlockAttrs(axes=("b",), threads=(("t", 0),)), r"threads must be 1 to 3"),
    (lambda: ForEachBlockAttrs(axes=("b",), threads=(("a", 1), ("c", 1), ("d", 1), ("e", 1))), r"1 to 3"),
    (lambda: ForEachBlockAttrs(axes=("b",), threads=(("b", 4),)), r"axes named unlike each other and the grid's"),
    (lambda: SharedAttrs(name="tile", dtype=f32, count=0), r"SharedAttrs\.count must be a positive int, got 0"),
    (lambda: SharedAttrs(name="tile", dtype=f32, count=2.0), r"SharedAttrs\.count must be a positive int, got 2\.0"),
    (lambda: ShuffleAttrs(mode="sideways"), r"shuffle mode must be one of idx, xor, down, up, got 'sideways'"),
    (lambda: AtomicAttrs(op="mul", buffer="x", dtype=i32), r"atomic op must be one of add, max, min, exchange, cas"),
])
def test_bad_attributes_are_refused_by_the_schema(make, message):
    with pytest.raises(OpAttrsError, match=message) as err:
        make()
    assert isinstance(err.value, VerificationError)  # an AccyError


# -- the round trip of every op --------------------------------------------------------------


def _operand_types(opdef):
    """Operand types an op accepts (the first of f32, i32, bool that its type rule takes)."""
    if opdef.name == "select":
        return [boolean, f32, f32]
    for t in (f32, i32, boolean):
        try:
            ops.infer(opdef.name, [t] * opdef.arity, NoAttrs())
            return [t] * opdef.arity
        except ops.OpTypeError:
            pass
    raise AssertionError(opdef.name)


def pointwise_kernel():
    """Every pointwise op, with consts of every kind, a cast, a size, a fold of two
    accumulators and an if with and without results."""

    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), n=dynamic_buffer(i32), b=dynamic_buffer(boolean))
    def every_op(k, a):
        @k.for_each_1d(axis("i", a.x.size))
        def each(inner, idx):
            i = idx["i"]
            value = {f32: a.x[i], i32: a.n[i], boolean: a.b[i]}
            total = inner.constant(-0.0, f32) + inner.constant(float("inf"), f32) + inner.constant(float("nan"), f32)
            for opdef in OPS.values():
                if opdef.pointwise:
                    result = getattr(inner, opdef.methods[0])(*(value[t] for t in _operand_types(opdef)))
                    total = total + inner.cast(result, f32)
            s, c = inner.fold_range(0, 3, 1, (0.0, inner.constant(1, i32)),
                                    lambda inner, j, acc: (acc[0] + 1.0, acc[1] * 2))
            inner.if_(a.b[i], lambda inner: a.dst.store(inner, s, i))
            picked = inner.if_(inner.constant(True, boolean), lambda inner: total, lambda inner: inner.cast(c, f32))
            a.dst[i] = picked + inner.bitcast(a.n[i], f32)

    return every_op


def block_kernel():
    """Every block-level op: shared arrays, barriers, atomics (global and shared), shuffles."""

    @kernel(dst=dynamic_buffer(f32), hist=dynamic_buffer(i32))
    def blocks(k, a):
        @k.for_each_block(grid=axis("b", 2), threads=(axis("t", 32), axis("u", 2)))
        def body(inner, block, thread):
            tile = inner.shared(f32, 64, "tile")
            counts = inner.shared(i32, 4, "counts")
            t = thread["t"]
            tile[t] = inner.shuffle_xor(inner.cast(t, f32), 1)
            inner.barrier()
            inner.atomic_add(counts, t % 4, inner.constant(1, i32))
            inner.atomic_cas(a.hist, t % 4, inner.constant(0, i32), inner.constant(1, i32))
            a.dst[block["b"] * 32 + t] = tile[t]

    return blocks


EXPECTED_BLOCK_TEXT = """\
kernel @blocks(%dst: buffer<f32, ?>, %hist: buffer<i32, ?>) {
  %0 = const 2 : index
  for_each_block (%1 = b<%0>) threads (%2 = t<32>, %3 = u<2>) {
    shared %tile : f32[64]
    shared %counts : i32[4]
    %4 = cast %2 : index -> f32
    %5 = const 1 : index
    %6 = shuffle xor %4, %5 : f32
    store shared %tile[%2] = %6 : f32
    barrier
    %7 = const 4 : index
    %8 = mod %2, %7 : index
    %9 = const 1 : i32
    %10 = atomic add shared %counts[%8], %9 : i32
    %11 = const 4 : index
    %12 = mod %2, %11 : index
    %13 = const 0 : i32
    %14 = const 1 : i32
    %15 = atomic cas %hist[%12], %13, %14 : i32
    %16 = load shared %tile[%2] : f32
    %17 = const 32 : index
    %18 = mul %1, %17 : index
    %19 = add %18, %2 : index
    store %dst[%19] = %16 : f32
  }
}
"""


def tile_kernel():
    """Every tile-level op: a program per grid point computing on whole tiles."""

    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32), hist=dynamic_buffer(i32), q=dynamic_buffer(i8))
    def tiles(k, a):
        @k.for_each_tile(grid=axis("m", 2), warps=2)
        def body(t, pid):
            rows = pid["m"] * 4 + t.arange(4)
            cols = t.arange(8)
            x = a.x.load(rows[:, None] * 8 + cols[None, :], mask=rows[:, None] < a.x.size // 8, other=0.0)
            q = a.q.load(rows[:, None] * 8 + cols[None, :]).cast(i8)
            acc = t.dot(x, x.T.reshape((8, 4)) @ t.zeros((4, 8)), precision="tf32")
            iacc = t.dot(q, t.trans(q))
            y = t.exp(acc - t.max(acc, axis=1)[:, None]) + t.cumsum(acc, 1) + t.sum(iacc, axis=1).cast(f32)[:, None]
            y = t.cat(y[:, 4:], y[:, ::-1][:, 4:], axis=1)  # slice and cat
            a.dst.store(rows[:, None] * 8 + cols[None, :], y + t.broadcast_to(t.sum(y, axis=0), (4, 8)))
            a.hist.atomic_add(t.argmax(y, axis=1).cast(index), t.full((4,), 1, i32), mask=rows < 8)

    return tiles


def vector_kernel():
    """A tile copy distributed for a GPU: its vector accesses (load and store vec 4, aligned)."""

    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def vectors(k, a):
        @k.for_each_tile(grid=axis("i", 1), warps=1)
        def body(t, pid):
            a.dst.store(t.arange(128), a.x.load(t.arange(128)))

    return vectors


def tensor_core_kernel():
    """A bf16 dot distributed for a GPU with tensor cores: its operands copied to shared memory
    asynchronously, its mma and ldmatrix (plain and trans)."""

    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(bf16))
    def mma(k, a):
        @k.for_each_tile(grid=axis("i", 1), warps=1)
        def body(t, pid):
            at = t.arange(16)[:, None] * 16 + t.arange(16)[None, :]
            x, y = a.x.load(at), a.x.load(at + 256)  # straight to shared memory (async_copy and its wait)
            a.dst.store(at, t.dot(x, y))

    return mma


def warpgroup_kernel():
    """Two bf16 dots on warpgroups at sm_90a, the second's A held in registers: wgmma with its
    fence, commit and wait, the proxy fence after staging, and the staging arrays aligned."""

    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(bf16))
    def wgmma(k, a):
        @k.for_each_tile(grid=axis("i", 1), warps=4, persistent=True)
        def body(t, pid):
            at = t.arange(64)[:, None] * 64 + t.arange(64)[None, :]
            x, y = a.x.load(at), a.x.load(at + 4096)
            a.dst.store(at, t.dot(t.dot(x, y).to(bf16), y))

    return wgmma


def tma_kernel():
    """A pipelined bf16 dot on tensors at sm_90a: its boxes copied by TMA, completing on
    mbarriers, under the tensors' ready flags, by a producer warpgroup (warp roles)."""

    @kernel(c=tensor(f32, 2), a=tensor(bf16, 2), b=tensor(bf16, 2))
    def tma(k, p):
        @k.for_each_tile(grid=axis("i", 1), warps=4, num_stages=2)
        def body(t, pid):
            def step(t, k0, acc):
                return t.dot(p.a.load_tile((0, k0), (64, 64)), p.b.load_tile((k0, 0), (64, 64)), acc)

            p.c.store_tile((0, 0), t.fold_range(0, p.a.shape[1], 64, t.zeros((64, 64), f32), step))

    return tma


def test_the_block_ops_text_form_is_the_documented_one():
    assert block_kernel().traced_graph.text() == EXPECTED_BLOCK_TEXT


def test_every_op_prints_and_parses_back_exactly():
    graphs = [pointwise_kernel().traced_graph, block_kernel().traced_graph, tile_kernel().traced_graph,
              vector_kernel().graph_for("ptx"), tensor_core_kernel().graph_for("ptx"),
              warpgroup_kernel().graph_for("ptx", "sm_90a"), tma_kernel().graph_for("ptx", "sm_90a")]
    seen = {op.opcode for g in graphs for op in g.body.walk()}
    assert seen == set(OPS), sorted(set(OPS) - seen)
    for graph in graphs:
        text = graph.text()
        again = parse(text)
        assert again.text() == text
        for old, new in zip(graph.body.walk(), again.body.walk()):
            assert (old.opcode, repr(old.attrs)) == (new.opcode, repr(new.attrs))  # repr: NaN, -0.0
            assert type(new.attrs) is OPS[new.opcode].schema
        # each op's line starts with its name, after its results
        for op, line in ir.op_lines(graph).items():
            assert line.split(" = ", 1)[-1].split(" ")[0] == op.opcode if op.results else line.startswith(op.opcode)


def test_the_text_of_every_kind_of_constant_parses_back():
    text = pointwise_kernel().traced_graph.text()
    assert "const -0.0 : f32" in text and "const inf : f32" in text and "const nan : f32" in text
    assert "const true : bool" in text
    assert "yield %" in text and "} else {" in text and "init(%" in text


# -- the parser refuses bad text with the line -------------------------------------------------

GOOD = """\
kernel @k(%dst: buffer<f32, ?>) {
  %0 = const 4 : index
  for_each (%1 = i<%0>) {
    %2 = cast %1 : index -> f32
    store %dst[%1] = %2 : f32
  }
}
"""


@pytest.mark.parametrize("old, new, message", [
    ("%0 = const 4 : index", "%0 = const 4 : i8\n  %9 = const 300 : i8", r"line 3: const: ConstAttrs\.value must be an "
                                                                          r"int in \[-128, 127\]"),
    ("%0 = const 4 : index", "%0 = const 4 : f33", r"line 2: cannot read .*unknown type 'f33'"),
    ("%0 = const 4 : index", "%0 = const four : index", r"line 2: cannot read .*bad integer constant 'four'"),
    ("%0 = const 4 : index", "%0 = frobnicate 4 : index", r"line 2: cannot read .*: no op named 'frobnicate'"),
    ("store %dst[%1] = %2 : f32", "store %dst[%1] %2 : f32",
     r"line 5: cannot read 'store %dst\[%1\] %2 : f32' \(does not have the form\): a store is written "
     r"'store \{\?\{space\} \}%\{buffer\}\[\$0\] = \$1\.\.\. : \{dtype\}\{\? vec \{vec\}\}\{\? bounds \{bounds\}\}'"),
    ("store %dst[%1]", "store local %dst[%1]", r"line 5: cannot read"),
    ("store %dst[%1]", "store shared %dst[%1]", r"line 5: %dst is not a declared shared array"),
    # the source type a cast states is the operand's (it used to be read and ignored)
    ("cast %1 : index -> f32", "cast %1 : i64 -> f32", r"line 4: cannot read .*operand 0 is index, not i64"),
    ("for_each (%1 = i<%0>)", "for_each_block (%1 = i<%0>) threads (%3 = t<0>)",
     r"line 3: for_each_block: ForEachBlockAttrs\.threads must be 1 to 3"),
])
def test_the_parser_refuses_bad_attributes_naming_the_line(old, new, message):
    assert parse(GOOD).text() == GOOD
    assert old in GOOD
    with pytest.raises(parse_error(), match=message):
        parse(GOOD.replace(old, new))


def parse_error():
    from accy.dsl.parse import ParseError

    return ParseError


def test_the_verifier_refuses_attributes_that_are_not_the_ops_schema():
    graph = parse(GOOD)
    store = graph.launch_op.regions[0].ops[-1]
    store.attrs = dict(store.attrs)  # the old untyped form
    with pytest.raises(VerificationError, match=r"store: attributes must be a StoreAttrs, got dict"):
        accy.dsl.verify(graph)


def test_the_verifier_asks_the_ops_verify_hook():
    graph = parse(GOOD)
    graph.launch_op.attrs = ForEachAttrs(axes=("i", "j"))
    with pytest.raises(VerificationError, match=r"for_each: 2 axis names for 1 extents"):
        accy.dsl.verify(graph)


# -- templates ---------------------------------------------------------------------------------


@pytest.mark.parametrize("template, message", [
    (" $0 : {dtype}", "no attribute 'dtype'"),
    (" {? $0...", r"'\{\?' is not closed"),
    (" $0 }", r"'\}' closes no"),
])
def test_a_bad_template_is_refused_when_the_table_is_built(template, message):
    with pytest.raises(ValueError, match=message):
        textformat.TextFormat(template, NoAttrs)


def test_a_template_must_write_every_attribute():
    with pytest.raises(ValueError, match=r"writes attributes \['dtype'\], its schema LoadAttrs has"):
        textformat.TextFormat(" $0 : {dtype}", LoadAttrs)


# -- traits ------------------------------------------------------------------------------------


def _having(trait):
    return {name for name, d in OPS.items() if getattr(d, trait)}


def test_traits_are_consistent():
    for name, d in OPS.items():
        if d.writes or d.launch or d.synchronises is Sync.BLOCK or d.declares_shared:
            assert not d.pure, name  # never merged, moved or dropped
        if d.synchronises or d.reads:
            assert not d.pure or d.can_fail(f32), name  # never hoisted
        if d.memory:  # an async copy reads global memory only (it writes its shared array, 'shared')
            assert d.names_buffer and ("space" in d.schema._names or name == "async_copy"), name
        if d.synchronises or d.declares_shared:
            assert d.in_blocks, name
        if d.commutative:
            assert d.arity == 2, name
        if d.reduction:
            assert d.commutative and d.pointwise and d.arity == 2, name
        if d.inexact:
            assert d.math and d.pointwise, name
        if d.regions is not None:
            assert not d.pointwise, name
    assert _having("terminator") == {"yield"} and _having("constant") == {"const"}
    assert _having("launch") == set(ir.LAUNCH_OPS) == {"for_each", "for_each_block", "for_each_tile"}
    assert _having("tile_launch") == {"for_each_tile"} <= _having("tiles") == ops.TILE_OPS
    assert _having("thread_blocks") == {"for_each_block"}
    assert _having("memory") == set(ir.MEMORY_OPS) == {"load", "store", "atomic", "tile_load", "tile_store",
                                                       "tile_atomic", "ldmatrix", "async_copy"}
    assert _having("reads") == {"load", "atomic", "tile_load", "tile_atomic", "ldmatrix", "async_copy"}
    assert _having("writes") == {"store", "atomic", "tile_store", "tile_atomic"}
    assert {n: d.synchronises for n, d in OPS.items() if d.synchronises} == {
        "barrier": Sync.BLOCK, "shuffle": Sync.WARP, "mma": Sync.WARP, "ldmatrix": Sync.WARP, "wgmma": Sync.WARP}
    assert {n: d.regions for n, d in OPS.items() if d.regions} == {
        "fold": RegionKind.LOOP, "if": RegionKind.BRANCH, "for_each": RegionKind.LAUNCH,
        "for_each_tile": RegionKind.LAUNCH,
        "for_each_block": RegionKind.LAUNCH}
    assert _having("own_result") == {"shuffle", "atomic", "mma", "ldmatrix", "wgmma"}
    assert _having("nvptx_only") == ops.NVPTX_OPS == {"mma", "ldmatrix", "async_copy", "async_commit", "async_wait",
                                                       "wgmma", "wgmma_fence", "wgmma_commit", "wgmma_wait",
                                                       "fence_proxy_async", "mbarrier_init", "mbarrier_arrive",
                                                       "mbarrier_wait", "tma_load", "tma_ready", "setmaxnreg"}


def test_the_inexact_math_functions_are_one_trait():
    from accy.codegen import arithmetic
    from accy.runtime.interpreter import numerics
    from accy.codegen.host import vecmath
    from accy.compare import MATH_FUNCTIONS

    inexact = _having("inexact")
    assert {"exp", "log", "sin", "pow", "atan2"} <= inexact and not {"sqrt", "floor", "fma", "copysign"} & inexact
    assert MATH_FUNCTIONS == inexact  # derived
    # the backends' math tables, checked against the trait: each inexact op has a routine
    assert set(vecmath.FUNCTIONS) == inexact
    assert set(arithmetic.MATH) == inexact | {"sqrt"}  # sqrt is exact, but a libdevice call too
    assert set(numerics.MATH64) | {"pow"} == inexact | {"sqrt"}


def test_compare_names_the_inexact_ops_a_kernel_uses():
    @kernel(dst=dynamic_buffer(f32), x=dynamic_buffer(f32))
    def uses_exp(k, a):
        k.for_each_1d(axis("i", 4), lambda inner, idx: a.dst.store(
            inner, inner.sqrt(inner.exp(a.x[idx["i"]])), idx["i"]))

    report = accy.compare(uses_exp, [np.zeros(4, np.float32), np.ones(4, np.float32)], backends=["numpy"])
    assert report.inexact_ops == ("exp",)


# -- passes ask traits ---------------------------------------------------------------------------


def test_integer_division_by_one_folds_by_the_op_tables_identity():
    @kernel(dst=dynamic_buffer(index))
    def by_one(k, a):
        k.for_each_1d(axis("i", 4), lambda inner, idx: a.dst.store(inner, idx["i"] // 1, idx["i"]))

    assert OPS["div"].identity == 1 and not OPS["div"].commutative
    assert " div " not in by_one.graph.text() and " div " in by_one.traced_graph.text()
    dst = np.zeros(4, np.int64)
    by_one.run([dst])
    assert dst.tolist() == [0, 1, 2, 3]


def test_the_templates_the_ir_reference_quotes_are_the_tables():
    text = open(__file__.replace("tests/test_op_table.py", "docs/ir.md")).read()
    for name in ("add", "load"):
        (template,) = OPS[name].text.template
        assert f"`{template}`" in text, name
