"""Puts the repository root on sys.path so tests can import `configs` and `tests.fixtures`."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
