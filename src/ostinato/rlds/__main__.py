"""``python -m ostinato.rlds``: the ``ostinato-ingest`` command (see :mod:`ostinato.rlds.cli`)."""

import sys

from ostinato.rlds.cli import main

sys.exit(main())
