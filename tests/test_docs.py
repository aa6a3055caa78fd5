"""Code samples in the README and docs/ run as written."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_samples():
    for path in DOCS:
        for n, code in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S)):
            yield pytest.param(code, id=f"{path.name}-{n}")


@pytest.mark.parametrize("code", list(python_samples()))
def test_sample_runs(code):
    env = {}
    exec(compile(code, "<doc sample>", "exec"), env)
