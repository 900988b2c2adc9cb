"""What scripts/build_catalog.py adds to the reference configs (shared/reference/models.json):
models that are not there, and the other Hub ids of each model (instruct / chat / -it
checkpoints, renamed repos, community re-uploads), every one with the source it rests on.

Only what a source shows is written here: config fields copied from a config.json (or a
transcription of one), and re-upload relations as published. Nothing is inferred from a name.

Evidence of an alias (``same`` below), strongest first:
- "config": a copy of that repo's config.json, transcribed in ``config``; the build checks
  that it gives the very same ModelSpec as its target (every field the estimator reads).
- "template": a source that builds both checkpoints from one set of shapes (litgpt's
  ``name="Qwen2.5-7B{}"`` expanded to "" and "-Instruct"): shapes and vocab are the same;
  max_position_embeddings and torch_dtype are the target's, not seen for this repo.
- "re-upload": unsloth's mapper (unsloth/models/mapper.py), which loads one for the other:
  the same weights, 16-bit or bitsandbytes 4-bit.
"""

from __future__ import annotations

from typing import Any

ALAIN_COMMIT = "1b33775219c224def81d0c3c4e34d2d6630dc83d"
LITGPT = "Lightning-AI/litgpt:litgpt/config.py@26857050fe3ff627cd714fe92f5838f51a3d5efa"
MLC = "mlc-ai/mlc-llm:python/mlc_llm/model/model_preset.py@79d603f085f50500e9509fa01785ffa7ecfaaa93"
UNSLOTH = "unslothai/unsloth:unsloth/models/mapper.py@015bdef0d94a241bcd94eec7a405b1700632180d"
KERAS = "keras-team/keras-hub:keras_hub/src/models/{}@71453d08f59edc90d276e999319fc51e61cbf82c"
SLIME = (
    "zyzshishui/slime:scripts/models/qwen3-235B-A22B.sh@a29386384f6fa74b4e926a675b40038a91289659"
)
WARPIO = (
    "akougkas/warpio-cli:warpio-docs/ai-docs/model_cards/qwen3:4b.md"
    "@8dde6d21c14ca1c2167e7f8c86370e54fdbbc537"
)


OPENMOSE = "OpenMOSE/RWKV-LM-RLHF:main/tokenizer/mistralsmall3/{}@{}"
# transformers' converter from Mistral's params.json to a config.json (convert_config: dim,
# n_layers, hidden_dim, n_heads, n_kv_heads, head_dim, vocab_size, rope_theta, max_seq_len ->
# max_position_embeddings; no sliding_window in params.json -> None; MistralConfig's untied head)
MISTRAL_CONVERT = (
    "huggingface/transformers:src/transformers/models/mistral/convert_mistral_weights_to_hf.py"
    "@15ea02a2add1672acbeee158a9448720d6093de1"
)
MS_INDEX = OPENMOSE.format(
    "model.safetensors.index.json", "7e8f62ab3f43bd70de656d5205d1cb4216b4ea58"
)
DOTNET_PHI = "dotnet/machinelearning:src/Microsoft.ML.GenAI.Phi/Resource/Config/phi-3-medium-{}"
PHI3_MEDIUM_4K = DOTNET_PHI.format(
    "4k-instruct-config.json@17b689af77151463cf3b24100c32d558f779c620"
)
PHI3_MEDIUM_128K = DOTNET_PHI.format(
    "128k-instruct-config.json@6d1f7e2bf83e260ceb4f07ad1ae9fe3257033d49"
)
GSPO = "vivekvar-dl/GSPO-DeepSeek-R1-Distill-Qwen-1.5B:{}@c31f385700b7cde09de4b582f96840bb4478444f"
SMOLLM3 = "fetchwiki/HuggingFaceTB-SmolLM3-3B:{}@24f7882f92998ee0e691d105ade637afc3e5171f"


def card(repo: str) -> str:
    """Copies of Hub model cards (README.md), one folder per repo."""
    return f"ZHUI/paddlenlp_model_readme:{repo}/index.md@40a7101e89dcf9a0dedb0e0d48c8c357fcc95996"


def keras(preset: str, file: str) -> str:
    """keras-hub preset metadata: "params" is the exact count of the converted backbone."""
    return f"{KERAS.format(file)} ({preset!r})"


# The model cards of the Qwen2.5 instruct and Coder checkpoints: their config.json, unlike the
# base's (131072), stops at 32768 (Qwen2.5-7B-Instruct's config.json copy shows that value).
QWEN_32K = "model card: 'The current `config.json` is set for context length up to 32,768 tokens.'"


def alain(folder: str, file: str = "config.json") -> str:
    """Copies of Hub files (config.json; model.json is the Hub API's model record, whose
    ``safetensors.total`` counts every tensor element of the checkpoint)."""
    return (
        "daniel-p-green/alain-ai-learning-platform:"
        f"out/research-{folder}/sources/huggingface/{file}@{ALAIN_COMMIT}"
    )


def hub_config(**fields: Any) -> dict[str, Any]:
    return fields


