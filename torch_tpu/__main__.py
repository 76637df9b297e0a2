"""``python -m torch_tpu``: the environment report (see env_report.py)."""
import sys

from torch_tpu.env_report import main

if __name__ == "__main__":
    sys.exit(main())
