"""``python -m ostinato.ops top|info ADDRESS``: the ``ostinato`` command."""

import sys

from ostinato.ops.ostinato_cli import main

sys.exit(main())
