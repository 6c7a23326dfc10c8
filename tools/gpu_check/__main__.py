"""``python -m tools.gpu_check``: :func:`tools.gpu_check.runner.main`."""

import sys

from tools.gpu_check.runner import main

sys.exit(main())
