"""Old module paths that keep working one release after their modules moved into folders.

:data:`MOVED_MODULES` maps an old dotted path to the module's home now. A finder on
``sys.meta_path`` (installed when this
module is imported, first thing in the package's face) answers an import of an old path with
the module itself, so one object sits under both names (private names, ``monkeypatch`` and
``isinstance`` behave as before), and a :class:`DeprecationWarning` names the new path. No
file is left behind at the old path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

__all__ = ["MOVED_MODULES", "install"]

#: old module path -> new module path (one release; then the entries go).
MOVED_MODULES = {
    "milp_parallel.kbest": "milp_parallel.solvers.kbest",
    "milp_parallel.crosscheck": "milp_parallel.plan.crosscheck",
    "milp_parallel.baselines": "milp_parallel.plan.baselines",
    "milp_parallel.progress": "milp_parallel.plan.progress",
    "milp_parallel.topology": "milp_parallel.machine.topology",
    "milp_parallel.clusters": "milp_parallel.machine.clusters",
    "milp_parallel.collectives": "milp_parallel.machine.collectives",
    "milp_parallel.roofline": "milp_parallel.machine.roofline",
    "milp_parallel.configs": "milp_parallel.costs.configs",
    "milp_parallel.build": "milp_parallel.costs.build",
    "milp_parallel.simulate": "milp_parallel.costs.simulator",
    "milp_parallel.profile": "milp_parallel.measure.profile",
    "milp_parallel.calibrate": "milp_parallel.measure.calibrate",
    "milp_parallel.paradl": "milp_parallel.oracle.paradl_files",
    "milp_parallel._optional": "milp_parallel.errors",
    "milp_parallel.tensor_parallel": "milp_parallel.pipeline.tensor_parallel",
    "milp_parallel.training_memory": "milp_parallel.pipeline.training_memory",
    "milp_parallel.step_costs": "milp_parallel.pipeline.step_costs",
}

#: Old paths whose last part is also a name of the package's face (``milp_parallel.simulate``
#: is the function): the import system would overwrite that name with the module, so these
#: get a stand-in module in ``sys.modules`` that forwards each attribute, with the warning.
_SHADOWED = ("milp_parallel.simulate",)

#: Names that left a moved module for another one: ``(old module, name) -> module``.
_MOVED_NAMES = {("milp_parallel.simulate", "simulate"): "milp_parallel.plan.simulation"}


class _Loader(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.spec         # the import system set the old path's spec


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = MOVED_MODULES.get(fullname)
        if new is None or fullname in _SHADOWED:
            return None
        warnings.warn(f"{fullname} moved to {new}; the old path works until the next release",
                      DeprecationWarning, stacklevel=2)
        return importlib.machinery.ModuleSpec(fullname, _Loader(new))


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):           # inspect and pickle probe every module
            raise AttributeError(name)
        new = _MOVED_NAMES.get((self.__name__, name), MOVED_MODULES[self.__name__])
        warnings.warn(f"{self.__name__} moved to {new}; the old path works until the next "
                      "release", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)


def install() -> None:
    """Put the finder on ``sys.meta_path`` and the stand-ins in ``sys.modules`` (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
    for old in _SHADOWED:
        sys.modules.setdefault(old, _StandIn(old))


install()
