"""`python -m pobo ...`: the pobo command line (what the `pobo` script runs)."""
import sys

from pobo.scenarios.cli import main

sys.exit(main())
