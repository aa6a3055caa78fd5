"""Code samples in the README and docs/ run as written, as a user runs them, and print
what they say they print.

A user's environment has no ``ACCY_CHECK_MEMORY``, so the samples run without the
suite's default of it (tests/conftest.py turns it on for every other test). A comment
after a ``print(...)`` is that line's output: ``...`` stands for any text, further
comment lines aligned under it continue it, and a ``  # `` inside it starts a note that
is not output. Only ```python blocks run: other projects' code shown for comparison
(docs/coming-from.md's Triton and Numba-CUDA) is fenced as ```py.
"""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import attrs
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PRINT = re.compile(r"^(?P<indent>\s*)print\((?P<args>.*?)\)\s+(?P<hash>#)\s?(?P<quote>.*)$")
NOTE = "  # "


# a sample that imports one of these optional packages skips, saying so, where it is not installed,
# and carries the marker of that name (pyproject.toml)
OPTIONAL = {"torch": "pip install 'accy[torch]'"}


def _optional_marks(code: str) -> list:
    marks = []
    for name, install in OPTIONAL.items():
        if re.search(rf"^\s*(import|from) {name}\b", code, re.M):
            marks += [getattr(pytest.mark, name), pytest.mark.skipif(
                importlib.util.find_spec(name) is None, reason=f"the sample needs {name}, not installed here ({install})")]
    return marks


def python_samples():
    for path in DOCS:
        for n, code in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S)):
            yield pytest.param(code, id=f"{path.name}-{n}", marks=_optional_marks(code))


@attrs.frozen
class Quoted:
    line: int  # in the sample, from 1
    call: str  # the print's arguments
    text: str  # what the comment says it prints

    def matches(self, printed: str) -> bool:
        pattern = ".*?".join(re.escape(part) for part in self.text.split("..."))
        return re.fullmatch(pattern, printed, re.S) is not None


def quoted_outputs(code: str) -> tuple[str, dict[int, Quoted]]:
    """The sample with each commented ``print(...)`` turned into a call that records what it
    printed, and the quoted outputs by line."""
    lines = code.splitlines()
    quotes = {}
    for n, line in enumerate(lines):
        m = PRINT.match(line)
        if m is None:
            continue
        column = m.start("hash")
        text = [m["quote"]]
        for follow in lines[n + 1:]:
            if len(follow) <= column or follow[column] != "#" or follow[:column].strip():
                break
            text.append(follow[column + 1:].removeprefix(" "))
        quote = "\n".join(t.split(NOTE)[0].rstrip() for t in text)
        quotes[n + 1] = Quoted(n + 1, m["args"], quote)
        lines[n] = f"{m['indent']}__quoted__({n + 1}, {m['args']})"
    return "\n".join(lines) + "\n", quotes


def run_sample(code: str) -> None:
    source, quotes = quoted_outputs(code)
    printed: dict[int, str] = {}

    def record(line, *values):
        printed[line] = " ".join(map(str, values))
        print(*values)

    exec(compile(source, "<doc sample>", "exec"), {"__quoted__": record})
    wrong = []
    for line, quote in quotes.items():
        if line not in printed:
            wrong.append(f"line {line}: print({quote.call}) never ran, so its quoted output is unchecked")
        elif not quote.matches(printed[line]):
            wrong.append(f"line {line}: print({quote.call}) printed\n{printed[line]}\nbut the sample says\n{quote.text}")
    if wrong:
        raise AssertionError("\n\n".join(wrong))


@pytest.fixture
def as_a_user_runs_it(monkeypatch):
    """No memory checks unless the sample asks: what a user's environment has."""
    monkeypatch.delenv("ACCY_CHECK_MEMORY", raising=False)


@pytest.mark.parametrize("code", list(python_samples()))
def test_sample_runs(code, as_a_user_runs_it):
    run_sample(code)


def test_samples_run_without_the_suites_memory_checks(as_a_user_runs_it):
    from accy.runtime.interpreter.simt import check_memory_default

    assert not check_memory_default()


def _planted_bug_sample() -> str:
    (code,) = [p.values[0] for p in python_samples() if 'Program("neighbour"' in p.values[0]]  # docs/tools.md
    return code


@pytest.mark.parametrize("width", ["16", "8"])
def test_the_planted_bug_sample_catches_its_bug_at_every_vector_width(width):
    """docs/tools.md's planted bug is caught by comparing the backends, whatever the CPU's
    vector width, in a fresh process with the user's environment (no memory checks)."""
    env = {k: v for k, v in os.environ.items() if k != "ACCY_CHECK_MEMORY"} | {"ACCY_VECTOR_WIDTH": width}
    check = ("import sys, test_docs\n"
             "from accy.codegen.host.chunking import host_vector_width\n"
             f"assert host_vector_width() == {width}\n"
             "test_docs.run_sample(sys.stdin.read())\n")
    done = subprocess.run([sys.executable, "-c", check], input=_planted_bug_sample(), text=True, env=env,
                          cwd=ROOT / "tests", capture_output=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DISAGREE" in done.stdout


def test_quoted_outputs_are_checked():
    """The checker itself: a wrong quote fails, ``...`` and notes and continued lines work."""
    sample = ("x = 3\nprint(x, x + 1)   # 3 4  # a note\n"
              "print('a\\nb')      # a\n"
              "                   # b\n"
              "print([x] * 9)     # [3, ..., 3]\n")
    assert [q.text for q in quoted_outputs(sample)[1].values()] == ["3 4", "a\nb", "[3, ..., 3]"]
    run_sample(sample)
    with pytest.raises(AssertionError, match="printed\n3 4\nbut the sample says\n3 5"):
        run_sample("x = 3\nprint(x, x + 1)   # 3 5\n")
    with pytest.raises(AssertionError, match="never ran"):
        run_sample("if False:\n    print(1)   # 1\n")


def test_backends_md_names_every_reduction_a_vectorised_fold_combines_with():
    from accy.dsl.ops import REDUCTIONS

    text = (ROOT / "docs" / "backends.md").read_text()
    vectorised = text[text.index("- **vectorised**"):text.index("- **uniform**")]
    assert [op for op in REDUCTIONS.values() if f"`{op}`" not in vectorised] == []


def test_the_docs_index_names_the_ptx_backend_and_every_attention_entry():
    from accy.runtime import BACKENDS

    index = (ROOT / "docs" / "index.md").read_text()
    assert "ptx" in BACKENDS and "`ptx` backend" in index
    for kind in ("naive", "fused", "flash"):
        assert kind in index


def test_user_docs_explain_the_seed_or_do_not_say_it():
    """"the seed" means the original Zig implementation; only the porting guide uses the word (a
    random number generator's seed aside: its lines name the generator)."""
    for path in DOCS:
        if path.name != "porting.md":
            said = re.findall(r"[^\n]*\bseed(?:'s| kernels|\b(?! *=))[^\n]*", path.read_text())
            assert [line for line in said if not re.search(r"--seed|random seed|seed of the inputs|rand|Philox", line)] == [], path.name
