# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Known-bug patches for vLLM, applied when the module they fix is imported.

Each patch is a module here with `TARGET` (the dotted module it fixes) and `apply(module) -> str`
(what it did, or why it left the module alone). `install(names)` registers an import hook, so a
patch lands the moment vLLM imports the target, before any other module copies a name out of it.
"""

import importlib
import importlib.abc
import importlib.util
import sys

_PENDING = {}
APPLIED = {}


def _log(text):
    sys.stderr.write(f"[llmfleet-patches] {text}\n")


def _run(name, patch, module):
    try:
        APPLIED[name] = patch.apply(module)
    except Exception as exc:  # a patch must never stop the engine from starting
        APPLIED[name] = f"failed: {exc!r}"
    _log(f"{name}: {APPLIED[name]}")


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, patches):
        self.inner, self.patches = inner, patches

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        for name, patch in self.patches:
            _run(name, patch, module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _PENDING:
            return None
        patches = _PENDING.pop(fullname)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, patches)
        return spec


def install(names):
    """Apply each named patch now if its target is already imported, else when it is."""
    for name in (n.strip() for n in names):
        if not name:
            continue
        try:
            patch = importlib.import_module(f"{__name__}.{name}")
        except ImportError:
            _log(f"{name}: no such patch in llmfleet_patches (ignored)")
            continue
        if patch.TARGET in sys.modules:
            _run(name, patch, sys.modules[patch.TARGET])
        else:
            _PENDING.setdefault(patch.TARGET, []).append((name, patch))
    if _PENDING and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
