"""`python -m ge_hub` is the `ge-hub` command."""

import sys

from ge_hub.cli import main

sys.exit(main())
