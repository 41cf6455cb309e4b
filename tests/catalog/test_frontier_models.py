"""GLM-5, DeepSeek-V3.2, Kimi-K2.5, MiniMax-M2.5 and Qwen3.5: sparse attention, hybrid linear
attention, new MoE shapes and weight formats."""

import json
import subprocess
import sys
from importlib import resources

import pytest

from aisimulate.catalog import get_model, get_system, list_models, parse_hf_config
from aisimulate.catalog.dtypes import WEIGHT_BYTES_PER_PARAM, math_dtype
from aisimulate.errors import ConfigError
from aisimulate.perf import ParallelShape
from aisimulate.perf.cli import main
from aisimulate.perf.memory import estimate_memory

NEW = [
    "zai-org/GLM-5",
    "zai-org/GLM-5-FP8",
    "nvidia/GLM-5-NVFP4",
    "zai-org/GLM-5.1-FP8",
    "nvidia/GLM-5.1-NVFP4",
    "moonshotai/Kimi-K2.5",
    "nvidia/Kimi-K2.5-NVFP4",
    "MiniMaxAI/MiniMax-M2.5",
    "nvidia/MiniMax-M2.5-NVFP4",
    "Qwen/Qwen3.5-397B-A17B",
    "Qwen/Qwen3.5-397B-A17B-FP8",
    "nvidia/Qwen3.5-397B-A17B-NVFP4",
    "Qwen/Qwen3.5-122B-A10B",
    "nvidia/Qwen3.5-122B-A10B-NVFP4",
    "Qwen/Qwen3-235B-A22B-FP8",
    "deepseek-ai/DeepSeek-V3.2",
    "nvidia/DeepSeek-V3.2-NVFP4",
]


def test_new_checkpoints_are_bundled_and_aliases_resolve():
    assert set(NEW) <= set(list_models())
    assert get_model("zhipuai/GLM-5").name == "zai-org/GLM-5"
    assert get_model("zai-org/GLM-5.1").name == "zai-org/GLM-5"
    assert get_model("deepseek-ai/DeepSeek-V3.2-Exp").name == "deepseek-ai/DeepSeek-V3.2"
    # MiniMax-M2 has its own publisher config now, not its sibling's.
    assert get_model("MiniMaxAI/MiniMax-M2").name == "MiniMaxAI/MiniMax-M2"
    assert get_model("MiniMaxAI/MiniMax-M2.5").name == "MiniMaxAI/MiniMax-M2.5"
    assert "M2.5" not in get_model("MiniMaxAI/MiniMax-M2").source


def _active(m, counts):
    """Active parameters as the publisher counts them: with the lm-head once (ours), without
    any embedding table, or with both tables."""
    p = m.params
    if counts == "non_embedding":
        return m.active_params - (p.lm_head or p.embedding)
    if counts == "embeddings":
        return m.active_params + (p.embedding if p.lm_head else 0)
    return m.active_params


# Model cards (total B, active B). Publishers count the embedding tables differently; each row
# names the convention under which the card's figure is met. Qwen's "A17B"/"A10B" are rounded
# labels, so the active check for small counts allows their rounding (0.5B).
@pytest.mark.parametrize(
    ("name", "total_b", "active_b", "counts"),
    [
        ("zai-org/GLM-5", 744, 40, "non_embedding"),
        ("deepseek-ai/DeepSeek-V3.2", 671, 37, "lm_head"),
        ("moonshotai/Kimi-K2.5", 1000, 32, "lm_head"),
        ("MiniMaxAI/MiniMax-M2.5", 229, 10, "non_embedding"),
        ("MiniMaxAI/MiniMax-M2", 230, 10, "non_embedding"),
        ("Qwen/Qwen3.5-397B-A17B", 397, 17, "embeddings"),
        ("Qwen/Qwen3.5-122B-A10B", 122, 10, "embeddings"),
        ("Qwen/Qwen3-235B-A22B-FP8", 235, 22, "embeddings"),
    ],
)
def test_parameter_counts_match_model_cards(name, total_b, active_b, counts):
    m = get_model(name)
    # Kimi's "1T" is itself rounded: 1.03T in the safetensors, as for Kimi-K2.
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=0.03 if name.endswith("K2.5") else 0.02)
    assert _active(m, counts) / 1e9 == pytest.approx(active_b, rel=0.02, abs=0.5)


