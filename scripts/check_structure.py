"""Checks the compiler's shape (run in CI): the stages import one way, no class or module is too big.

Over the stages after the front end (``accy/lowering``, ``accy/codegen``, ``accy/runtime`` and the
shared ``accy/targets.py``; the DSL front end and the emulator aside):

- no module over ``MAX_MODULE`` lines;
- no class over ``MAX_CLASS`` lines, counting with it the mixins only it uses (a god-class split
  into mixins is still one class) and the module functions that take its state (a parameter
  annotated with the class);
- the warp size is written once (``accy/targets.py``);
- every import (module level or inside a function) goes down the stages, never back up, and
  the modules of accy import one another with no circle.

``python scripts/check_structure.py`` prints the largest classes and modules and exits 1 on a
breach, naming it.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "accy"
MAX_MODULE = 800
MAX_CLASS = 400
MEASURED = ("accy.lowering", "accy.codegen", "accy.runtime", "accy.targets")

# the stages, first to last: a module may import its own stage and the ones before it
STAGES = (
    ("accy.errors", "accy.version", "accy.time_limit"),
    ("accy.dsl", "accy.targets", "accy.cache", "accy.diagnostics", "accy.math"),
    ("accy.lowering",),
    ("accy.codegen", "accy.emulator"),
    ("accy.runtime",),
    ("accy",),  # the API over them: Program, the library, the CLI, the tools
)
WARP_LITERAL = re.compile(r"\b(WARP\w*|warp_size)\s*(:\s*\w+(\[\w+\])?)?\s*=\s*32\b|warps\s*\*\s*32\b|32\s*\*\s*warps\b")


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def stage(name: str) -> int:
    best, length = len(STAGES) - 1, 0
    for index, prefixes in enumerate(STAGES):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > length:
                best, length = index, len(prefix)
    return best


def imports(path: pathlib.Path, name: str, modules: set[str]) -> set[str]:
    """The modules of accy that ``path`` (module ``name``) imports, anywhere in it."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("accy")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            if not base.startswith("accy"):
                continue
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules}
            found |= subs or {base}
    return {m for m in found if m in modules and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def class_sizes(files: dict[str, pathlib.Path]) -> dict[str, int]:
    """Each measured class's lines, with the mixins only it uses and the functions taking its state."""
    classes, users, functions = {}, {}, []
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                key = f"{name}.{node.name}"
                bases = [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                         if isinstance(b, (ast.Name, ast.Attribute))]
                classes[key] = (node.name, node.end_lineno - node.lineno + 1, bases)
            elif isinstance(node, ast.FunctionDef):
                annotations = {ast.unparse(a.annotation).strip("'\"") for a in node.args.args if a.annotation}
                functions.append((annotations, node.end_lineno - node.lineno + 1))
    by_short = {}
    for key, (short, _, _) in classes.items():
        by_short.setdefault(short, []).append(key)
    for key, (_, _, bases) in classes.items():
        for base in bases:
            for base_key in by_short.get(base, ()):
                users.setdefault(base_key, set()).add(key)

    def own_mixins(key, seen):
        total = 0
        for base in classes[key][2]:
            for base_key in by_short.get(base, ()):
                if base_key not in seen and users.get(base_key) == {key}:
                    seen.add(base_key)
                    total += classes[base_key][1] + own_mixins(base_key, seen)
        return total

    sizes = {}
    for key, (short, lines, _) in classes.items():
        if key in {b for b, u in users.items() if len(u) == 1}:
            continue  # a mixin of one class is counted with that class
        taking = sum(n for annotations, n in functions if short in annotations)
        sizes[key] = lines + own_mixins(key, set()) + taking
    return sizes


def main() -> int:
    files = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    measured = {n: p for n, p in files.items() if n.startswith(MEASURED)}
    problems = []

    lengths = {n: len(p.read_text().splitlines()) for n, p in measured.items()}
    problems += [f"module {n} has {k} lines (at most {MAX_MODULE})" for n, k in lengths.items() if k > MAX_MODULE]
    sizes = class_sizes(measured)
    problems += [f"class {n} has {k} lines with its own mixins and helpers (at most {MAX_CLASS})"
                 for n, k in sizes.items() if k > MAX_CLASS]

    warp = [f"{p.relative_to(ROOT)}:{i}" for n, p in files.items() if n != "accy.targets" and not n.startswith("accy.emulator")
            for i, line in enumerate(p.read_text().splitlines(), 1) if WARP_LITERAL.search(line.split("#")[0])]
    problems += [f"the warp size is written again at {where} (it is accy.targets.WARP_SIZE)" for where in warp]

    graph = {n: imports(p, n, set(files)) for n, p in files.items()}
    for n, targets in sorted(graph.items()):
        for t in sorted(targets):
            if stage(t) > stage(n):
                problems.append(f"{n} imports {t}, a later stage (the stages go {' -> '.join(s[0] for s in STAGES)})")
    problems += [f"import circle: {' <-> '.join(c)}" for c in cycles(graph)]

    print("largest classes (lines, with own mixins and helpers):")
    for n, k in sorted(sizes.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {k:5d}  {n}")
    print("largest modules:")
    for n, k in sorted(lengths.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {k:5d}  {n}")
    for problem in problems:
        print("FAIL:", problem)
    print(f"{len(problems)} problems" if problems else "structure OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
