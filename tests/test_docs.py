"""Every ```python block in docs/*.md runs: each document's blocks in order,
in one fresh subprocess (so later blocks see earlier names, as a reader would).

A block whose first line is ``# doc-test: skip (reason)`` is not run (it needs
torchrun or a real TPU); those stay few.
"""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
SKIP = "# doc-test: skip"


def doc_files():
    if not os.path.isdir(DOCS):
        return []
    return sorted(os.path.join(r, f) for r, _, fs in os.walk(DOCS) for f in fs if f.endswith(".md"))


def blocks(path):
    """[(line number, code, skipped)] of the python blocks in a Markdown file."""
    text = open(path, encoding="utf-8").read()
    out = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start(1)) + 1
        code = m.group(1)
        out.append((line, code, code.lstrip().startswith(SKIP)))
    return out


_RUNNER = """
import sys
path, blocks = sys.argv[1], __import__("json").loads(sys.stdin.read())
scope = {"__name__": "__main__"}
for line, code in blocks:
    # Pad with newlines so tracebacks show the line number in the .md file.
    exec(compile("\\n" * (line - 1) + code, path, "exec"), scope)
    print(f"doc block at line {line}: ok", flush=True)
"""


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: os.path.relpath(p, DOCS))
def test_doc_python_blocks_run(path, tmp_path):
    import json
    found = blocks(path)
    runnable = [(line, code) for line, code, skipped in found if not skipped]
    if not runnable:
        pytest.skip("no runnable python blocks")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TORCH_TPU_LOGS", None)
    proc = subprocess.run([sys.executable, "-c", _RUNNER, path], input=json.dumps(runnable),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{path}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    assert proc.stdout.count(": ok") == len(runnable)


def test_skipped_doc_blocks_are_few():
    counts = [(p, len(bs), sum(s for _, _, s in bs)) for p in doc_files() for bs in [blocks(p)]]
    total = sum(n for _, n, _ in counts)
    skipped = sum(s for _, _, s in counts)
    assert total > 0, "docs/ has no python blocks"
    # Most examples must be exercised; only multi-process or real-TPU ones are exempt.
    assert skipped <= max(2, total // 5), f"{skipped} of {total} doc blocks are skipped: {counts}"
    for p in doc_files():
        for line, code, skipped in blocks(p):
            if skipped:
                first = code.lstrip().splitlines()[0]
                assert "(" in first, f"{p}:{line}: say why a block is skipped: {first!r}"


def test_guide_is_linked_from_readme():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "docs/guide.md" in readme and "docs/benchmarks" in readme
