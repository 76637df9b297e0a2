"""Hugging Face integration that Transformers cannot express through its own
settings yet: generation defaults for models on tpu (``generation.py``).

torch's autoload imports torch_tpu before Transformers (or from inside it:
``transformers.generation.utils`` imports torch at its top), so the defaults
are installed once that module has been imported (``torch_tpu/import_hook.py``).
"""
from .. import import_hook


def install() -> None:
    """Install the generation defaults once Transformers' generation module loads."""
    from . import generation
    import_hook.after_import("transformers.generation.utils", generation.install)
