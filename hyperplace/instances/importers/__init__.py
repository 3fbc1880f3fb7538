"""Importers from the formats real clusters are described in, into hyperplace's models.

Each takes a path or a bundled file (:func:`bundled`) and returns domain objects; a bad file
is an :class:`~hyperplace.errors.InputError` naming the file and what is wrong.

* ``nvidia-smi topo -m`` text -> :class:`Node` (:func:`import_nvidia_smi_topo`)
* NCCL topology XML (Azure ND/NC, AWS p4d/p5) -> :class:`Node` (:func:`import_nccl_topology`,
  :func:`import_cloud_shape` for the bundled files with their vendor facts)
* NVLink link-count matrix (DGX-1 V100) -> :class:`Node` (:func:`import_nvlink_link_matrix`)
* Volcano HyperNode YAML <-> :class:`FabricSpec` (:func:`import_hypernodes`,
  :func:`fabric_to_hypernodes`)
* Alibaba GPU traces -> (:class:`Cluster`, extra GPU types) and pending jobs
  (:func:`import_alibaba_gpu2023_nodes`, :func:`import_alibaba_pai2020_machines`,
  :func:`import_alibaba_gpu2023_pods`)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hyperplace.instances.importers._source import bundled
    from hyperplace.instances.importers.alibaba import (
        TRACE_GPU_TYPES,
        import_alibaba_gpu2023_nodes,
        import_alibaba_gpu2023_pods,
        import_alibaba_pai2020_machines,
    )
    from hyperplace.instances.importers.dgx1 import import_nvlink_link_matrix, read_link_matrix
    from hyperplace.instances.importers.hypernode import (
        dump_hypernodes,
        fabric_to_hypernodes,
        hypernodes_to_fabric,
        import_hypernodes,
    )
    from hyperplace.instances.importers.nccl_xml import (
        CLOUD_SHAPES,
        import_cloud_shape,
        import_nccl_topology,
    )
    from hyperplace.instances.importers.nvidia_smi import import_nvidia_smi_topo

# Imported on first use: reading a Kubernetes or job document imports its own module
# (``importers.jobs``, ``importers.kubernetes``) and with it this package, which should not
# load every other format's reader (XML, traces) on a solve's path.
_LAZY = {
    "bundled": "_source",
    "TRACE_GPU_TYPES": "alibaba",
    "import_alibaba_gpu2023_nodes": "alibaba",
    "import_alibaba_gpu2023_pods": "alibaba",
    "import_alibaba_pai2020_machines": "alibaba",
    "import_nvlink_link_matrix": "dgx1",
    "read_link_matrix": "dgx1",
    "dump_hypernodes": "hypernode",
    "fabric_to_hypernodes": "hypernode",
    "hypernodes_to_fabric": "hypernode",
    "import_hypernodes": "hypernode",
    "CLOUD_SHAPES": "nccl_xml",
    "import_cloud_shape": "nccl_xml",
    "import_nccl_topology": "nccl_xml",
    "import_nvidia_smi_topo": "nvidia_smi",
}

__all__ = [
    "CLOUD_SHAPES", "TRACE_GPU_TYPES", "bundled", "dump_hypernodes", "fabric_to_hypernodes",
    "hypernodes_to_fabric", "import_alibaba_gpu2023_nodes", "import_alibaba_gpu2023_pods",
    "import_alibaba_pai2020_machines", "import_cloud_shape", "import_hypernodes",
    "import_nccl_topology", "import_nvidia_smi_topo", "import_nvlink_link_matrix",
    "read_link_matrix",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hyperplace.instances.importers' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"hyperplace.instances.importers.{module}"), name)
