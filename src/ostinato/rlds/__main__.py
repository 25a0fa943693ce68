"""``python -m ostinato.rlds``: the ``ostinato-ingest`` command (see
:mod:`ostinato.rlds.ingest_cli`)."""

import sys

from ostinato.rlds.ingest_cli import main

sys.exit(main())