def test_every_card_is_cited_in_its_file():
    for name in ["zai-org/GLM-5", "deepseek-ai/DeepSeek-V3.2", "moonshotai/Kimi-K2.5"]:
        assert "Model card" in (get_model(name).note or "")
    for name in ["MiniMaxAI/MiniMax-M2", "Qwen/Qwen3.5-397B-A17B", "Qwen/Qwen3.5-122B-A10B"]:
        assert "Model card" in (get_model(name).note or "")
    assert "229B" in (get_model("MiniMaxAI/MiniMax-M2.5").note or "")


# ---- DSA ------------------------------------------------------------------------------------


def test_dsa_fields_and_indexer_key_cache():
    glm = get_model("zai-org/GLM-5-FP8")
    assert glm.is_sparse_attention and glm.is_mla and glm.model_type == "glm_moe_dsa"
    assert (glm.index_n_heads, glm.index_head_dim, glm.index_topk) == (32, 128, 2048)
    # fp8 keys (128 B) + one fp32 scale per 128 values, per token and layer, over 78 layers.
    assert glm.indexer_key_bytes_per_token == 78 * (128 + 4)
    ds = get_model("deepseek-ai/DeepSeek-V3.2")
    assert (ds.index_n_heads, ds.index_head_dim, ds.index_topk) == (64, 128, 2048)
    assert ds.indexer_key_bytes_per_token == 61 * 132
    assert not get_model("deepseek-ai/DeepSeek-V3").is_sparse_attention
    assert get_model("deepseek-ai/DeepSeek-V3").indexer_key_bytes_per_token == 0


def test_dsa_kv_bytes_per_token_include_the_indexer_keys():
    ds = get_model("deepseek-ai/DeepSeek-V3.2")
    # bf16 latent + rope key, plus the indexer's fp8 keys.
    assert ds.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2 + 61 * 132
    # fp8: FlashMLA's sparse layout -- fp8 latent, 4 fp32 scales, bf16 rope key = 656 B.
    assert ds.kv_bytes_per_token_per_layer("fp8") == 656
    assert ds.kv_bytes_per_token("fp8") == 61 * 656 + 61 * 132
    # Dense MLA keeps its plain fp8 latent.
    assert get_model("deepseek-ai/DeepSeek-V3").kv_bytes_per_token("fp8") == 61 * (512 + 64)


def test_dsa_indexer_weights_are_attention_params():
    glm = get_model("zai-org/GLM-5")
    p = glm.params
    h = glm.hidden_size
    assert p.indexer_per_layer == 2048 * 32 * 128 + h * 128 + h * 32
    without = parse_hf_config(
        {k: v for k, v in _config("glm-5.json").items() if not k.startswith("index")},
        name="x",
        source="test",
        where="test",
    )
    assert p.attention_per_layer - without.params.attention_per_layer == p.indexer_per_layer
    assert glm.total_params - without.total_params == 78 * p.indexer_per_layer


def test_moe_routing_facts():
    glm = get_model("zai-org/GLM-5")
    assert glm.router_scoring_func == "sigmoid" and glm.router_score_bias
    assert glm.routed_scaling_factor == 2.5
    assert (glm.num_experts, glm.experts_per_token, glm.num_shared_experts, glm.num_dense_layers) == (
        256,
        8,
        1,
        3,
    )
    assert glm.num_moe_layers == 75
    kimi = get_model("moonshotai/Kimi-K2.5")
    assert kimi.num_experts == 384 and kimi.routed_scaling_factor == pytest.approx(2.827)
    minimax = get_model("MiniMaxAI/MiniMax-M2.5")
    assert minimax.router_scoring_func == "sigmoid" and minimax.router_score_bias
    assert minimax.num_shared_experts == 0
    assert get_model("Qwen/Qwen3-235B-A22B").router_scoring_func == "softmax"


# ---- hybrid linear attention ----------------------------------------------------------------


def test_qwen35_text_config_and_layer_split():
    q = get_model("Qwen/Qwen3.5-397B-A17B")
    assert q.model_type == "qwen3_5_moe_text" and q.is_hybrid_linear and q.is_moe
    assert (q.num_layers, q.num_linear_attention_layers, q.num_full_attention_layers) == (60, 45, 15)
    assert (q.num_experts, q.experts_per_token, q.moe_intermediate_size) == (512, 10, 1024)
    assert q.num_shared_experts == 1 and q.shared_expert_width == 1024
    assert q.attn_output_gate and q.num_nextn_layers == 1
    assert q.intermediate_size == 0 and q.num_dense_layers == 0
    small = get_model("Qwen/Qwen3.5-122B-A10B")
    assert (small.num_linear_attention_layers, small.num_full_attention_layers) == (36, 12)