# Models the reference set lacks: the config.json fields the estimator reads, as published.
ENTRIES: list[dict[str, Any]] = [
    {
        "name": "Qwen2.5-7B-Instruct",
        "hf_id": "Qwen/Qwen2.5-7B-Instruct",
        "why": "max_position_embeddings 32768 (Qwen2.5-7B: 131072)",
        "config": hub_config(
            model_type="qwen2",
            hidden_size=3584,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            intermediate_size=18944,
            vocab_size=152064,
            tie_word_embeddings=False,
            max_position_embeddings=32768,
            torch_dtype="bfloat16",
            rms_norm_eps=1e-06,
            rope_theta=1000000.0,
        ),
        "safetensors_total": (7615616512, alain("qwen-qwen2-5-7b-instruct", "model.json")),
        "sources": [alain("qwen-qwen2-5-7b-instruct")],
    },
    {
        "name": "Qwen3-1.7B",
        "hf_id": "Qwen/Qwen3-1.7B",
        "why": "not in the reference set",
        "config": hub_config(
            model_type="qwen3",
            hidden_size=2048,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            intermediate_size=6144,
            vocab_size=151936,
            tie_word_embeddings=True,
            max_position_embeddings=40960,
            torch_dtype="bfloat16",
            attention_bias=False,
            rms_norm_eps=1e-06,
            rope_theta=1000000,
        ),
        "sources": [f"{MLC} ('qwen3_1.7b' preset, a config.json copy)"],
    },
    {
        "name": "Meta-Llama-3-8B",
        "hf_id": "meta-llama/Meta-Llama-3-8B",
        "why": "context 8192 and no rope scaling (Llama-3.1-8B: 131072)",
        "config": hub_config(
            model_type="llama",
            hidden_size=4096,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            intermediate_size=14336,
            vocab_size=128256,
            tie_word_embeddings=False,
            max_position_embeddings=8192,
            torch_dtype="bfloat16",
            rope_theta=500000,
        ),
        "notes": ["torch_dtype from the checkpoint's tensors (all BF16 in the Hub record)"],
        "safetensors_total": (8030261248, alain("meta-llama-meta-llama-3-8b", "model.json")),
        "sources": [
            f"{LITGPT} ('Llama-3-8B{{}}': block_size 8192, padded vocab 128256, rope_base 500000)",
            alain("meta-llama-meta-llama-3-8b", "model.json"),
        ],
    },
    {
        "name": "Mistral-7B-v0.1",
        "hf_id": "mistralai/Mistral-7B-v0.1",
        "why": "vocab 32000 and sliding window 4096 (v0.3: 32768, none)",
        "config": hub_config(
            model_type="mistral",
            hidden_size=4096,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            intermediate_size=14336,
            vocab_size=32000,
            tie_word_embeddings=False,
            max_position_embeddings=32768,
            torch_dtype="bfloat16",
            rms_norm_eps=1e-05,
            rope_theta=10000.0,
            sliding_window=4096,
        ),
        "sources": [
            f"{MLC} ('mistral_7b' preset: config.json of transformers 4.34.0.dev0, its "
            "sliding_window renamed sliding_window_size)",
            f"{LITGPT} ('Mistral-7B-{{}}v0.1': vocab 32000, sliding_window_size 4096)",
        ],
    },
    {
        "name": "OLMo-2-1124-13B",
        "hf_id": "allenai/OLMo-2-1124-13B",
        "why": "not in the reference set",
        "config": hub_config(
            model_type="olmo2",
            hidden_size=5120,
            num_hidden_layers=40,
            num_attention_heads=40,
            num_key_value_heads=40,
            intermediate_size=13824,
            vocab_size=100352,
            tie_word_embeddings=False,
            max_position_embeddings=4096,
            torch_dtype="float32",
            rms_norm_eps=1e-06,
            rope_theta=500000.0,
        ),
        "sources": [
            f"{MLC} ('olmo2_13b' preset, a config.json copy)",
            f"{LITGPT} ('OLMo-2-1124-13B{{}}': the same shapes)",
        ],
    },
    {
        "name": "Phi-3-mini-128k-instruct",
        "hf_id": "microsoft/Phi-3-mini-128k-instruct",
        "why": "context 131072 (Phi-3-mini-4k-instruct: 4096)",
        "config": hub_config(
            model_type="phi3",
            hidden_size=3072,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=32,
            intermediate_size=8192,
            vocab_size=32064,
            tie_word_embeddings=False,
            max_position_embeddings=131072,
        ),
        "notes": ["torch_dtype not in the source; shapes and block_size 131072 from litgpt"],
        "sources": [f"{LITGPT} ('Phi-3-mini-128k-instruct')"],
    },
    {
        "name": "Phi-4-reasoning",
        "hf_id": "microsoft/Phi-4-reasoning",
        "why": "context 32768 (phi-4: 16384)",
        "config": hub_config(
            model_type="phi3",
            hidden_size=5120,
            num_hidden_layers=40,
            num_attention_heads=40,
            num_key_value_heads=10,
            intermediate_size=17920,
            vocab_size=100352,
            tie_word_embeddings=False,
            max_position_embeddings=32768,
            rope_theta=500000,
        ),
        "notes": ["torch_dtype not in the source; shapes and block_size 32768 from litgpt"],
        "sources": [f"{LITGPT} ('Phi-4-reasoning')"],
    },
    {
        "name": "Qwen3-235B-A22B",
        "hf_id": "Qwen/Qwen3-235B-A22B",
        "why": "not in the reference set",
        "config": hub_config(
            model_type="qwen3_moe",
            hidden_size=4096,
            num_hidden_layers=94,
            num_attention_heads=64,
            num_key_value_heads=4,
            head_dim=128,
            intermediate_size=12288,
            moe_intermediate_size=1536,
            num_experts=128,
            num_experts_per_tok=8,
            decoder_sparse_step=1,
            vocab_size=151936,
            tie_word_embeddings=False,
            max_position_embeddings=40960,
            rms_norm_eps=1e-06,
            rope_theta=1000000,
        ),
        "notes": ["torch_dtype not in the sources"],
        "published": "235B in total and 22B activated (model card)",
        "exact": (235093634560, keras("qwen3_moe_235b_a22b_en", "qwen3_moe/qwen3_moe_presets.py")),
        "sources": [
            f"{LITGPT} ('Qwen3-235B-A22B')",
            f"{SLIME} (Megatron arguments: untied embeddings, every layer MoE, qk-layernorm)",
        ],
    },
    {
        "name": "gpt-oss-120b",
        "hf_id": "openai/gpt-oss-120b",
        "why": "not in the reference set",
        "config": hub_config(
            model_type="gpt_oss",
            hidden_size=2880,
            num_hidden_layers=36,
            num_attention_heads=64,
            num_key_value_heads=8,
            head_dim=64,
            intermediate_size=2880,
            num_local_experts=128,
            num_experts_per_tok=4,
            experts_per_token=4,
            vocab_size=201088,
            tie_word_embeddings=False,
            max_position_embeddings=131072,
            rms_norm_eps=1e-05,
            rope_theta=150000,
            sliding_window=128,
            attention_bias=True,
            swiglu_limit=7.0,
        ),
        "notes": ["the checkpoint stores the experts in MXFP4 (quantization_config mxfp4)"],
        "published": "gpt-oss-120b: 117B parameters with 5.1B active parameters",
        "mxfp4_safetensors": (
            2167371072,
            118244966400,
            alain("openai-gpt-oss-120b", "model.json"),
        ),
        "exact": (116829156672, keras("gpt_oss_120b_en", "gpt_oss/gpt_oss_presets.py")),
        "sources": [alain("openai-gpt-oss-120b")],
    },
]

