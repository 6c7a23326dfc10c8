"""``python -m outofcore.gpu_check``: :func:`outofcore.gpu_check.runner.main`."""

import sys

from outofcore.gpu_check.runner import main

sys.exit(main())
