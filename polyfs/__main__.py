"""``python -m polyfs`` is the ``polyfs`` command."""
import sys

from .cli import main

sys.exit(main())
