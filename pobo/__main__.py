"""`python -m pobo ...`: the pobo command line (what the `pobo` script runs)."""
import sys

from pobo.cli import main

sys.exit(main())
