"""torch_tpu.import_hook: what runs after a module is imported (the "tpu"
Dynamo backend once torch._dynamo loads, generate()'s defaults once
Transformers does), and how it behaves with modules still importing and with
a callback that fails."""
import sys

import pytest

import torch_tpu  # noqa: F401


@pytest.mark.parametrize("next_import", ["a new module", "a module already loaded"])
def test_import_hook_waits_for_a_module_that_is_still_importing(tmp_path, monkeypatch, next_import):
    # torch's autoload imports torch_tpu from inside the first module that
    # imports torch: a watched module can be in sys.modules, half-built
    import builtins
    from torch_tpu import import_hook
    (tmp_path / "tpu_hook_watched.py").write_text(
        "from torch_tpu import import_hook\n"
        "import tpu_hook_spy\n"
        "import_hook.after_import('tpu_hook_watched', tpu_hook_spy.seen.append)\n"
        "DEFINED_LATER = True\n"
        "tpu_hook_spy.seen_at_the_end = list(tpu_hook_spy.seen)\n")
    (tmp_path / "tpu_hook_spy.py").write_text("seen = []\n")
    (tmp_path / "tpu_hook_next.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    import tpu_hook_spy
    seen = tpu_hook_spy.seen
    import tpu_hook_watched
    assert tpu_hook_spy.seen_at_the_end == []  # not called half-built
    if next_import == "a new module":
        import tpu_hook_next  # noqa: F401  (the next import finds it done)
    else:
        import os  # noqa: F401  (no finder asked: the wrapped import statement finds it done)
    assert seen == [tpu_hook_watched] and seen[0].DEFINED_LATER
    assert "tpu_hook_watched" not in import_hook._pending
    assert builtins.__import__ is import_hook._real_import  # (the import statement unwrapped again)
    for name in ("tpu_hook_watched", "tpu_hook_spy", "tpu_hook_next"):
        sys.modules.pop(name, None)


def test_import_hook_failure_warns_instead_of_failing_the_import(tmp_path, monkeypatch):
    from torch_tpu import import_hook
    (tmp_path / "tpu_hook_broken.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def broken(module):
        raise AttributeError("no such class")
    import_hook.after_import("tpu_hook_broken", broken)
    with pytest.warns(UserWarning, match="after importing tpu_hook_broken failed.*no such class"):
        import tpu_hook_broken
    assert tpu_hook_broken.VALUE == 1 and "tpu_hook_broken" not in import_hook._pending
    sys.modules.pop("tpu_hook_broken", None)
