"""`python -m harness.cli ...` (what torchrun / accelerate launch and the experiment runner's launcher run)."""

import sys

from harness.cli import main

sys.exit(main())
