"""Moved to :mod:`milp_parallel.pipeline.step_costs` (this path works one release, with a
warning). Every name of the new module, private ones too, is re-exported here: the same
objects under the old path.
"""

import warnings

from .pipeline import step_costs as _new

globals().update({k: v for k, v in vars(_new).items()
                  if not k.startswith("__") or k == "__all__"})
warnings.warn("milp_parallel.step_costs moved to milp_parallel.pipeline.step_costs; "
              "the old path works until the next release", DeprecationWarning, stacklevel=2)
