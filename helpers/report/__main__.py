"""python -m helpers.report: see helpers/report/__init__.py, or run it with --help."""

import sys

from helpers.report.bundle import main

sys.exit(main())
