"""``python -m voxwire``: the same as the ``voxwire`` command."""

import sys

from voxwire.cli import main

sys.exit(main())
