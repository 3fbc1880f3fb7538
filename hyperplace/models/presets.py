"""Named models, each from its published configuration (the source is on every preset).

Parameter counts are recomputed from the dimensions by :mod:`hyperplace.models.transformer`
and tested against the published totals (``tests/costmodel/test_costmodel.py``).
"""

from __future__ import annotations

from typing import Any

from hyperplace.errors import InputError, known_words
from hyperplace.models.model_spec import ModelSpec

_LLAMA3 = dict(num_kv_heads=8, gated_mlp=True, vocab_size=128256, seq_length=8192)

_PRESETS: dict[str, dict[str, Any]] = {
    "llama3-8b": dict(
        num_layers=32, hidden_size=4096, num_heads=32, ffn_hidden_size=14336, **_LLAMA3,
        parameters=8.03e9,
        source="meta-llama/Meta-Llama-3-8B config.json (hidden 4096, 32 layers, 32 heads, "
               "8 KV heads, intermediate 14336, vocab 128256); Llama 3 paper (Dubey et al. "
               "2024) Table 3, 8k pre-training context"),
    "llama3-70b": dict(
        num_layers=80, hidden_size=8192, num_heads=64, ffn_hidden_size=28672, **_LLAMA3,
        parameters=70.55e9,
        source="meta-llama/Meta-Llama-3-70B config.json (hidden 8192, 80 layers, 64 heads, "
               "8 KV heads, intermediate 28672); Llama 3 paper Table 3"),
    "llama3-405b": dict(
        num_layers=126, hidden_size=16384, num_heads=128, ffn_hidden_size=53248, **_LLAMA3,
        parameters=405.9e9,
        source="meta-llama/Llama-3.1-405B config.json (hidden 16384, 126 layers, 128 heads, "
               "8 KV heads, intermediate 53248); Llama 3 paper Table 3 (8k pre-training)"),
    "gpt3-175b": dict(
        num_layers=96, hidden_size=12288, num_heads=96, seq_length=2048, vocab_size=50257,
        tie_embeddings=True, parameters=174.6e9,
        source="Brown et al. 2020 (Language Models are Few-Shot Learners) Table 2.1: 96 "
               "layers, d_model 12288, 96 heads, context 2048; GPT-2 BPE vocabulary, tied "
               "embeddings"),
    "mixtral-8x7b": dict(
        num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
        gated_mlp=True, num_experts=8, experts_per_token=2, vocab_size=32000,
        seq_length=4096, parameters=46.7e9,
        assumed="training sequence length 4096 assumed (the context window is 32768)",
        source="mistralai/Mixtral-8x7B-v0.1 config.json (hidden 4096, 32 layers, 32 heads, "
               "8 KV heads, intermediate 14336, 8 local experts, 2 per token, vocab 32000); "
               "Jiang et al. 2024: 46.7B total, 12.9B active"),
    "deepseek-moe-16b": dict(
        num_layers=28, hidden_size=2048, num_heads=16, ffn_hidden_size=10944, gated_mlp=True,
        num_experts=64, experts_per_token=6, shared_experts=2, moe_ffn_hidden_size=1408,
        first_dense_layers=1, vocab_size=102400, seq_length=4096, parameters=16.4e9,
        source="deepseek-ai/deepseek-moe-16b-base config.json (hidden 2048, 28 layers, 16 "
               "heads, dense intermediate 10944, 64 routed experts of 1408, 6 per token, 2 "
               "shared, first layer dense, vocab 102400, 4k context); Dai et al. 2024 "
               "(DeepSeekMoE): 16.4B parameters"),
    "deepseek-v3": dict(
        num_layers=61, hidden_size=7168, num_heads=128, ffn_hidden_size=18432, gated_mlp=True,
        num_experts=256, experts_per_token=8, shared_experts=1, moe_ffn_hidden_size=2048,
        first_dense_layers=3, vocab_size=129280, seq_length=4096, parameters=671e9,
        assumed="Multi-head Latent Attention priced as full multi-head attention (about "
                "10 % more attention parameters); the multi-token-prediction module (14B) "
                "is left out, as in the 671B total; 4k pre-training sequences",
        source="deepseek-ai/DeepSeek-V3 config.json (hidden 7168, 61 layers, 128 heads, "
               "dense intermediate 18432, 256 routed experts of 2048, 8 per token, 1 shared, "
               "first 3 layers dense, vocab 129280); DeepSeek-AI 2024 (DeepSeek-V3 "
               "Technical Report, arXiv:2412.19437): 671B total, 37B active, 4K pre-training"),
    "opt-350m": dict(
        num_layers=24, hidden_size=1024, num_heads=16, seq_length=2048, vocab_size=50272,
        tie_embeddings=True, parameters=0.33e9,
        source="facebook/opt-350m config.json (hidden 1024, 24 layers, 16 heads, FFN 4096, "
               "vocab 50272, 2048 positions; its 512-wide embedding projection is not "
               "modelled); Zhang et al. 2022 Table 1. Profiled by Sailor as OPT-350"),
    "gpt-neo-2.7b": dict(
        num_layers=32, hidden_size=2560, num_heads=20, seq_length=2048, vocab_size=50257,
        tie_embeddings=True, parameters=2.7e9,
        source="EleutherAI/gpt-neo-2.7B config.json (hidden 2560, 32 layers, 20 heads, "
               "vocab 50257, 2048 positions; local-attention layers priced as global). "
               "Profiled by Sailor as GPT-Neo-2.7"),
    "opt-30b": dict(
        num_layers=48, hidden_size=7168, num_heads=56, seq_length=2048, vocab_size=50272,
        tie_embeddings=True, parameters=30.0e9,
        source="facebook/opt-30b config.json (hidden 7168, 48 layers, 56 heads, FFN 28672, "
               "vocab 50272); Zhang et al. 2022 Table 1. Profiled by Sailor as OPT-30"),
    "llama3-120b": dict(
        num_layers=96, hidden_size=10240, num_heads=80, seq_length=8192, vocab_size=128256,
        parameters=1.23e11,
        assumed="no public Llama-3 120B exists: an assumed Llama-3-sized config "
                "(96 layers, hidden 10240, 80 heads, 4h MLP, 8k context) giving ~123B "
                "parameters, for the seed job llama-3-120b-finetune",
    ),
    # The seed federation example: 8 GPT-3-width layers. Wide layers make compute large
    # next to the WAN hop, as in the seed story, and at micro-batch 2 with 8-way TP even the
    # most lopsided split stays within an H100's 80 GB, so memory never decides it.
    "seed-8layer": dict(
        num_layers=8, hidden_size=12288, num_heads=96, seq_length=4096, vocab_size=32000,
        micro_batch_size=2,
        assumed="illustrative 8-layer model for the seed B200/H100 federation example",
    ),
}

# Names the Sailor profiles use for the same models.
ALIASES = {"opt-350": "opt-350m", "gpt-neo-2.7": "gpt-neo-2.7b", "llama-3-8": "llama3-8b",
           "opt-30": "opt-30b", "llama-3-8b": "llama3-8b", "llama3-8": "llama3-8b"}


def preset_names() -> list[str]:
    return sorted(_PRESETS)


def model_preset(name: str, micro_batch_size: int | None = None) -> ModelSpec:
    """A named model; raises :class:`InputError` naming the known presets."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in _PRESETS:
        raise InputError(
            f"unknown model preset {name!r} ({known_words(key, preset_names())})", path="model"
        )
    fields = dict(_PRESETS[key])
    if micro_batch_size is not None:
        fields["micro_batch_size"] = micro_batch_size
    return ModelSpec(name=key, **fields)