ENTRIES += [
    {
        "name": "Phi-4-mini-instruct",
        "hf_id": "microsoft/Phi-4-mini-instruct",
        "why": "not in the reference set",
        "config": hub_config(
            model_type="phi3",
            hidden_size=3072,
            num_hidden_layers=32,
            num_attention_heads=24,
            num_key_value_heads=8,
            intermediate_size=8192,
            vocab_size=200064,
            tie_word_embeddings=True,
            max_position_embeddings=131072,
            torch_dtype="bfloat16",
            partial_rotary_factor=0.75,
            rms_norm_eps=1e-05,
            rope_theta=10000.0,
            sliding_window=262144,
        ),
        "notes": ["partial_rotary_factor 0.75 (RoPE on 3/4 of each head) adds no parameter"],
        "published": "3.8B parameters (model card)",
        "sources": [
            f"{MLC} ('phi-4' preset: the config.json of _name_or_path Phi-4-mini-instruct, "
            "tie_word_embeddings true)",
            f"{LITGPT} ('Phi-4-mini-instruct': the same shapes, padded vocab 200064, "
            "rotary_percentage 0.75, block_size 131072)",
        ],
    },
    {
        "name": "SmolLM3-3B",
        "hf_id": "HuggingFaceTB/SmolLM3-3B",
        "why": "not in the reference set",
        "config": hub_config(
            model_type="smollm3",
            hidden_size=2048,
            num_hidden_layers=36,
            num_attention_heads=16,
            num_key_value_heads=4,
            intermediate_size=11008,
            vocab_size=128256,
            tie_word_embeddings=True,
            max_position_embeddings=65536,
            torch_dtype="bfloat16",
            attention_bias=False,
            mlp_bias=False,
            rms_norm_eps=1e-06,
            rope_theta=5000000.0,
            no_rope_layer_interval=4,
        ),
        "notes": [
            "its config.json has no tie_word_embeddings: SmolLM3Config's default True "
            "(transformers 5.24 configuration_smollm3.py), written out here",
            "every 4th layer without RoPE (no_rope_layers) has the same parameters as the others",
        ],
        "published": "SmolLM3 is a 3B parameter language model (model card)",
        # keras-hub's count holds one 64-element inv_freq weight in each of the 36 layers'
        # rotary embedding (smollm3_layers.py SmolLM3RotaryEmbedding.add_weight), which the
        # Hub checkpoint and transformers do not have
        "exact": (
            3075100928 - 36 * 64,
            f"{keras('smollm3_3b_en', 'smollm3/smollm3_presets.py')} 3,075,100,928 less its "
            "36 x 64 rotary inv_freq weights",
        ),
        "sources": [
            f"{SMOLLM3.format('config.json')} (a copy of the Hub repo's config.json)",
            f"{SMOLLM3.format('model_files.json')} (two safetensors files of 6,150,235,008 "
            "bytes in all: 16-bit weights, one embedding matrix)",
        ],
    },
    {
        "name": "Mistral-Small-24B-Instruct-2501",
        "hf_id": "mistralai/Mistral-Small-24B-Instruct-2501",
        "why": "not in the reference set",
        "config": hub_config(
            model_type="mistral",
            hidden_size=5120,
            num_hidden_layers=40,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            intermediate_size=32768,
            vocab_size=131072,
            tie_word_embeddings=False,
            max_position_embeddings=32768,
            rms_norm_eps=1e-05,
            rope_theta=100000000.0,
            sliding_window=None,
        ),
        "notes": [
            "config.json fields as transformers' convert_config builds them from the repo's "
            "params.json; torch_dtype not in the sources (the index's 2 bytes per element: "
            "16-bit)"
        ],
        "published": "Mistral Small 3 (2501) ... boasting 24B parameters (model card)",
        "safetensors_bytes": (47144806400, 2, MS_INDEX),
        "sources": [
            f"{OPENMOSE.format('params.json', 'c394e06d2ea0fdad4679af83b9dd77b517a87f49')} "
            "(the repo's params.json: dim 5120, n_layers 40, head_dim 128, hidden_dim 32768, "
            "n_heads 32, n_kv_heads 8, vocab 131072, rope_theta 1e8, max_seq_len 32768)",
            f"{OPENMOSE.format('README.md', 'f4763414ec44c3bf01eb7dd08ffcec7a95257873')} "
            "(the model card of Mistral-Small-24B-Instruct-2501 beside them)",
            f"{MS_INDEX} (lm_head.weight beside model.embed_tokens.weight: untied)",
            f"{MISTRAL_CONVERT} (convert_config)",
        ],
    },
]

ENTRIES.append(
    {
        "name": "Phi-3-medium-4k-instruct",
        "hf_id": "microsoft/Phi-3-medium-4k-instruct",
        "why": "not in the reference set",
        "config": hub_config(
            model_type="phi3",
            hidden_size=5120,
            num_hidden_layers=40,
            num_attention_heads=40,
            num_key_value_heads=10,
            intermediate_size=17920,
            vocab_size=32064,
            tie_word_embeddings=False,
            max_position_embeddings=4096,
            torch_dtype="bfloat16",
            attention_bias=False,
            rms_norm_eps=1e-05,
            rope_theta=10000.0,
            sliding_window=2047,
        ),
        "published": "Phi-3-Medium-4K-Instruct is a 14B parameters ... model (model card)",
        "sources": [
            f"{PHI3_MEDIUM_4K} (a config.json copy, _name_or_path Phi-3-medium-4k-instruct)"
        ],
    }
)

ENTRIES.append(
    {
        "name": "DeepSeek-R1-Distill-Qwen-1.5B",
        "hf_id": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "why": "untied lm_head and context 131072 (Qwen2.5-1.5B: tied)",
        "config": hub_config(
            model_type="qwen2",
            hidden_size=1536,
            num_hidden_layers=28,
            num_attention_heads=12,
            num_key_value_heads=2,
            intermediate_size=8960,
            vocab_size=151936,
            tie_word_embeddings=False,
            max_position_embeddings=131072,
            rms_norm_eps=1e-06,
            rope_theta=10000,
        ),
        "notes": [
            "fields from the config.json transformers 4.54 saved after loading this repo "
            "(from_pretrained, then save_pretrained after GSPO training): its architecture "
            "fields are the repo's; torch_dtype not in the source (that save is float32)"
        ],
        "published": "1.5B, distilled on base model Qwen2.5-Math-1.5B (model card)",
        "safetensors_total": (
            1777088000,
            f"{GSPO.format('custom_gspo_results/best_model/model.safetensors.index.json')} "
            "metadata.total_parameters",
        ),
        "sources": [
            f"{GSPO.format('custom_gspo_results/final_model/config.json')} (README: trained from "
            "AutoModelForCausalLM.from_pretrained('deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B'))",
            f"{card('deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B')} (base model Qwen2.5-Math-1.5B)",
        ],
    }
)

