"""``python -m pytest_agentperturb.cli``: the ``agentperturb`` command."""

import sys

from . import main

sys.exit(main())
