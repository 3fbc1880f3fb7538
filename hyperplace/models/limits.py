"""Documented input limits, refused at once with the limit named (README "Limits").

Each limit is far above what a real cluster or queue needs and low enough that a typo or a
hostile file is refused in milliseconds instead of exhausting memory. The largest instances
benchmarked (bench/bench_scale.py --large, #25) are a federation of 16 clusters of 65,536
GPUs with 100,000 pending jobs (the GPU and job limits) and 262,144 GPUs with 32,768 jobs
in one cluster; their peak RSS per GPU and per job is in bench/results/scale.md.
The input-file limits (bytes, YAML aliases) are in :mod:`hyperplace.io`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

#: Longest name (node, switch, cluster, job, group): a Kubernetes object name's limit.
MAX_NAME_LENGTH = 253
#: Longest string of any kind in a document (annotations, descriptions, reasons).
MAX_STRING_LENGTH = 65_536
#: Most GPUs in one instance (all clusters), and in one generated instance.
MAX_GPUS = 1_048_576
#: Most pending jobs in one instance.
MAX_JOBS = 100_000
#: Most replicas of one HyperJob replicated job (child Volcano Jobs are named one by one).
MAX_HYPERJOB_REPLICAS = 16_384
#: Most GPUs in one placement group (a job's ``gpusPerGroup``, one pod's GPU request).
MAX_GROUP_GPUS = 4096
#: Most gang units one job expands into (replicas x model-parallel groups, plus auxiliaries).
MAX_UNITS_PER_JOB = 65_536
#: Most gang units a whole queue expands into.
MAX_UNITS = 1_048_576
#: Most layers of a model to split.
MAX_LAYERS = 10_000
#: Most switches and cables (links) a fabric generator may make for one cluster.
MAX_FABRIC_SWITCHES = 65_536
MAX_FABRIC_LINKS = 4_000_000
#: Largest figure a GPU type may declare for a rate or price (TFLOPS, GB, GB/s, price).
MAX_GPU_FIGURE = 1e7

#: A name as people write them: 1 to 253 characters, no control characters (a newline in a
#: node name would split every table and log line it is printed in) and no bidirectional
#: overrides or isolates (U+202A-U+202E, U+2066-U+2069: they make a name print as another).
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_LENGTH,
                                        pattern=r"^[^\x00-\x1f\x7f\u202a-\u202e\u2066-\u2069]+$")]