def test_qwen35_kv_cache_only_in_full_attention_layers():
    q = get_model("Qwen/Qwen3.5-397B-A17B")
    assert q.kv_bytes_per_token("bf16") == 15 * 2 * 2 * 256 * 2
    assert q.kv_bytes_per_token("fp8") == 15 * 2 * 2 * 256


def test_linear_state_per_request():
    q = get_model("Qwen/Qwen3.5-397B-A17B")
    conv_dim = 2 * 16 * 128 + 64 * 128
    conv = conv_dim * (4 - 1) * 2  # bf16 conv window
    recurrent = 64 * 128 * 128  # value heads x key dim x value dim
    assert q.linear_state_dtype == "fp32"
    assert q.linear_state_bytes_per_request() == 45 * (conv + recurrent * 4)
    assert q.linear_state_bytes_per_request("bf16") == 45 * (conv + recurrent * 2)
    assert get_model("zai-org/GLM-5").linear_state_bytes_per_request() == 0
    with pytest.raises(ConfigError, match="state dtype"):
        q.linear_state_bytes_per_request("fp8")


def test_gated_deltanet_and_output_gate_params():
    q = get_model("Qwen/Qwen3.5-397B-A17B")
    h = 4096
    key_dim, value_dim, nv = 16 * 128, 64 * 128, 64
    conv_dim = 2 * key_dim + value_dim
    gdn = h * (conv_dim + value_dim + 2 * nv) + conv_dim * 4 + 2 * nv + 128 + value_dim * h
    assert q.params.linear_attention_per_layer == gdn
    gated_q = h * 2 * 32 * 256
    assert q.params.attention_per_layer == gated_q + h * 2 * 2 * 256 + 32 * 256 * h
    assert q.attention_params == 15 * q.params.attention_per_layer + 45 * gdn


def test_full_attention_interval_without_layer_types():
    config = dict(_config("qwen3.5-122b-a10b.json")["text_config"])
    del config["layer_types"]
    m = parse_hf_config(config, name="x", source="test", where="test")
    assert (m.num_linear_attention_layers, m.num_full_attention_layers) == (36, 12)


# ---- weight formats -------------------------------------------------------------------------


def test_kimi_k25_native_int4_w4a16():
    kimi = get_model("moonshotai/Kimi-K2.5")
    assert kimi.weight_dtype == "int4" and kimi.quant_scope == "experts"
    # 4-bit weights plus one bf16 scale per group of 32.
    assert WEIGHT_BYTES_PER_PARAM["int4"] == 0.5 + 2 / 32
    assert kimi.linear_dtype(expert=True) == "int4"
    assert kimi.linear_dtype(expert=False) == kimi.linear_dtype(expert=False, attention=True) == "bf16"
    p = kimi.params
    routed = kimi.num_moe_layers * kimi.num_experts * p.expert_per_expert
    assert kimi.weight_bytes == pytest.approx(routed * (0.5 + 2 / 32) + (kimi.total_params - routed) * 2)
    # Published checkpoint: about 595 GB.
    assert kimi.weight_bytes / 1e9 == pytest.approx(595, rel=0.02)
    # The GEMMs read 4-bit weights and run in 16 bits, on every chip.
    assert math_dtype("int4", {"bf16", "fp8", "fp4"}) == "bf16"


def test_nvfp4_and_fp8_block_scopes_follow_the_checkpoints():
    assert get_model("zai-org/GLM-5-FP8").weight_dtype == "fp8_block"
    assert get_model("zai-org/GLM-5-FP8").quant_scope == "all_linear"
    glm4 = get_model("nvidia/GLM-5-NVFP4")
    assert (glm4.weight_dtype, glm4.quant_scope, glm4.checkpoint_kv_dtype) == ("nvfp4", "mlp", "fp8")
    assert glm4.linear_dtype(expert=False, attention=True) == "bf16"
    assert glm4.linear_dtype(expert=False) == "nvfp4"  # dense layers and shared experts
    assert get_model("nvidia/GLM-5.1-NVFP4").quant_scope == "experts"
    qwen = get_model("nvidia/Qwen3.5-397B-A17B-NVFP4")
    assert qwen.quant_scope == "experts" and qwen.linear_dtype(expert=False) == "bf16"
    assert get_model("nvidia/Kimi-K2.5-NVFP4").quant_scope == "mlp"
    assert get_model("nvidia/DeepSeek-V3.2-NVFP4").quant_scope == "mlp"
    # An mlp-scope checkpoint is bigger than the all-linear one, smaller than the experts-only one.
    base = get_model("zai-org/GLM-5")
    sizes = [
        base.with_quantization(weight_dtype="nvfp4", quant_scope=scope).weight_bytes
        for scope in ("all_linear", "mlp", "experts")
    ]
    assert sizes[0] < sizes[1] < sizes[2]
    with pytest.raises(ConfigError, match="quant_scope"):
        base.with_quantization(weight_dtype="nvfp4", quant_scope="attention")


