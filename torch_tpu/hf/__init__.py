"""Hugging Face integration that Transformers cannot express through its own
settings yet: generation defaults for models on tpu (``generation.py``).

torch's autoload imports torch_tpu before Transformers, so the defaults are
installed when ``transformers.generation.utils`` is first imported
(``import_hook.py``), or at once if it already is.
"""
from . import import_hook


def install() -> None:
    """Install the generation defaults once Transformers' generation module loads."""
    from . import generation
    import_hook.after_import("transformers.generation.utils", generation.install)
