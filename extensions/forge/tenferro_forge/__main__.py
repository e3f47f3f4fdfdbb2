"""``python -m tenferro_forge``."""

import sys

from .cli import main

sys.exit(main())
