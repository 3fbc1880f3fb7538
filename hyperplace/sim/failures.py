"""Failure injection with the causes Meta reported for Llama 3 pre-training.

Rate: Meta's Llama 3 report ("The Llama 3 Herd of Models", 2024, section 3.3.4, Table 5)
counts 419 unexpected interruptions in a 54-day snapshot of pre-training on 16,384 H100
GPUs: one per 2,111 GPU-days. ``rate`` scales that figure (``--failures 1`` = Meta's rate,
``0`` = no failures); failures arrive as a Poisson process over all GPUs of the instance.

Causes, with Table 5's counts, and what each takes down here:

* GPU (faulty GPU 148, HBM3 72, SRAM 19, GPU system processor 17, silent data corruption 6,
  thermal interface/sensor 6): that one GPU, for :data:`REPAIR_S` ``gpu``.
* host (host maintenance 32, NIC 7, SSD 3, power supply 3, chassis 2, IO expansion board 2,
  CPU 2, system memory 2): the whole node, for ``host``.
* network (network switch/cable 35): a leaf switch the GPU's node hangs on, and so every
  node on it, for ``switch``.
* software (software bug 54, NCCL watchdog timeout 7, dependency 2): the job on the GPU
  restarts from its checkpoint; no hardware goes down.

Repair times are not in the report: :data:`REPAIR_S` are our documented assumptions
(replace-and-burn-in a GPU: 6 h; reboot or reimage a host: 2 h; a switch or cable: 1 h).
The failure stream depends only on the seed, not on the policy, so every policy in a run
sees the same failures.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
PER_GPU_SECOND = LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * 86_400 * LLAMA3_GPUS)

CAUSES: dict[str, tuple[str, int]] = {
    "faulty GPU": ("gpu", 148), "GPU HBM3 memory": ("gpu", 72), "GPU SRAM memory": ("gpu", 19),
    "GPU system processor": ("gpu", 17), "silent data corruption": ("gpu", 6),
    "GPU thermal interface and sensor": ("gpu", 6),
    "host maintenance": ("host", 32), "NIC": ("host", 7), "SSD": ("host", 3),
    "power supply": ("host", 3), "server chassis": ("host", 2), "IO expansion board": ("host", 2),
    "CPU": ("host", 2), "system memory": ("host", 2),
    "network switch/cable": ("switch", 35),
    "software bug": ("software", 54), "NCCL watchdog timeout": ("software", 7),
    "dependency": ("software", 2),
}
assert sum(c for _, c in CAUSES.values()) == LLAMA3_INTERRUPTIONS

REPAIR_S = {"gpu": 6 * 3600.0, "host": 2 * 3600.0, "switch": 3600.0, "software": 0.0}


@dataclass(frozen=True)
class Failure:
    time_s: float
    node: str
    gpu: int
    cause: str
    scope: str
    repair_s: float


class FailureStream:
    """Seeded failures over ``gpus`` [(node, index)] at ``rate`` x Meta's Llama 3 rate."""

    def __init__(self, gpus: list[tuple[str, int]], rate: float, seed: int = 0,
                 repair_s: dict[str, float] | None = None):
        self.gpus = gpus
        self.rate = rate
        self.rng = random.Random(f"failures-{seed}")
        self.repair_s = dict(REPAIR_S, **(repair_s or {}))
        self._names = list(CAUSES)
        self._weights = [CAUSES[c][1] for c in self._names]
        self._t = 0.0

    @property
    def per_second(self) -> float:
        return self.rate * PER_GPU_SECOND * len(self.gpus)

    def next(self) -> Failure | None:
        if self.rate <= 0 or not self.gpus:
            return None
        self._t += self.rng.expovariate(self.per_second)
        node, gpu = self.gpus[self.rng.randrange(len(self.gpus))]
        cause = self.rng.choices(self._names, self._weights)[0]
        scope = CAUSES[cause][0]
        return Failure(self._t, node, gpu, cause, scope, self.repair_s[scope])
