import json
import re

import pytest

from aisimulate.catalog import get_model, list_models
from aisimulate.errors import ConfigError, UnknownNameError

REQUIRED = [
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.3-70B-Instruct",
    "meta-llama/Llama-3.1-405B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B",
    "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1",
    "openai/gpt-oss-20b",
    "openai/gpt-oss-120b",
    "mistralai/Mixtral-8x7B-v0.1",
    "moonshotai/Kimi-K2-Instruct",
    "zai-org/GLM-4.5",
    "MiniMaxAI/MiniMax-M2",
]


def test_required_models_are_bundled():
    assert set(REQUIRED) <= set(list_models())


@pytest.mark.parametrize("name", list_models())
def test_every_bundled_model_has_sane_derived_facts(name):
    m = get_model(name)
    assert 0 < m.active_params <= m.total_params
    assert m.weight_bytes > 0
    assert m.kv_bytes_per_token("bf16") > 0
    assert m.max_context_tokens >= 32768
    assert m.source


# Published totals (model cards): parameters in billions, tolerance 2%.
@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        ("meta-llama/Llama-3.1-8B", 8.03, None),
        ("meta-llama/Llama-3.1-70B", 70.6, None),
        ("meta-llama/Llama-3.1-405B", 405.9, None),
        ("deepseek-ai/DeepSeek-V3", 671, 37),
        ("moonshotai/Kimi-K2-Instruct", 1026, 32),
        ("Qwen/Qwen3-235B-A22B", 235, 22),
        ("Qwen/Qwen3-30B-A3B", 30.5, 3.3),
        ("openai/gpt-oss-120b", 116.8, 5.1),
        ("openai/gpt-oss-20b", 20.9, 3.6),
        ("mistralai/Mixtral-8x7B-v0.1", 46.7, 12.9),
        ("zai-org/GLM-4.5", 355, 32),
        ("MiniMaxAI/MiniMax-M2", 230, 10),
    ],
)
def test_parameter_counts_match_model_cards(name, total_b, active_b):
    m = get_model(name)
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=0.02)
    if active_b is not None:
        assert m.active_params / 1e9 == pytest.approx(active_b, rel=0.1)


def test_aliases_instruct_and_quantised_variants_resolve():
    assert get_model("llama-3.1-8b").name == "meta-llama/Llama-3.1-8B"
    assert get_model("meta-llama/Llama-3.1-8B-Instruct").name == "meta-llama/Llama-3.1-8B"
    fp8 = get_model("nvidia/Llama-3.1-8B-Instruct-FP8")
    assert fp8.weight_dtype == "fp8" and fp8.checkpoint_kv_dtype == "fp8"
    # Linear layers in fp8; the embedding and lm-head stay in bf16.
    p = fp8.params
    embed_and_head = p.embedding + p.lm_head
    assert fp8.weight_bytes == (fp8.total_params - embed_and_head) * 1.0 + embed_and_head * 2.0


def test_nvidias_two_nvfp4_qwen3_32b_checkpoints_are_variants_in_one_format():
    # nvidia/Qwen3-32B-FP4 and nvidia/Qwen3-32B-NVFP4: NVFP4 linear layers, FP8 KV cache.
    fp4, nvfp4 = get_model("nvidia/Qwen3-32B-FP4"), get_model("nvidia/Qwen3-32B-NVFP4")
    assert nvfp4.name == "nvidia/Qwen3-32B-NVFP4"
    assert (nvfp4.weight_dtype, nvfp4.checkpoint_kv_dtype) == ("nvfp4", "fp8")
    assert nvfp4.weight_bytes == fp4.weight_bytes and nvfp4.total_params == fp4.total_params


def test_kv_bytes_per_token_gqa_mla_and_sliding():
    assert get_model("meta-llama/Llama-3.1-8B").kv_bytes_per_token("bf16") == 131072
    assert get_model("meta-llama/Llama-3.1-70B").kv_bytes_per_token("bf16") == 327680
    assert get_model("deepseek-ai/DeepSeek-V3").kv_bytes_per_token("fp8") == 61 * (512 + 64)
    oss = get_model("openai/gpt-oss-20b")
    assert oss.num_sliding_layers == 12 and oss.sliding_window == 128
    # Only the 12 full-attention layers grow with context.
    assert oss.kv_bytes_per_token("bf16") == 12 * 2 * 8 * 64 * 2
    assert oss.sliding_kv_bytes_per_sequence("bf16") == 12 * 2 * 8 * 64 * 2 * 128


def test_quantisation_formats_and_scope():
    ds = get_model("deepseek-ai/DeepSeek-V3")
    assert ds.weight_dtype == "fp8_block" and ds.is_mla and ds.is_moe
    oss = get_model("openai/gpt-oss-120b")
    assert oss.weight_dtype == "mxfp4"
    assert oss.linear_dtype(expert=False) == "bf16" and oss.linear_dtype(expert=True) == "mxfp4"


