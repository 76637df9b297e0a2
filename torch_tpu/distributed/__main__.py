"""``python -m torch_tpu.distributed``: print the launch env for ``eval``."""
import shlex

from .launch import launch_env

for key, value in launch_env().items():
    print(f"export {key}={shlex.quote(value)}")
