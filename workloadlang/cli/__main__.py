"""`python -m workloadlang.cli ...`: the `wl` command."""

import sys

from workloadlang.cli.main import main

sys.exit(main())