def test_local_nvfp4_scope_from_the_exclusion_list(tmp_path):
    folder = tmp_path / "glm5-nvfp4"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config("glm-5.json")))
    (folder / "hf_quant_config.json").write_text(
        json.dumps(
            {
                "quantization": {
                    "quant_algo": "NVFP4",
                    "kv_cache_quant_algo": "FP8",
                    "exclude_modules": ["lm_head", "model.layers.0.self_attn.kv_b_proj", "model.layers.78*"],
                }
            }
        )
    )
    m = get_model(str(folder))
    assert (m.weight_dtype, m.quant_scope, m.checkpoint_kv_dtype) == ("nvfp4", "mlp", "fp8")
    assert m.indexer_key_bytes_per_token == 78 * 132


def test_fp8_checkpoint_keeping_norms_and_the_indexer_weights_is_all_linear():
    config = {
        **_config("glm-5.json"),
        "quantization_config": {
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": [
                "lm_head",
                "model.layers.3.mlp.gate",
                "model.layers.3.self_attn.indexers_proj",
                "model.layers.3.self_attn.indexer.k_norm",
                "model.layers.3.self_attn.q_a_layernorm",
            ],
        },
    }
    m = parse_hf_config(config, name="x", source="test", where="test")
    assert (m.weight_dtype, m.quant_scope) == ("fp8_block", "all_linear")


def test_kimi_k25_int4_scope_from_its_ignore_list():
    m = parse_hf_config(_config("kimi-k2.5.json"), name="x", source="test", where="test")
    assert (m.weight_dtype, m.quant_scope) == ("int4", "experts")


def test_local_wrapped_configs_parse_the_text_model(tmp_path):
    for file, model_type in (("kimi-k2.5.json", "kimi_k2"), ("qwen3.5-397b-a17b.json", "qwen3_5_moe_text")):
        folder = tmp_path / file
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(_config(file)))
        m = get_model(str(folder))
        assert m.model_type == model_type
        assert m.total_params == get_model(json.loads(_read(file))["name"]).total_params


def test_unsupported_architecture_is_one_line_naming_the_model_type(tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "rwkv7", "hidden_size": 64}))
    result = _perf_memory(str(folder / "config.json"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "'rwkv7'" in lines[0] and "model_type" in lines[0]
    wrapped = dict(_config("qwen3.5-122b-a10b.json"))
    wrapped["text_config"] = {**wrapped["text_config"], "model_type": "mystery_text"}
    (folder / "config.json").write_text(json.dumps(wrapped))
    result = _perf_memory(str(folder / "config.json"))
    assert result.returncode == 2 and "'mystery_text'" in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1


# ---- perf memory for every new checkpoint ---------------------------------------------------


@pytest.mark.parametrize("name", [*NEW, "MiniMaxAI/MiniMax-M2"])
def test_memory_of_every_new_checkpoint(name):
    m = get_model(name)
    estimate = estimate_memory(m, get_system("b200_sxm"), ParallelShape(tp=8, moe_ep=8))
    # Eight GPUs hold the checkpoint once, plus the replicated MLA down-projections and norms.
    assert 0.97 < estimate.weights_bytes_per_gpu * 8 / m.weight_bytes < 1.06
    if estimate.feasible:
        assert estimate.kv_tokens_per_rank > 0
    else:  # bf16 GLM-5 (1.49 TB) does not fit 8 x 180 GiB
        assert name == "zai-org/GLM-5" and "weights need" in estimate.reason


@pytest.mark.parametrize("name", ["zai-org/GLM-5-FP8", "Qwen/Qwen3.5-397B-A17B", "moonshotai/Kimi-K2.5"])
def test_perf_memory_cli_runs_for_new_models(name, capsys):
    code = main(["memory", "--model", name, "--system", "b200_sxm", "--tp", "8", "--moe-ep", "8", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["model"] == name and data["feasible"] and data["kv_tokens_per_rank"] > 0


# ---- helpers --------------------------------------------------------------------------------


def _read(file):
    return (resources.files("aisimulate.catalog") / "models" / file).read_text()


def _config(file):
    return json.loads(_read(file))["config"]


def _perf_memory(model, *extra):
    return subprocess.run(
        [sys.executable, "-m", "aisimulate.perf", "memory", "--model", model, "--system", "b200_sxm", *extra],
        capture_output=True,
        text=True,
        check=False,
    )
