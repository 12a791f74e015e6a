"""Moved to :mod:`milp_parallel.pipeline.training_memory` (this path works one release, with a
warning). Every name of the new module, private ones too, is re-exported here: the same
objects under the old path.
"""

import warnings

from .pipeline import training_memory as _new

globals().update({k: v for k, v in vars(_new).items()
                  if not k.startswith("__") or k == "__all__"})
warnings.warn("milp_parallel.training_memory moved to milp_parallel.pipeline.training_memory; "
              "the old path works until the next release", DeprecationWarning, stacklevel=2)