# Models whose config.json is another entry's with a few fields changed ("from" + "set"): every
# other field is the base entry's, and the sources show the changed ones and the shared shapes.
DERIVED: list[dict[str, Any]] = [
    *(
        {
            "name": f"Qwen2.5-{size}-Instruct",
            "hf_id": f"Qwen/Qwen2.5-{size}-Instruct",
            "from": f"Qwen/Qwen2.5-{size}",
            "set": {"max_position_embeddings": 32768},
            "why": f"max_position_embeddings 32768 (Qwen2.5-{size}: 131072)",
            "published": published,
            "sources": [
                f"{LITGPT} ('Qwen2.5-{size}{{}}', expanded to '' and '-Instruct': same shapes)",
                f"{card(f'Qwen/Qwen2.5-{size}-Instruct')} ({QWEN_32K})",
            ],
            **extra,
        }
        for size, published, extra in (
            ("14B", "Number of Parameters: 14.7B (model card)", {}),
            (
                "32B",
                "Number of Parameters: 32.5B (model card)",
                {"exact": (32763876352, keras("qwen2.5_instruct_32b_en", "qwen/qwen_presets.py"))},
            ),
            (
                "72B",
                "Number of Parameters: 72.7B (model card)",
                {"exact": (72706203648, keras("qwen2.5_instruct_72b_en", "qwen/qwen_presets.py"))},
            ),
        )
    ),
    *(
        {
            "name": f"Qwen2.5-Coder-{size}",
            "hf_id": f"Qwen/Qwen2.5-Coder-{size}",
            "from": f"Qwen/Qwen2.5-{size}",
            "set": {"max_position_embeddings": 32768},
            "why": f"max_position_embeddings 32768 (Qwen2.5-{size}: 131072)",
            "published": published,
            "sources": [
                f"{LITGPT} ('Qwen2.5-Coder-{size}{{}}': every field of 'Qwen2.5-{size}{{}}' but "
                "block_size 32768)",
                f"{card(f'Qwen/Qwen2.5-Coder-{size}')} ({QWEN_32K})",
            ],
            **extra,
        }
        for size, published, extra in (
            ("14B", "Number of Parameters: 14.7B (model card)", {}),
            (
                "32B",
                "Number of Parameters: 32.5B (model card)",
                {"exact": (32763876352, keras("qwen2.5_coder_32b", "qwen/qwen_presets.py"))},
            ),
        )
    ),
    {
        "name": "Phi-3-medium-128k-instruct",
        "hf_id": "microsoft/Phi-3-medium-128k-instruct",
        "from": "microsoft/Phi-3-medium-4k-instruct",
        "set": {"max_position_embeddings": 131072, "sliding_window": 131072},
        "why": "context 131072 (Phi-3-medium-4k-instruct: 4096)",
        "notes": ["its rope_scaling (type su, long and short factors) adds no parameter"],
        "published": "The Phi-3-Medium-128K-Instruct is a 14B parameters ... model (model card)",
        "sources": [
            f"{PHI3_MEDIUM_128K} (a config.json copy, _name_or_path Phi-3-medium-128k-instruct)"
        ],
    },
    {
        "name": "Qwen3-4B-Thinking-2507",
        "hf_id": "Qwen/Qwen3-4B-Thinking-2507",
        "from": "Qwen/Qwen3-4B",
        "set": {"max_position_embeddings": 262144, "rope_theta": 5000000},
        "why": "max_position_embeddings 262144 (Qwen3-4B: 40960)",
        "published": "Number of Parameters: 4.0B (Qwen3-4B-Instruct-2507 model card)",
        "sources": [
            f"{WARPIO} (a config.json copy: 262144, rope_theta 5000000, tie_word_embeddings true, "
            "bfloat16, Qwen3-4B's shapes; its chat template opens <think>, the Thinking-2507's)",
            f"{LITGPT} ('Qwen3-4B-{{}}-2507', expanded to Thinking and Instruct)",
        ],
    },
    *(
        {
            "name": f"Qwen3-{size}-Instruct-2507",
            "hf_id": f"Qwen/Qwen3-{size}-Instruct-2507",
            "from": f"Qwen/Qwen3-{size}",
            "set": {"max_position_embeddings": 262144, "rope_theta": rope},
            "why": f"max_position_embeddings 262144 (Qwen3-{size}: 40960)",
            "notes": [
                f"tie_word_embeddings and torch_dtype are Qwen3-{size}'s: litgpt does not record "
                "them"
            ],
            "sources": [
                f"{LITGPT} ('Qwen3-{size}-{{}}-2507': every field of 'Qwen3-{size}' but "
                f"block_size 262144 and rope_base {rope})"
            ],
        }
        for size, rope in (("30B-A3B", 10000000), ("235B-A22B", 5000000))
    ),
]

