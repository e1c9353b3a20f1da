"""Make this checkout importable as ansible_collections.llmfleet.serving (see `make link`)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "llmfleet", "serving")

if not os.path.islink(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(ROOT, LINK)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# tests/llmfleet_testing.py (running ansible and reading its JSON results) is importable from every test folder.
TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
