"""``python -m milp_parallel``: the ``milp-parallel`` command line."""

import sys

from .cli import main

sys.exit(main())
