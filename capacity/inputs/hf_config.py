"""Import a model from a Hugging Face ``config.json``: architecture fields and a parameter count.

Supported families: llama, llama4 text (MoE on every ``interleave_moe_layer_step``-th layer, one shared
expert, dense layers ``intermediate_size_mlp`` wide, chunked attention as a window), mistral, qwen2, qwen3,
gemma/gemma2/gemma3 text, mixtral, qwen2_moe/qwen3_moe, deepseek_v2/v3 (MLA). Parameters are counted from
the weight shapes the config implies:

    embed V H + layers * (attention + MLP + norms) + final norm H + (untied lm_head V H)

with gated MLPs (3 H I), MoE layers holding E routed experts (plus shared ones) and a router H E,
and MLA attention counted from its low-rank projections. DeepSeek's multi-token-prediction
layer is not counted (it is not used to serve).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capacity.errors import ScenarioError, show
from capacity.fileio.files import read_text_limited
from capacity.fileio.safe_load import parse_json

#: Largest config.json read [bytes]; real ones are a few kB.
MAX_CONFIG_BYTES = 200_000


#: Plausibility limits of the counts a config.json gives (the largest real models hold about 128 layers, a
#: hidden size of about 20,000, a vocabulary of about 260,000 and 256 experts); beyond them the file is not a
#: model, and the per-layer parameter count would run for minutes.
COUNT_LIMITS = {
    "num_hidden_layers": 10_000, "hidden_size": 1_000_000, "num_attention_heads": 100_000,
    "num_key_value_heads": 100_000, "head_dim": 100_000, "vocab_size": 100_000_000,
    "intermediate_size": 10_000_000, "moe_intermediate_size": 10_000_000,
    "shared_expert_intermediate_size": 10_000_000, "num_local_experts": 100_000, "num_experts": 100_000,
    "n_routed_experts": 100_000, "num_experts_per_tok": 100_000, "n_shared_experts": 100_000,
    "kv_lora_rank": 1_000_000, "q_lora_rank": 1_000_000, "qk_rope_head_dim": 100_000, "qk_nope_head_dim": 100_000,
    "v_head_dim": 100_000, "first_k_dense_replace": 10_000, "decoder_sparse_step": 10_000,
    "max_position_embeddings": 1_000_000_000, "sliding_window": 1_000_000_000, "sliding_window_pattern": 10_000,
    "linear_num_key_heads": 100_000, "linear_num_value_heads": 100_000, "linear_key_head_dim": 100_000,
    "linear_value_head_dim": 100_000, "linear_conv_kernel_dim": 10_000, "index_n_heads": 100_000,
    "index_head_dim": 100_000, "interleave_moe_layer_step": 10_000, "full_attention_interval": 10_000,
}


_AT_LEAST_ONE = {"num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "head_dim",
                 "num_key_value_heads", "sliding_window_pattern", "decoder_sparse_step", "interleave_moe_layer_step"}


def check_counts(config: dict[str, Any]) -> None:
    """Every count ``COUNT_LIMITS`` names is a whole number in [0, its limit], and the layer lists are no longer
    than the layers; ScenarioError naming each bad key, before any work."""
    problems = []
    for section in (config, config.get("text_config")):
        if not isinstance(section, dict):
            continue
        for key, limit in COUNT_LIMITS.items():
            value = section.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
                problems.append(f"config.json {key} must be a whole number, got {show(value)}")
            elif not (1 if key in _AT_LEAST_ONE else 0) <= value <= limit:
                low = 1 if key in _AT_LEAST_ONE else 0
                problems.append(f"config.json {key} must be in [{low}, {limit:,}], got {show(value)}")
        for key in ("layer_types", "mlp_only_layers"):
            value = section.get(key)
            if value is not None and (not isinstance(value, list) or len(value) > COUNT_LIMITS["num_hidden_layers"]):
                problems.append(f"config.json {key} must be a list of at most "
                                f"{COUNT_LIMITS['num_hidden_layers']:,} entries")
            elif key == "mlp_only_layers" and value and not all(isinstance(v, int) for v in value):
                problems.append(f"config.json {key} must list layer numbers, got {show(value)}")
        for key in ("model_type", "topk_method"):
            if section.get(key) is not None and not isinstance(section.get(key), str):
                problems.append(f"config.json {key} must be text, got {show(section.get(key))}")
    if config.get("text_config") is not None and not isinstance(config.get("text_config"), dict):
        problems.append(f"config.json text_config must be an object, got {show(config.get('text_config'))}")
    if problems:
        raise ScenarioError(*problems)


def _need(config: dict[str, Any], *keys: str) -> None:
    missing = [k for k in keys if config.get(k) is None]
    if missing:
        raise ScenarioError(f"config.json is missing {', '.join(missing)}")


def _head_dim(c: dict[str, Any]) -> int:
    return int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])


def _llama4(c: dict[str, Any]) -> bool:
    return str(c.get("model_type", "")).startswith("llama4")


def _experts(c: dict[str, Any]) -> tuple[int, int, int]:
    """(routed experts, experts per token, shared experts). Every Llama 4 MoE layer holds one shared expert
    (transformers ``Llama4TextMoe.shared_expert``), which its config does not state."""
    routed = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts") or 0
    shared = c.get("n_shared_experts") or (1 if c.get("shared_expert_intermediate_size") or _llama4(c) else 0)
    return int(routed), int(c.get("num_experts_per_tok") or 0), int(shared)


def _linear_attention_params(c: dict[str, Any]) -> int:
    """A Gated DeltaNet layer (Qwen3-Next, Qwen3.5 ``linear_attention``): projections to q, k (``linear_num_key_heads``
    x ``linear_key_head_dim`` each), v and the output gate z (``linear_num_value_heads`` x ``linear_value_head_dim``
    each), the per-head b and a (``2 n_v``), a depthwise causal conv over q, k, v (``kernel`` taps), ``dt_bias`` and
    ``A_log`` (``n_v`` each), the gated norm (``d_v``) and the output projection (transformers
    ``Qwen3NextGatedDeltaNet``)."""
    h = c["hidden_size"]
    n_k, n_v = c["linear_num_key_heads"], c["linear_num_value_heads"]
    key_dim, value_dim = n_k * c["linear_key_head_dim"], n_v * c["linear_value_head_dim"]
    projections = h * (2 * key_dim + 2 * value_dim) + h * 2 * n_v
    conv = (2 * key_dim + value_dim) * c.get("linear_conv_kernel_dim", 4)
    return projections + conv + 2 * n_v + c["linear_value_head_dim"] + value_dim * h


def _attention_params(c: dict[str, Any]) -> int:
    h, nh = c["hidden_size"], c["num_attention_heads"]
    if c.get("kv_lora_rank"):  # MLA (DeepSeek-V2/V3)
        rope, nope, v = c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
        q_rank, kv_rank = c.get("q_lora_rank"), c["kv_lora_rank"]
        q = h * q_rank + q_rank + q_rank * nh * (nope + rope) if q_rank else h * nh * (nope + rope)
        kv = h * (kv_rank + rope) + kv_rank + kv_rank * nh * (nope + v)
        # DeepSeek sparse attention's lightning indexer (GLM-5, DeepSeek-V3.2): wq_b from the query latent,
        # wk and its LayerNorm (weight and bias), and per-head weights (transformers/vLLM ``Indexer``).
        n_i, d_i = c.get("index_n_heads") or 0, c.get("index_head_dim") or 0
        indexer = (q_rank * n_i * d_i + h * d_i + 2 * d_i + h * n_i) if n_i and d_i and q_rank else 0
        return q + kv + nh * v * h + indexer
    hd, nkv = _head_dim(c), c.get("num_key_value_heads") or nh
    # A gated output (Qwen3.5 ``attn_output_gate``): q_proj also yields a gate per query value.
    weights = h * nh * hd * (2 if c.get("attn_output_gate") else 1) + 2 * h * nkv * hd + nh * hd * h
    qkv_bias = c.get("model_type") in ("qwen2", "qwen2_moe") or c.get("attention_bias")
    bias = (nh * hd + 2 * nkv * hd) if qkv_bias else 0
    bias += h if c.get("attention_bias") and c.get("model_type") not in ("qwen2", "qwen2_moe") else 0
    qk_norm = 2 * hd if c.get("model_type") in ("qwen3", "qwen3_moe", "gemma3_text", "gemma3", "qwen3_5_moe_text",
                                                "qwen3_next") else 0
    if c.get("use_qk_norm") and c.get("qk_norm_type") == "per_layer":  # MiniMax-M2: one norm over all q, all k
        qk_norm = nh * hd + nkv * hd
    return weights + bias + qk_norm


def _norms_per_layer(c: dict[str, Any]) -> int:
    kind = str(c.get("model_type") or "")
    return 4 * c["hidden_size"] if kind.startswith(("gemma2", "gemma3")) else 2 * c["hidden_size"]


def param_counts(config: dict[str, Any]) -> tuple[int, int]:
    """(total, active per token) parameters implied by a config.json."""
    c = config.get("text_config") or config
    _need(c, "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    if c.get("kv_lora_rank"):
        _need(c, "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    routed, top_k, shared = _experts(c)
    first_dense = c.get("first_k_dense_replace", 0) or 0
    mlp_only = set(c.get("mlp_only_layers") or [])
    step = c.get("decoder_sparse_step") or c.get("interleave_moe_layer_step") or 1

    def is_moe(i: int) -> bool:
        return bool(routed) and i >= first_dense and i not in mlp_only and (i + 1) % step == 0

    # A model whose every layer is MoE (MiniMax-M2, Qwen3.5) needs no dense width: its experts may be the
    # ``moe_intermediate_size`` wide ones alone.
    if not all(is_moe(i) for i in range(layers)):
        _need(c, "intermediate_size")
    else:
        _need(c, "moe_intermediate_size" if c.get("intermediate_size") is None else "intermediate_size")
    # Llama 4's dense layers are intermediate_size_mlp wide; its experts intermediate_size.
    dense_mlp = 3 * h * (c.get("intermediate_size_mlp") or c.get("intermediate_size") or 0)
    expert_width = c.get("moe_intermediate_size") or c["intermediate_size"]
    shared_width = c.get("shared_expert_intermediate_size") or expert_width * max(shared, 0)
    types = c.get("layer_types") or []
    if "linear_attention" in types:
        _need(c, "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim")
    total = active = 0
    for i in range(layers):
        linear = i < len(types) and types[i] == "linear_attention"
        base = (_linear_attention_params(c) if linear else _attention_params(c)) + _norms_per_layer(c)
        moe_layer = is_moe(i)
        if moe_layer:
            bias = c.get("topk_method") == "noaux_tc" or c.get("use_routing_bias")  # e_score_correction_bias
            router = h * routed + (routed if bias else 0)
            shared_mlp = 3 * h * shared_width if shared else 0
            total += base + router + shared_mlp + routed * 3 * h * expert_width
            active += base + router + shared_mlp + top_k * 3 * h * expert_width
        else:
            total += base + dense_mlp
            active += base + dense_mlp
    # transformers ties the embeddings by default for Gemma (its configs omit the key).
    tied = c.get("tie_word_embeddings", str(c.get("model_type", "")).startswith("gemma"))
    ends = vocab * h + h + (0 if tied else vocab * h)
    return total + ends, active + ends


def model_from_config(config: dict[str, Any], name: str = "imported model") -> dict[str, Any]:
    """A scenario ``model:`` mapping from a parsed config.json (missing fields are named in the error)."""
    if not isinstance(config, dict):
        raise ScenarioError("config.json must hold a JSON object")
    check_counts(config)
    c = config.get("text_config") or config
    _need(c, "num_hidden_layers", "num_attention_heads", "hidden_size")
    total, active = param_counts(config)
    model: dict[str, Any] = {"name": name, "layers": c["num_hidden_layers"], "params": float(total),
                             "attention_heads": c["num_attention_heads"], "hidden_size": c["hidden_size"]}
    if c.get("kv_lora_rank"):
        _need(c, "qk_rope_head_dim")
        model.update(attention="mla", kv_lora_rank=c["kv_lora_rank"], qk_rope_head_dim=c["qk_rope_head_dim"])
    else:
        model.update(kv_heads=c.get("num_key_value_heads") or c["num_attention_heads"], head_dim=_head_dim(c))
    if c.get("max_position_embeddings"):
        model["max_position_embeddings"] = c["max_position_embeddings"]
    types = c.get("layer_types") or []
    if "linear_attention" in types:  # hybrid (Qwen3.5, Qwen3-Next): only the full-attention layers hold a KV cache
        model["attention_layers"] = sum(t == "full_attention" for t in types)
    window = c.get("sliding_window")
    if _llama4(c) and c.get("attention_chunk_size"):
        # Chunked attention on the RoPE layers (no_rope_layers[i] == 1; by default 3 of every 4), global on the
        # rest: a token attends to at most a chunk, so a window of the chunk size bounds those layers' cache.
        rope = c.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(c["num_hidden_layers"])]
        model.update(sliding_window=c["attention_chunk_size"], local_layers=sum(1 for r in rope if r))
    elif window and c.get("use_sliding_window", True):
        types = c.get("layer_types")
        if types:
            model.update(sliding_window=window, local_layers=sum(t == "sliding_attention" for t in types))
        elif str(c.get("model_type", "")).startswith("gemma2"):
            model.update(sliding_window=window, sliding_window_layers="alternate")
        elif str(c.get("model_type", "")).startswith("gemma3"):
            pattern = c.get("sliding_window_pattern", 6)  # 5 local then 1 global
            model.update(sliding_window=window,
                         local_layers=sum((i + 1) % pattern != 0 for i in range(c["num_hidden_layers"])))
        else:
            model.update(sliding_window=window, sliding_window_layers="all")
    routed, top_k, _shared = _experts(c)
    if routed:
        model.update(num_experts=routed, experts_per_token=top_k, active_params=float(active))
    return model


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a config.json (size-limited) and return its ``model:`` mapping, named after the file's folder."""
    path = Path(path)
    text = read_text_limited(path, MAX_CONFIG_BYTES, "config.json")
    return model_from_text(text, path.stem if path.stem != "config" else path.parent.name)


def model_from_text(text: str, name: str = "imported model") -> dict[str, Any]:
    """The ``model:`` mapping of config.json text (pasted in the app, or read from a file)."""
    if len(text.encode("utf-8", errors="replace")) > MAX_CONFIG_BYTES:
        raise ScenarioError(f"the config is larger than {MAX_CONFIG_BYTES:,} bytes")
    return model_from_config(parse_json(text, "config.json"), name)