# (alias, target, evidence, sources, extra): the target is a catalogue id or another alias.
INSTRUCT: list[tuple[str, str, str, list[str], dict[str, Any]]] = [
    (
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Qwen/Qwen2.5-0.5B",
        "template",
        [
            f"{LITGPT} ('Qwen2.5-0.5B{{}}')",
            f"{alain('gensyn-qwen2-5-0-5b-instruct')} (a fine-tune of it: same fields)",
        ],
        {},
    ),
    (
        "Qwen/Qwen2.5-1.5B-Instruct",
        "Qwen/Qwen2.5-1.5B",
        "config",
        [alain("qwen-qwen2-5-1-5b-instruct")],
        {
            "config": hub_config(
                model_type="qwen2",
                hidden_size=1536,
                num_hidden_layers=28,
                num_attention_heads=12,
                num_key_value_heads=2,
                intermediate_size=8960,
                vocab_size=151936,
                tie_word_embeddings=True,
                max_position_embeddings=32768,
                torch_dtype="bfloat16",
            ),
            "safetensors_total": (
                1543714304,
                alain("qwen-qwen2-5-1-5b-instruct", "model.json"),
            ),
        },
    ),
    (
        "Qwen/Qwen2.5-3B-Instruct",
        "Qwen/Qwen2.5-3B",
        "config",
        [alain("qwen-qwen2-5-3b-instruct")],
        {
            "config": hub_config(
                model_type="qwen2",
                hidden_size=2048,
                num_hidden_layers=36,
                num_attention_heads=16,
                num_key_value_heads=2,
                intermediate_size=11008,
                vocab_size=151936,
                tie_word_embeddings=True,
                max_position_embeddings=32768,
                torch_dtype="bfloat16",
            ),
            "safetensors_total": (3085938688, alain("qwen-qwen2-5-3b-instruct", "model.json")),
        },
    ),
    (
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
        "Qwen/Qwen2.5-32B",
        "config",
        [alain("deepseek-ai-deepseek-r1-distill-qwen-32b")],
        {
            "config": hub_config(
                model_type="qwen2",
                hidden_size=5120,
                num_hidden_layers=64,
                num_attention_heads=40,
                num_key_value_heads=8,
                intermediate_size=27648,
                vocab_size=152064,
                tie_word_embeddings=False,
                max_position_embeddings=131072,
                torch_dtype="bfloat16",
            ),
            "safetensors_total": (
                32763876352,
                alain("deepseek-ai-deepseek-r1-distill-qwen-32b", "model.json"),
            ),
            "note": "a distill fine-tuned from Qwen2.5-32B; rms_norm_eps 1e-05 (no effect on "
            "memory)",
        },
    ),
    (
        "meta-llama/Meta-Llama-3-8B-Instruct",
        "meta-llama/Meta-Llama-3-8B",
        "template",
        [f"{LITGPT} ('Llama-3-8B{{}}', expanded to '' and '-Instruct')"],
        {},
    ),
    (
        "meta-llama/Meta-Llama-3.1-8B",
        "meta-llama/Llama-3.1-8B",
        "template",
        [f"{LITGPT} ('Llama-3.1-8B{{}}' names the Hub repo Meta-Llama-3.1-8B{{}})"],
        {"note": "the repo's name before Meta renamed it Llama-3.1-8B"},
    ),
    (
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-8B",
        "config",
        [
            f"{MLC} ('llama3_1_8b' preset: the Instruct config.json, eos_token_id "
            "[128001, 128008, 128009])",
            f"{LITGPT} ('Llama-3.1-8B{{}}')",
        ],
        {
            "config": hub_config(
                model_type="llama",
                hidden_size=4096,
                num_hidden_layers=32,
                num_attention_heads=32,
                num_key_value_heads=8,
                intermediate_size=14336,
                vocab_size=128256,
                tie_word_embeddings=False,
                max_position_embeddings=131072,
                torch_dtype="bfloat16",
                attention_bias=False,
                mlp_bias=False,
            ),
            "safetensors_total": (
                8030261248,
                alain("meta-llama-llama-3-1-8b-instruct", "model.json"),
            ),
        },
    ),
    (
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-8B-Instruct",
        "template",
        [f"{LITGPT} ('Llama-3.1-8B{{}}' names the Hub repo Meta-Llama-3.1-8B{{}})"],
        {"note": "the repo's name before Meta renamed it Llama-3.1-8B-Instruct"},
    ),
    (
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        "meta-llama/Llama-3.1-8B",
        "config",
        [alain("deepseek-ai-deepseek-r1-distill-llama-8b")],
        {
            "config": hub_config(
                model_type="llama",
                hidden_size=4096,
                num_hidden_layers=32,
                num_attention_heads=32,
                num_key_value_heads=8,
                intermediate_size=14336,
                vocab_size=128256,
                tie_word_embeddings=False,
                max_position_embeddings=131072,
                torch_dtype="bfloat16",
                attention_bias=False,
                mlp_bias=False,
            ),
            "safetensors_total": (
                8030261248,
                alain("deepseek-ai-deepseek-r1-distill-llama-8b", "model.json"),
            ),
            "note": "a distill fine-tuned from Llama-3.1-8B",
        },
    ),
    (
        "meta-llama/Meta-Llama-3.1-70B",
        "meta-llama/Llama-3.1-70B",
        "template",
        [f"{LITGPT} ('Llama-3.1-70B{{}}' names the Hub repo Meta-Llama-3.1-70B{{}})"],
        {"note": "the repo's name before Meta renamed it Llama-3.1-70B"},
    ),
    (
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.1-70B",
        "template",
        [f"{LITGPT} ('Llama-3.1-70B{{}}')"],
        {},
    ),
    (
        "meta-llama/Meta-Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.1-70B-Instruct",
        "template",
        [f"{LITGPT} ('Llama-3.1-70B{{}}' names the Hub repo Meta-Llama-3.1-70B{{}})"],
        {"note": "the repo's name before Meta renamed it Llama-3.1-70B-Instruct"},
    ),
    (
        "meta-llama/Llama-3.3-70B-Instruct",
        "meta-llama/Llama-3.1-70B",
        "template",
        [
            f"{LITGPT} ('Llama-3.3-70B-Instruct': every field as 'Llama-3.1-70B{{}}', "
            "block_size 131072, rope scaling factor 8)"
        ],
        {"note": "Llama 3.3 is a new post-training of the Llama 3.1 70B architecture"},
    ),
    (
        "meta-llama/Llama-3.2-1B-Instruct",
        "meta-llama/Llama-3.2-1B",
        "template",
        [f"{LITGPT} ('Llama-3.2-1B{{}}')"],
        {
            "safetensors_total": (
                1235814400,
                alain("meta-llama-llama-3-2-1b-instruct", "model.json"),
            )
        },
    ),
    (
        "meta-llama/Llama-3.2-3B-Instruct",
        "meta-llama/Llama-3.2-3B",
        "config",
        [
            f"{alain('context-labs-meta-llama-llama-3-2-3b-instruct-fp16')} (context-labs' "
            "copy of it)",
            f"{LITGPT} ('Llama-3.2-3B{{}}')",
        ],
        {
            "config": hub_config(
                model_type="llama",
                hidden_size=3072,
                num_hidden_layers=28,
                num_attention_heads=24,
                num_key_value_heads=8,
                head_dim=128,
                intermediate_size=8192,
                vocab_size=128256,
                tie_word_embeddings=True,
                max_position_embeddings=131072,
                torch_dtype="bfloat16",
                attention_bias=False,
                mlp_bias=False,
            ),
            "safetensors_total": (
                3212749824,
                alain("context-labs-meta-llama-llama-3-2-3b-instruct-fp16", "model.json"),
            ),
        },
    ),
    (
        "context-labs/meta-llama-Llama-3.2-3B-Instruct-FP16",
        "meta-llama/Llama-3.2-3B-Instruct",
        "re-upload",
        [alain("context-labs-meta-llama-llama-3-2-3b-instruct-fp16")],
        {"note": "context-labs' re-upload"},
    ),
    (
        "meta-llama/Llama-2-7b-chat-hf",
        "meta-llama/Llama-2-7b-hf",
        "template",
        [f"{LITGPT} ('Llama-2-7b{{}}-hf', expanded to '' and '-chat')"],
        {},
    ),
    (
        "mistralai/Mistral-7B-Instruct-v0.1",
        "mistralai/Mistral-7B-v0.1",
        "template",
        [f"{LITGPT} ('Mistral-7B-{{}}v0.1', expanded to '' and 'Instruct-')"],
        {},
    ),
    (
        "mistralai/Mistral-7B-Instruct-v0.2",
        "mistralai/Mistral-7B-v0.1",
        "template",
        [f"{LITGPT} ('Mistral-7B-Instruct-v0.2': vocab 32000, block_size 32768)"],
        {
            "note": "v0.2 uses rope_theta 1e6 and no sliding window; the shapes, vocab and "
            "context the estimator reads are v0.1's"
        },
    ),
    (
        "mistralai/Mistral-7B-Instruct-v0.3",
        "mistralai/Mistral-7B-v0.3",
        "template",
        [f"{LITGPT} ('Mistral-7B-Instruct-v0.3': every field as 'Mistral-7B-v0.3')"],
        {},
    ),
    (
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "mistralai/Mixtral-8x7B-v0.1",
        "template",
        [f"{LITGPT} ('Mixtral-8x7B-{{}}v0.1')"],
        {},
    ),
    *(
        (
            f"google/gemma-2-{size}-it",
            f"google/gemma-2-{size}",
            "template",
            [f"{LITGPT} ('Gemma-2-{size}' copied to 'Gemma-2-{size}-it')"],
            {},
        )
        for size in ("2b", "9b", "27b")
    ),
    *(
        (
            f"HuggingFaceTB/SmolLM2-{size}-Instruct",
            f"HuggingFaceTB/SmolLM2-{size}",
            "template",
            [f"{LITGPT} ('SmolLM2-{size}{{}}', expanded to '' and '-Instruct')"],
            {},
        )
        for size in ("135M", "360M", "1.7B")
    ),
    *(
        (
            f"allenai/OLMo-2-1124-{size}{kind}",
            f"allenai/OLMo-2-1124-{size}",
            "template",
            [f"{LITGPT} ('OLMo-2-1124-{size}{{}}', expanded to '', -SFT, -DPO, -Instruct)"],
            {},
        )
        for size in ("7B", "13B")
        for kind in ("-SFT", "-DPO", "-Instruct")
    ),
    *(
        (
            f"Qwen/Qwen2.5-Coder-{size}{kind}",
            target,
            "template",
            [
                f"{LITGPT} ('Qwen2.5-Coder-{size}{{}}', expanded to '' and '-Instruct': every "
                f"field of 'Qwen2.5-{size}{{}}' but block_size 32768)",
                f"{card(f'Qwen/Qwen2.5-Coder-{size}{kind}')} ({QWEN_32K})",
            ],
            {"note": f"the same config.json fields as {target}"},
        )
        for size, target in (
            ("1.5B", "Qwen/Qwen2.5-1.5B-Instruct"),
            ("7B", "Qwen/Qwen2.5-7B-Instruct"),
        )
        for kind in ("", "-Instruct")
    ),
    *(
        (
            f"Qwen/Qwen2.5-Coder-{size}-Instruct",
            f"Qwen/Qwen2.5-Coder-{size}",
            "template",
            [
                f"{LITGPT} ('Qwen2.5-Coder-{size}{{}}', expanded to '' and '-Instruct')",
                f"{card(f'Qwen/Qwen2.5-Coder-{size}-Instruct')} ({QWEN_32K})",
            ],
            {},
        )
        for size in ("14B", "32B")
    ),
    *(
        (
            f"Qwen/Qwen3-{size}-Base",
            f"Qwen/Qwen3-{size}",
            "template",
            [f"{LITGPT} ('Qwen3-{size}{{}}', expanded to '' and '-Base')"],
            {},
        )
        for size in ("0.6B", "1.7B", "4B", "8B", "14B")
    ),
    (
        "Qwen/Qwen3-30B-A3B-Base",
        "Qwen/Qwen3-30B-A3B",
        "template",
        [f"{LITGPT} ('Qwen3-30B-A3B-Base': every field as 'Qwen3-30B-A3B')"],
        {},
    ),
    *(
        (
            f"Qwen/Qwen3-{size}-{kind}-2507",
            f"Qwen/Qwen3-{size}-{other}-2507",
            "template",
            [f"{LITGPT} ('Qwen3-{size}-{{}}-2507', expanded to Thinking and Instruct)"],
            {},
        )
        for size, kind, other in (
            ("4B", "Instruct", "Thinking"),
            ("30B-A3B", "Thinking", "Instruct"),
            ("235B-A22B", "Thinking", "Instruct"),
        )
    ),
    (
        "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
        "meta-llama/Llama-3.3-70B-Instruct",
        "template",
        [
            f"{LITGPT} ('R1-Distill-Llama-70B': every field as 'Llama-3.1-70B{{}}')",
            f"{card('deepseek-ai/DeepSeek-R1-Distill-Llama-70B')} (base model "
            "Llama-3.3-70B-Instruct)",
        ],
        {"note": "a distill fine-tuned from Llama-3.3-70B-Instruct"},
    ),
]

