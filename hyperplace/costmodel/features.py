"""The fitted cost model's terms: one feature column per physical cost, per layer kind.

A layer's time on a GPU type is ``Σ_j coef[g, kind, j] · feature_j``, each feature a time the
hardware would take at 100 % efficiency, so each coefficient is an inverse efficiency
(``1/0.3`` for a matmul at 30 % of peak) fitted from measurements, never negative:

* ``matmul``: model FLOPs / (TP · peak at the run's precision);
* ``elementwise``: ``b·s·h`` values read and written / (TP · HBM bandwidth) (norms,
  activations, dropout, residuals: memory-bound);
* ``scores``: ``b·a·s²`` attention-score values / (TP · HBM bandwidth), zero with
  FlashAttention, which never materialises them;
* ``fixed``: a millisecond (kernel launches and framework overhead per layer);
* ``tpComm``: the layer's tensor-parallel all-reduces (4 per transformer layer, 2 for the
  embedding) at the measured intra-node bandwidth for that message size;
* ``tpFixed``: a millisecond when TP > 1 (synchronisation);
* ``logits``: ``b·s·V`` logits / (TP · HBM bandwidth) for the LM head;
* ``optimizer``: 16 bytes of Adam state traffic per parameter / HBM bandwidth.

Smooth in arithmetic intensity by construction: small layers are dominated by the fixed and
memory-bound terms, large ones by the matmul term, with the memory-bandwidth floor in between.
"""

from __future__ import annotations

from dataclasses import dataclass

from hyperplace.costmodel.collectives import ring_allreduce
from hyperplace.costmodel.hardware import (
    element_bytes,
    intra_node_bandwidth,
    memory_bandwidth,
    peak_flops,
)
from hyperplace.models.gpu import GPUCatalog, GPUType

MS = 1e-3
ADAM_BYTES_PER_PARAM = 16.0

COLUMNS: dict[str, tuple[str, ...]] = {
    "transformer": ("matmul", "elementwise", "scores", "fixed", "tpComm", "tpFixed"),
    "embedding": ("elementwise", "fixed", "tpComm", "tpFixed"),
    "head": ("matmul", "logits", "fixed", "tpFixed"),
    "norm": ("elementwise", "fixed"),
    "optimizer": ("optimizer", "fixed"),
}
KINDS = tuple(COLUMNS)
# Columns that are tensor-parallel communication (reported as the ``tpComm`` part).
TP_COLUMNS = {"tpComm", "tpFixed"}


@dataclass(frozen=True)
class LayerShape:
    """What the features need to know about one layer and one run."""

    kind: str
    flops: float  # forward+backward model FLOPs of the whole layer, one micro-batch
    micro_batch: float  # sequences per replica per micro-batch
    seq: int
    hidden: int
    heads: int
    vocab: int = 0
    params: float = 0.0  # parameters of the layer (optimizer features)
    tp: int = 1
    precision: str = "bf16"
    flash: bool = False


def features(shape: LayerShape, gpu: GPUType, catalog: GPUCatalog | None = None) -> list[float]:
    """The feature row of ``shape`` on ``gpu``, in the order of ``COLUMNS[shape.kind]``."""
    t = shape.tp
    el = element_bytes(shape.precision)
    bw = memory_bandwidth(gpu)
    sbh = shape.micro_batch * shape.seq * shape.hidden
    values: dict[str, float] = {"fixed": MS, "tpFixed": MS if t > 1 else 0.0}
    if shape.kind in ("transformer", "head"):
        values["matmul"] = shape.flops / (t * peak_flops(gpu, shape.precision))
    values["elementwise"] = sbh * el / (t * bw)
    values["scores"] = 0.0 if shape.flash else (
        shape.micro_batch * shape.heads * shape.seq * shape.seq * el / (t * bw))
    values["logits"] = shape.micro_batch * shape.seq * shape.vocab * el / (t * bw)
    values["optimizer"] = shape.params * ADAM_BYTES_PER_PARAM / (t * bw)
    if t > 1 and shape.kind in ("transformer", "embedding"):
        nbytes = sbh * el
        link, _ = intra_node_bandwidth(gpu, t, nbytes, catalog)
        count = 4 if shape.kind == "transformer" else 2
        values["tpComm"] = count * ring_allreduce(nbytes, t, link, 0.0)
    else:
        values["tpComm"] = 0.0
    return [values[c] for c in COLUMNS[shape.kind]]
