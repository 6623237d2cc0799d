"""Runs the Python binding's unittest suite for meson (exit 77 = skipped when numpy is missing)."""
import os
import sys
import unittest

try:
    import numpy  # noqa: F401  (python3-numpy from Debian)
except ImportError:
    print("SKIP: numpy is not installed (apt-get install python3-numpy)")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py")
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() else 1)
