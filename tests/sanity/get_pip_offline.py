"""Offline stand-in for the get-pip.py bootstrap script that ansible-test downloads.

ansible-test creates each sanity tool's venv without pip and bootstraps it by running a copy of
get-pip.py fetched from ci-files.testing.ansible.com, which cannot be reached from here. ansible-test
reads the script from ~/.ansible/test/cache/get_pip_<version>.py when it is there (its own error
message says so); the Makefile puts this file there. It installs pip from the interpreter's
bundled wheel (ensurepip) and then the pip version ansible-test asked for, from PyPI.
"""

import subprocess
import sys

# get-pip.py accepts these two flags on top of pip's own install options.
args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", *args])
