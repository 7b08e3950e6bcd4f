"""`python -m moac.gpu BUNDLE.json ...`: see moac/gpu/run.py."""
import sys

from .run import main

sys.exit(main())
