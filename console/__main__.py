from __future__ import annotations

import sys

from console.cli import main

sys.exit(main())
