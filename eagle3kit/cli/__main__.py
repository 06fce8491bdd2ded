"""``python -m eagle3kit.cli``: the ``eagle3kit`` command."""

import sys

from eagle3kit.cli import main

sys.exit(main())
