"""hyperplace: placement, layer-split and federation decisions for foundation-model training.

The public surface is small on purpose: domain objects live in :mod:`hyperplace.models`,
bundled and generated instances in :mod:`hyperplace.instances`, solvers in
:mod:`hyperplace.solvers`.
"""

__version__ = "0.1.0"