# AWQ and GPTQ checkpoints (alias, its 16-bit original, format, sources): refused when planned,
# since the estimator models bitsandbytes 4-bit only.
REFUSED: list[tuple[str, str, str, list[str]]] = [
    (
        "casperhansen/llama-3-8b-instruct-awq",
        "meta-llama/Meta-Llama-3-8B-Instruct",
        "awq",
        ["public vLLM deployment configs serve it with --quantization awq"],
    ),
]

# unsloth/models/mapper.py __INT_TO_FLOAT_MAPPER rows (4-bit repo: its 16-bit repos and the
# original, in the mapper's order; FP8 variants left out), for the catalogue's models only.
UNSLOTH_ROWS: list[tuple[str, tuple[str, ...]]] = [
    ("unsloth/mistral-7b-bnb-4bit", ("unsloth/mistral-7b", "mistralai/Mistral-7B-v0.1")),
    ("unsloth/llama-2-7b-bnb-4bit", ("unsloth/llama-2-7b", "meta-llama/Llama-2-7b-hf")),
    (
        "unsloth/mistral-7b-instruct-v0.1-bnb-4bit",
        ("unsloth/mistral-7b-instruct-v0.1", "mistralai/Mistral-7B-Instruct-v0.1"),
    ),
    (
        "unsloth/mistral-7b-instruct-v0.2-bnb-4bit",
        ("unsloth/mistral-7b-instruct-v0.2", "mistralai/Mistral-7B-Instruct-v0.2"),
    ),
    (
        "unsloth/llama-2-7b-chat-bnb-4bit",
        ("unsloth/llama-2-7b-chat", "meta-llama/Llama-2-7b-chat-hf"),
    ),
    (
        "unsloth/Mixtral-8x7B-v0.1-unsloth-bnb-4bit",
        (
            "unsloth/Mixtral-8x7B-v0.1",
            "mistralai/Mixtral-8x7B-v0.1",
            "unsloth/Mixtral-8x7B-v0.1-bnb-4bit",
        ),
    ),
    (
        "unsloth/Mixtral-8x7B-Instruct-v0.1-unsloth-bnb-4bit",
        (
            "unsloth/Mixtral-8x7B-Instruct-v0.1",
            "mistralai/Mixtral-8x7B-Instruct-v0.1",
            "unsloth/Mixtral-8x7B-Instruct-v0.1-bnb-4bit",
        ),
    ),
    ("unsloth/llama-3-8b-bnb-4bit", ("unsloth/llama-3-8b", "meta-llama/Meta-Llama-3-8B")),
    (
        "unsloth/Phi-3-mini-4k-instruct-bnb-4bit",
        ("unsloth/Phi-3-mini-4k-instruct", "microsoft/Phi-3-mini-4k-instruct"),
    ),
    ("unsloth/mistral-7b-v0.3-bnb-4bit", ("unsloth/mistral-7b-v0.3", "mistralai/Mistral-7B-v0.3")),
    (
        "unsloth/mistral-7b-instruct-v0.3-bnb-4bit",
        ("unsloth/mistral-7b-instruct-v0.3", "mistralai/Mistral-7B-Instruct-v0.3"),
    ),
    ("unsloth/gemma-2-9b-bnb-4bit", ("unsloth/gemma-2-9b", "google/gemma-2-9b")),
    ("unsloth/gemma-2-27b-bnb-4bit", ("unsloth/gemma-2-27b", "google/gemma-2-27b")),
    ("unsloth/gemma-2-9b-it-bnb-4bit", ("unsloth/gemma-2-9b-it", "google/gemma-2-9b-it")),
    ("unsloth/gemma-2-27b-it-bnb-4bit", ("unsloth/gemma-2-27b-it", "google/gemma-2-27b-it")),
    (
        "unsloth/Mistral-Nemo-Base-2407-bnb-4bit",
        ("unsloth/Mistral-Nemo-Base-2407", "mistralai/Mistral-Nemo-Base-2407"),
    ),
    (
        "unsloth/Meta-Llama-3.1-8B-unsloth-bnb-4bit",
        (
            "unsloth/Meta-Llama-3.1-8B",
            "meta-llama/Meta-Llama-3.1-8B",
            "unsloth/Meta-Llama-3.1-8B-bnb-4bit",
        ),
    ),
    (
        "unsloth/Meta-Llama-3.1-8B-Instruct-unsloth-bnb-4bit",
        (
            "unsloth/Meta-Llama-3.1-8B-Instruct",
            "meta-llama/Meta-Llama-3.1-8B-Instruct",
            "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit",
        ),
    ),
    (
        "unsloth/Llama-3.1-8B-unsloth-bnb-4bit",
        ("unsloth/Llama-3.1-8B", "meta-llama/Llama-3.1-8B", "unsloth/Llama-3.1-8B-bnb-4bit"),
    ),
    (
        "unsloth/Llama-3.1-8B-Instruct-unsloth-bnb-4bit",
        (
            "unsloth/Llama-3.1-8B-Instruct",
            "meta-llama/Llama-3.1-8B-Instruct",
            "unsloth/Llama-3.1-8B-Instruct-bnb-4bit",
        ),
    ),
    (
        "unsloth/Meta-Llama-3.1-70B-bnb-4bit",
        ("unsloth/Meta-Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B"),
    ),
    (
        "unsloth/Meta-Llama-3.1-70B-Instruct-bnb-4bit",
        ("unsloth/Meta-Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B-Instruct"),
    ),
    ("unsloth/gemma-2-2b-bnb-4bit", ("unsloth/gemma-2-2b", "google/gemma-2-2b")),
    ("unsloth/gemma-2-2b-it-bnb-4bit", ("unsloth/gemma-2-2b-it", "google/gemma-2-2b-it")),
    (
        "unsloth/Phi-3.5-mini-instruct-bnb-4bit",
        ("unsloth/Phi-3.5-mini-instruct", "microsoft/Phi-3.5-mini-instruct"),
    ),
    (
        "unsloth/Qwen2.5-0.5B-Instruct-unsloth-bnb-4bit",
        (
            "unsloth/Qwen2.5-0.5B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "unsloth/Qwen2.5-0.5B-Instruct-bnb-4bit",
        ),
    ),
    (
        "unsloth/Qwen2.5-1.5B-Instruct-unsloth-bnb-4bit",
        (
            "unsloth/Qwen2.5-1.5B-Instruct",
            "Qwen/Qwen2.5-1.5B-Instruct",
            "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit",
        ),
    ),
    (
        "unsloth/Qwen2.5-3B-Instruct-unsloth-bnb-4bit",
        (
            "unsloth/Qwen2.5-3B-Instruct",
            "Qwen/Qwen2.5-3B-Instruct",
            "unsloth/Qwen2.5-3B-Instruct-bnb-4bit",
        ),
    ),
    (
        "unsloth/Qwen2.5-7B-Instruct-unsloth-bnb-4bit",
        (
            "unsloth/Qwen2.5-7B-Instruct",
            "Qwen/Qwen2.5-7B-Instruct",
            "unsloth/Qwen2.5-7B-Instruct-bnb-4bit",
        ),
    ),
    (
        "unsloth/Qwen2.5-0.5B-unsloth-bnb-4bit",
        ("unsloth/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B", "unsloth/Qwen2.5-0.5B-bnb-4bit"),
    ),
    (
        "unsloth/Qwen2.5-1.5B-unsloth-bnb-4bit",
        ("unsloth/Qwen2.5-1.5B", "Qwen/Qwen2.5-1.5B", "unsloth/Qwen2.5-1.5B-bnb-4bit"),
    ),
    (
        "unsloth/Qwen2.5-3B-unsloth-bnb-4bit",
        ("unsloth/Qwen2.5-3B", "Qwen/Qwen2.5-3B", "unsloth/Qwen2.5-3B-bnb-4bit"),
    ),
    (
        "unsloth/Qwen2.5-7B-unsloth-bnb-4bit",
        ("unsloth/Qwen2.5-7B", "Qwen/Qwen2.5-7B", "unsloth/Qwen2.5-7B-bnb-4bit"),
    ),
    (
        "unsloth/Qwen2.5-14B-unsloth-bnb-4bit",
        ("unsloth/Qwen2.5-14B", "Qwen/Qwen2.5-14B", "unsloth/Qwen2.5-14B-bnb-4bit"),
    ),
    ("unsloth/Qwen2.5-32B-bnb-4bit", ("unsloth/Qwen2.5-32B", "Qwen/Qwen2.5-32B")),
    ("unsloth/Qwen2.5-72B-bnb-4bit", ("unsloth/Qwen2.5-72B", "Qwen/Qwen2.5-72B")),
    (
        "unsloth/Llama-3.2-1B-unsloth-bnb-4bit",
        ("unsloth/Llama-3.2-1B", "meta-llama/Llama-3.2-1B", "unsloth/Llama-3.2-1B-bnb-4bit"),
    ),
    (
        "unsloth/Llama-3.2-3B-unsloth-bnb-4bit",
        ("unsloth/Llama-3.2-3B", "meta-llama/Llama-3.2-3B", "unsloth/Llama-3.2-3B-bnb-4bit"),
    ),
    (
        "unsloth/Llama-3.2-1B-Instruct-unsloth-bnb-4bit",
        (
            "unsloth/Llama-3.2-1B-Instruct",
            "meta-llama/Llama-3.2-1B-Instruct",
            "unsloth/Llama-3.2-1B-Instruct-bnb-4bit",
        ),
    ),
    (
        "unsloth/Llama-3.2-3B-Instruct-unsloth-bnb-4bit",
        (
            "unsloth/Llama-3.2-3B-Instruct",
            "meta-llama/Llama-3.2-3B-Instruct",
            "unsloth/Llama-3.2-3B-Instruct-bnb-4bit",
        ),
    ),
    (
        "unsloth/Llama-3.3-70B-Instruct-unsloth-bnb-4bit",
        (
            "unsloth/Llama-3.3-70B-Instruct",
            "meta-llama/Llama-3.3-70B-Instruct",
            "unsloth/Llama-3.3-70B-Instruct-bnb-4bit",
        ),
    ),
    (
        "unsloth/phi-4-unsloth-bnb-4bit",
        ("unsloth/phi-4", "microsoft/phi-4", "unsloth/phi-4-bnb-4bit"),
    ),
    (
        "unsloth/DeepSeek-R1-Distill-Qwen-32B-bnb-4bit",
        ("unsloth/DeepSeek-R1-Distill-Qwen-32B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"),
    ),
    (
        "unsloth/DeepSeek-R1-Distill-Qwen-7B-unsloth-bnb-4bit",
        (
            "unsloth/DeepSeek-R1-Distill-Qwen-7B",
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
            "unsloth/DeepSeek-R1-Distill-Qwen-7B-bnb-4bit",
        ),
    ),
    (
        "unsloth/DeepSeek-R1-Distill-Qwen-1.5B-unsloth-bnb-4bit",
        (
            "unsloth/DeepSeek-R1-Distill-Qwen-1.5B",
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
            "unsloth/DeepSeek-R1-Distill-Qwen-1.5B-bnb-4bit",
        ),
    ),
    (
        "unsloth/DeepSeek-R1-Distill-Llama-8B-unsloth-bnb-4bit",
        (
            "unsloth/DeepSeek-R1-Distill-Llama-8B",
            "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
            "unsloth/DeepSeek-R1-Distill-Llama-8B-bnb-4bit",
        ),
    ),
    (
        "unsloth/gemma-3-1b-it-unsloth-bnb-4bit",
        ("unsloth/gemma-3-1b-it", "google/gemma-3-1b-it", "unsloth/gemma-3-1b-it-bnb-4bit"),
    ),
    (
        "unsloth/gemma-3-4b-it-unsloth-bnb-4bit",
        ("unsloth/gemma-3-4b-it", "google/gemma-3-4b-it", "unsloth/gemma-3-4b-it-bnb-4bit"),
    ),
    (
        "unsloth/gemma-3-12b-it-unsloth-bnb-4bit",
        ("unsloth/gemma-3-12b-it", "google/gemma-3-12b-it", "unsloth/gemma-3-12b-it-bnb-4bit"),
    ),
    (
        "unsloth/gemma-3-27b-it-unsloth-bnb-4bit",
        ("unsloth/gemma-3-27b-it", "google/gemma-3-27b-it", "unsloth/gemma-3-27b-it-bnb-4bit"),
    ),
    (
        "unsloth/Qwen3-0.6B-unsloth-bnb-4bit",
        ("unsloth/Qwen3-0.6B", "Qwen/Qwen3-0.6B", "unsloth/Qwen3-0.6B-bnb-4bit"),
    ),
    (
        "unsloth/Qwen3-1.7B-unsloth-bnb-4bit",
        ("unsloth/Qwen3-1.7B", "Qwen/Qwen3-1.7B", "unsloth/Qwen3-1.7B-bnb-4bit"),
    ),
    (
        "unsloth/Qwen3-4B-unsloth-bnb-4bit",
        ("unsloth/Qwen3-4B", "Qwen/Qwen3-4B", "unsloth/Qwen3-4B-bnb-4bit"),
    ),
    (
        "unsloth/Qwen3-8B-unsloth-bnb-4bit",
        ("unsloth/Qwen3-8B", "Qwen/Qwen3-8B", "unsloth/Qwen3-8B-bnb-4bit"),
    ),
    (
        "unsloth/Qwen3-14B-unsloth-bnb-4bit",
        ("unsloth/Qwen3-14B", "Qwen/Qwen3-14B", "unsloth/Qwen3-14B-bnb-4bit"),
    ),
    (
        "unsloth/Qwen3-32B-unsloth-bnb-4bit",
        ("unsloth/Qwen3-32B", "Qwen/Qwen3-32B", "unsloth/Qwen3-32B-bnb-4bit"),
    ),
    (
        "unsloth/Qwen3-30B-A3B-unsloth-bnb-4bit",
        ("unsloth/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", "unsloth/Qwen3-30B-A3B-bnb-4bit"),
    ),
    (
        "unsloth/phi-4-reasoning-unsloth-bnb-4bit",
        (
            "unsloth/phi-4-reasoning",
            "microsoft/Phi-4-reasoning",
            "unsloth/phi-4-reasoning-bnb-4bit",
        ),
    ),
    (
        "unsloth/Phi-3-medium-4k-instruct-bnb-4bit",
        ("unsloth/Phi-3-medium-4k-instruct", "microsoft/Phi-3-medium-4k-instruct"),
    ),
    (
        "unsloth/Phi-4-mini-instruct-unsloth-bnb-4bit",
        (
            "unsloth/Phi-4-mini-instruct",
            "microsoft/Phi-4-mini-instruct",
            "unsloth/Phi-4-mini-instruct-bnb-4bit",
        ),
    ),
    (
        "unsloth/Mistral-Small-24B-Instruct-2501-unsloth-bnb-4bit",
        (
            "unsloth/Mistral-Small-24B-Instruct-2501",
            "mistralai/Mistral-Small-24B-Instruct-2501",
            "unsloth/Mistral-Small-24B-Instruct-2501-bnb-4bit",
        ),
    ),
    (
        "unsloth/gpt-oss-20b-unsloth-bnb-4bit",
        ("unsloth/gpt-oss-20b", "openai/gpt-oss-20b", "unsloth/gpt-oss-20b-unsloth-bnb-4bit"),
    ),
]