def test_kv_dtype_auto_rule():
    fp8 = get_model("nvidia/Llama-3.1-8B-Instruct-FP8")
    assert fp8.resolve_kv_dtype("auto", "trtllm") == "fp8"
    assert fp8.resolve_kv_dtype("auto", "vllm") == "bf16"
    assert get_model("llama-3.1-8b").resolve_kv_dtype("fp8", "vllm") == "fp8"
    with pytest.raises(ConfigError):
        fp8.resolve_kv_dtype("int3", "vllm")


def test_unknown_model_lists_close_names():
    with pytest.raises(UnknownNameError) as err:
        get_model("meta-llama/Llama-3.1-7B")
    assert "meta-llama/Llama-3.1-8B" in err.value.close_matches


def _write_config(folder, **overrides):
    config = {
        "model_type": "llama",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "num_hidden_layers": 8,
        "intermediate_size": 8192,
        "vocab_size": 32000,
        "max_position_embeddings": 65536,
        **overrides,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_local_folder_and_config_path(tmp_path):
    folder = _write_config(tmp_path / "tiny")
    by_folder = get_model(str(folder))
    by_file = get_model(str(folder / "config.json"))
    assert by_folder.hidden_size == by_file.hidden_size == 2048
    assert by_folder.kv_bytes_per_token("bf16") == 8 * 2 * 4 * 128 * 2


def test_local_modelopt_quant_config(tmp_path):
    folder = _write_config(tmp_path / "q")
    (folder / "hf_quant_config.json").write_text(
        json.dumps({"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}})
    )
    m = get_model(str(folder))
    assert m.weight_dtype == "nvfp4" and m.checkpoint_kv_dtype == "fp8"


def test_local_config_errors_name_the_file(tmp_path):
    folder = _write_config(tmp_path / "bad", model_type="mamba")
    with pytest.raises(ConfigError) as err:
        get_model(str(folder))
    assert "model_type" in str(err.value) and "config.json" in str(err.value)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read JSON"):
        get_model(str(broken))


def test_deepseek_r1_mtp_acceptance_reproduces_its_documented_accepted_lengths():
    # TensorRT-LLM's DeepSeek-R1 blog: 1.92, 2.58, 2.82 tokens a step at 1, 2, 3 drafts.
    spec = get_model("nvidia/DeepSeek-R1-FP4")  # a variant keeps its base model's acceptance
    for nextn, tokens in ((1, 1.92), (2, 2.58), (3, 2.82)):
        rates = spec.mtp_accept_rates(nextn)
        assert len(rates) == nextn
        reach, expected = 1.0, 1.0
        for rate in rates:
            reach *= rate
            expected += reach
        assert expected == pytest.approx(tokens)
    assert spec.mtp_accept_rates(0) is None
    # A model without documented acceptance leaves the engine's default in place.
    assert get_model("deepseek-ai/DeepSeek-V3").mtp_accept_rates(3) is None


def test_deepseek_r1_drafts_are_accepted_less_often_on_random_token_prompts():
    # The documented lengths were measured on real prompts; the catalog's fitted fraction of
    # each per-position acceptance applies where the prompts are random tokens.
    spec = get_model("nvidia/DeepSeek-R1-0528-FP4")
    scale = spec.mtp_random_prompt_acceptance
    assert 0 < scale < 1
    documented = spec.mtp_accept_rates(3)
    assert spec.mtp_accept_rates(3, random_prompts=True) == pytest.approx([scale * r for r in documented])
    assert spec.mtp_accept_rates(0, random_prompts=True) is None
    # A model without documented acceptance has nothing to scale.
    assert get_model("deepseek-ai/DeepSeek-V3").mtp_accept_rates(3, random_prompts=True) is None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"scale": 0.8}, "fitted_on"),
        ({"scale": 1.2, "fitted_on": "x"}, "(0, 1]"),
        ({"scale": "high", "fitted_on": "x"}, "scale = 'high'"),
    ],
)
def test_bad_random_prompt_acceptance_says_where(entry, message):
    from aisimulate.catalog.models import _random_prompt_acceptance

    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        _random_prompt_acceptance(entry, "models/x.json")
    assert "models/x.json: mtp_random_prompt_acceptance" in str(err.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"tokens_per_step": [1.9, 2.5]}, "source"),
        ({"tokens_per_step": [], "source": "x"}, "non-empty"),
        ({"tokens_per_step": [1.9, 1.8], "source": "x"}, "tokens_per_step[1]"),
        ({"tokens_per_step": [2.5], "source": "x"}, "tokens_per_step[0]"),
    ],
)
def test_bad_documented_acceptance_says_where(entry, message):
    from aisimulate.catalog.models import _accepted_tokens

    with pytest.raises(ConfigError, match=re.escape(message)):
        _accepted_tokens(entry, "models/x.json")
