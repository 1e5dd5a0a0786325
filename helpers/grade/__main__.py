"""python -m helpers.grade SUBMISSIONS... --out DIR (see helpers.grade.grader)."""

import sys

from helpers.grade.grader import main

sys.exit(main())
