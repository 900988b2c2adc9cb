"""The unsloth stack, hand-computed from Unsloth's source (unslothai/unsloth 015bdef,
unslothai/unsloth-zoo ce232d6; files named beside each figure), then checked against
Unsloth's own published maximum contexts.

Unsloth needs a GPU, so nothing here is measured: the record is derived from source.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from accuracy import published
from test_components import FF, HD, HEADS, KV, SPEC_CONFIG, H

from trainmem.core.activations import layer_activations, unsloth_lora_paths
from trainmem.core.architecture import spec_from_config
from trainmem.core.estimator import estimate
from trainmem.core.fit import Budget
from trainmem.core.losses import loss_head, unsloth_ce_chunks
from trainmem.core.offload import UNSLOTH_CPU_BUFFER_ELEMENTS, UNSLOTH_CPU_BUFFERS
from trainmem.core.plan import Plan
from trainmem.core.precision import dtypes
from trainmem.core.states import NF4_BYTES_PER_PARAM, model_states
from trainmem.core.whatif import advice

LAYERS = 6
V = 1000
SPEC = spec_from_config({**SPEC_CONFIG, "num_hidden_layers": LAYERS}, "tiny")
QD, KVD = HEADS * HD, KV * HD


def plan(**kw: object) -> Plan:
    base: dict[str, object] = dict(
        model="tiny", method="qlora", stack="unsloth", precision="bf16-mixed", lora_rank=8
    )
    return Plan(**{**base, **kw}).validated()  # type: ignore[arg-type]


# ------------------------------------------------------------- the record itself
def test_unsloth_reuses_trl_and_changes_what_its_source_changes():
    p = plan()
    stack = p.tooling
    assert stack.keeps_output is False  # TRL's SFTTrainer (Trainer.compute_loss) underneath
    assert p.loss_kind == "fused" and stack.fused_loss == "unsloth"
    assert stack.reentrant_ckpt  # unsloth_checkpoint forces use_reentrant=True
    # no PEFT fp32 upcast of the quantized model, no TRL bf16 cast of its adapters
    dt = dtypes(p)
    assert (dt.resid, dt.act, dt.trainable) == (2, 2, 4)
    # a Trainer script's PEFT prepare_model_for_kbit_training upcasts; TRL 1.16 runs none
    assert dtypes(replace(p, stack="trainer")).resid == 4
    assert dtypes(replace(p, stack="trl")).resid == 2


# ----------------------------------------------- checkpoint offload ("unsloth")
TOKENS = 4 * 2048  # batch 4 x 2048: 2.1M elements per input, over Unsloth's 2 MiB floor
ONE = TOKENS * H * 2  # one layer's bf16 input


def _phases(**kw: object) -> dict[str, int]:
    return estimate(plan(batch=4, seq_len=2048, grad_ckpt=True, **kw), SPEC).phases


def test_offload_keeps_the_first_and_last_inputs_and_the_reload_buffer_on_the_gpu():
    on, off = _phases(ckpt_offload=True), _phases(ckpt_offload=False)
    # without offload every layer's input stays; with it the last layer's, the buffer and
    # the first layer's (the frozen embedding's output, a leaf its checkpoint node keeps)
    assert off["forward"] - on["forward"] == (LAYERS - 3) * ONE
    assert off["backward (last layer)"] - on["backward (last layer)"] == (LAYERS - 3) * ONE
    # at the first layer the buffer holds a copy of the input the leaf still is
    assert on["backward (first layer)"] - off["backward (first layer)"] == ONE
    # at the embedding the leaf and its gradient, where plain checkpointing has dropped both
    assert on["backward (embedding)"] - off["backward (embedding)"] == 2 * ONE + ONE


def test_a_trained_embedding_output_is_no_leaf_and_is_offloaded():
    on = _phases(ckpt_offload=True, modules_to_save="embed_tokens", method="lora")
    off = _phases(ckpt_offload=False, modules_to_save="embed_tokens", method="lora")
    assert off["forward"] - on["forward"] == (LAYERS - 2) * ONE


def test_torchs_save_on_cpu_keeps_only_the_frozen_embeddings_output_on_the_gpu():
    torch_kind = estimate(
        plan(batch=4, seq_len=2048, grad_ckpt=True, ckpt_offload=True, stack="trl"), SPEC
    )
    trl_no_offload = estimate(plan(batch=4, seq_len=2048, grad_ckpt=True, stack="trl"), SPEC)
    # save_on_cpu: every input leaves but the first, the embedding's output, a leaf the graph
    # keeps (the trl stack differs in dtypes, so compare within it: bf16 inputs, as TRL runs
    # no k-bit preparation)
    assert (
        trl_no_offload.phases["forward"] - torch_kind.phases["forward"]
        == (LAYERS - 1) * TOKENS * H * 2
    )


def test_offload_host_ram_is_every_layers_pinned_buffer_and_the_initial_pool():
    est = estimate(plan(batch=4, seq_len=2048, grad_ckpt=True, ckpt_offload=True), SPEC)
    pool = (UNSLOTH_CPU_BUFFERS - LAYERS) * UNSLOTH_CPU_BUFFER_ELEMENTS * 2
    assert est.host_offloaded_bytes >= LAYERS * ONE  # reused by the node's RAM figure
    assert est.host_bytes_per_node >= LAYERS * ONE + pool


def test_below_512_tokens_unsloth_checkpoints_without_offload():
    short = dict(batch=64, seq_len=256, grad_ckpt=True)  # 16,384 tokens, but seq < 512
    on = estimate(plan(ckpt_offload=True, **short), SPEC)
    off = estimate(plan(ckpt_offload=False, **short), SPEC)
    assert on.phases == off.phases and on.host_offloaded_bytes == 0


# --------------------------------------------------------------- the fused loss
def test_fused_loss_never_builds_the_logits():
    tokens = 2**21  # fp32 logits 8.4 GB: over the 4 GiB chunk target
    p = plan(batch=1, seq_len=tokens, grad_ckpt=True)
    # get_chunk_size: ceil(8.39e9 / 4 GiB / 4) * 4 = 4 chunks of 524,288 tokens
    assert unsloth_ce_chunks(tokens, V) == 4
    chunk = tokens // 4
    head = loss_head(SPEC, p, dtypes(p))
    # one chunk's bf16 logits and their bf16 gradient, its grad_input, the int64 labels
    assert head.forward == chunk * V * 2 * 2 + chunk * H * 2 + 8 * tokens
    assert head.output == 0  # EMPTY_LOGITS
    # saved: the final RMSNorm's X and inverse RMS, and grad_inputs made in forward
    assert head.saved == tokens * (2 * H + 4 + 2 * H)
    assert head.backward == tokens * H * 2  # grad_inputs * scale_factor, out of place
    assert head.forward < tokens * V * 2  # less than the bf16 logits alone


def test_fused_loss_is_one_chunk_when_the_logits_fit_the_target():
    assert unsloth_ce_chunks(1000, 128_256) == 1  # 0.5 GB of fp32 logits
    assert unsloth_ce_chunks(9000, 128_256) == 4  # 4.6 GB: 1.07 -> rounded up to 4


# -------------------------------------------------------- the fused LoRA kernels
def test_fused_lora_saves_what_fast_lora_saves():
    p = plan(attn="flash-attention-2")
    layer = layer_activations(SPEC, p, dtypes(p))
    assert unsloth_lora_paths(SPEC, p) == type(unsloth_lora_paths(SPEC, p))(True, True, True)
    norms = 2 * 4 + 2 * H  # inverse RMS per row twice; the second norm's X
    qkv = 2 * H  # LoRA_QKV: X once for q, k, v
    attention = 2 * (QD + 2 * KVD) + 2 * QD + 4 * HEADS  # flash: q, k, v, out, lse
    mlp = 2 * H + 2 * FF + 2 * FF  # LoRA_MLP: X, e, g; LoRA_W on o saves the attn output
    assert layer.saved == norms + qkv + attention + mlp
    assert layer.input_kept == 2 * H  # the first norm's X is the layer's own input
    assert layer.backward_transient == 2 * 2 * H + 2 * FF  # DW = dY @ W_down^T


def test_xformers_repeats_kv_to_every_head():
    flash = layer_activations(SPEC, plan(attn="flash-attention-2"), dtypes(plan()))
    xformers = layer_activations(SPEC, plan(), dtypes(plan()))
    assert xformers.saved - flash.saved == 2 * 2 * (QD - KVD)


def test_a_bias_or_dropout_keeps_peft_on_that_projection():
    qwen2 = spec_from_config({**SPEC_CONFIG, "model_type": "qwen2"}, "q")  # q/k/v biases
    paths = unsloth_lora_paths(qwen2, plan())
    assert (paths.qkv, paths.o, paths.mlp) == (False, True, True)
    assert unsloth_lora_paths(SPEC, plan(lora_dropout=0.1)) == type(paths)()
    # only the projections Unsloth patches change: the TRL record counts the rest the same
    peft = layer_activations(SPEC, plan(lora_dropout=0.1), dtypes(plan(lora_dropout=0.1)))
    fast = layer_activations(SPEC, plan(), dtypes(plan()))
    assert fast.saved < peft.saved


# ------------------------------------------------------------ dynamic 4-bit
def test_dynamic_4bit_layers_are_counted_at_16_bit():
    skip = ["lm_head", "model.layers.0.mlp", "model.layers.1.self_attn.o_proj"]
    cfg = {**SPEC_CONFIG, "num_hidden_layers": LAYERS}
    dynamic = spec_from_config(
        {**cfg, "quantization_config": {"llm_int8_skip_modules": skip}}, "dyn"
    )
    kept = 3 * H * FF + QD * H  # layer 0's gate, up, down; layer 1's o_proj
    assert dynamic.unquantized_elements == kept
    p = plan()
    linear = LAYERS * SPEC.layer_weight_elements
    nf4 = round((linear - kept) * NF4_BYTES_PER_PARAM)
    bf16 = (dynamic.params - (linear - kept)) * 2  # embeddings, lm_head, norms, kept linears
    assert model_states(dynamic, p, dtypes(p)).weights == nf4 + bf16
    # a name matches at a module boundary: layer 1 is not layer 10
    ten = spec_from_config(
        {
            **SPEC_CONFIG,
            "num_hidden_layers": 11,
            "quantization_config": {"llm_int8_skip_modules": ["model.layers.1"]},
        },
        "ten",
    )
    per_layer = SPEC.layer_weight_elements
    assert ten.unquantized_elements == per_layer


# ----------------------------------------------------------------- advice
def test_advice_names_unsloths_offload_and_unsloth_for_a_trainer_plan():
    # 16 x 2048 tokens: the inputs offload frees (3 of 6 layers') outgrow a 20 MiB segment
    unsloth = plan(batch=16, seq_len=2048, grad_ckpt=True)
    tight = Budget(estimate(unsloth, SPEC).device_bytes)
    actions = [a.action for a in advice(unsloth, SPEC, tight)]
    assert any('use_gradient_checkpointing="unsloth"' in a for a in actions)
    trainer = plan(batch=4, seq_len=2048, grad_ckpt=True, stack="trainer")
    budget = Budget(estimate(trainer, SPEC).device_bytes)
    assert any("train with Unsloth" in a.action for a in advice(trainer, SPEC, budget))


# ------------------------------------------------- Unsloth's published tables
# The figures, their sources and the plans that reproduce the runs live in
# bench/accuracy/published.py, which docs/accuracy.md (make accuracy) renders too.
PUBLISHED = published.UNSLOTH_CONTEXT
HF_FA2 = published.HF_FA2
_longest, _error = published.longest, published.error


def _unsloth(model: str, gib: int) -> int | None:
    """Today's Unsloth longest sequence, searched once for every test here (and the lines)."""
    return published.unsloth_longest(model, gib)[0]


# The row where the GPU is nearly full at the published context: Unsloth's loss chunks shrink
# to half the free memory while the estimate keeps the 4 GiB cap, and the simulated allocator
# holds cached logits blocks the later, larger requests cannot reuse. (70B on 48 GB, the
# other such row, is searched up from the plan's 2,048 tokens, which fit: +38%.)
TIGHT = {("meta-llama/Llama-3.1-8B-Instruct", 8)}
TIGHT_REASON = "tight row: derived context 47% below the published one (see TIGHT)"
# On 12 GB the context lands on the estimate's line (its per-token cost 15% under the published
# one, its fixed part 1.1 GiB under: docs/accuracy.md): +40%. Judged on the reserve with memory
# to spare it was +6%, where the allocator's cache retry would have run the longer steps.
LINE = {("meta-llama/Llama-3.1-8B-Instruct", 12)}
LINE_REASON = "12 GB: derived context 40.3% above the published one, on the estimate's line"


def _rows(ok: Callable[[tuple[str, int, int, int | None]], bool], reason: str) -> list[Any]:
    return [
        row if ok(row) else pytest.param(*row, marks=pytest.mark.xfail(strict=True, reason=reason))
        for row in PUBLISHED
    ]


@pytest.mark.parametrize(
    ("model", "gib", "unsloth", "hf"),
    [
        row
        if row[:2] not in TIGHT | LINE
        else pytest.param(
            *row,
            marks=pytest.mark.xfail(
                strict=True, reason=TIGHT_REASON if row[:2] in TIGHT else LINE_REASON
            ),
        )
        for row in PUBLISHED
    ],
)
def test_published_context_within_40_percent(model, gib, unsloth, hf):
    assert abs(_error(_unsloth(model, gib), unsloth)) <= 0.40


@pytest.mark.parametrize(
    ("model", "gib", "unsloth", "hf"),
    _rows(
        lambda r: r[3] is None or r[1] != 12,
        "HF + FA2 on 12 GB: 1,594 tokens where 932 were published (+71%)",
    ),
)
def test_hf_context_within_60_percent(model, gib, unsloth, hf):
    if hf is None:
        pytest.skip("HF + FA2 is OOM there")
    assert abs(_error(_longest(HF_FA2, model, gib), hf)) <= 0.60


@pytest.mark.parametrize(
    ("model", "gib", "unsloth", "hf"),
    _rows(
        lambda r: False,  # the target, met on no row yet: a row that meets it fails here
        "derived Unsloth context is 19-40% above the published one where the GPU has room: "
        "the published runs (Dec 2024) ran unsloth 2024.12.3, which costs more per token than "
        "today's source (see the per-token test below), and far below on the tight rows "
        "(see TIGHT)",
    ),
)
def test_published_context_within_10_percent(model, gib, unsloth, hf):
    assert abs(_error(_unsloth(model, gib), unsloth)) <= 0.10


@pytest.mark.parametrize(
    ("model", "gib", "unsloth", "hf"),
    [
        r
        if r[:2] != ("meta-llama/Llama-3.3-70B-Instruct", 80)
        else pytest.param(
            *r,
            marks=pytest.mark.xfail(
                strict=True,
                reason="HF + FA2's context is within 5% of its published one there (the fp32 "
                "residual stream of PEFT's k-bit preparation in tensors of its size, "
                "core/step_events.py), Unsloth's 25% above it (2024.12.3's per-token cost, "
                "below): the ratio carries the latter",
            ),
        )
        for r in PUBLISHED
        if r[1] >= 16
    ],
)
def test_unsloth_over_hf_context_ratio_matches_published(model, gib, unsloth, hf):
    if hf is None:
        pytest.skip("HF + FA2 is OOM there")
    ours = _unsloth(model, gib) / _longest(HF_FA2, model, gib)  # type: ignore[operator]
    assert abs(ours / (unsloth / hf) - 1) <= 0.10


@pytest.mark.parametrize("model", sorted({m for m, *_ in PUBLISHED}))
def test_the_published_versions_cost_per_token_is_within_10_percent(model):
    """The published tables are lines (tokens against GiB). With the differences of unsloth
    2024.12.3, the version that ran them (published.as_unsloth_2024_12, each read from that
    source), a token costs within 10% of the published slope, closer than with today's source;
    the published runs hold more before the first token (the runtime: only a GPU can say)."""
    got = published.lines(model)
    (per_token, fixed), (today, _) = got["as 2024.12"], got["ours"]
    published_token, published_fixed = got["published"]
    assert abs(per_token / published_token - 1) <= 0.10
    assert abs(today / published_token - 1) > abs(per_token / published_token - 1)
    assert 0 < published_fixed - fixed < 1.0


@given(
    st.lists(
        st.sampled_from(
            ["model", "layers", "3", "13", "mlp", "self_attn", "q_proj", "down_proj", "lm_head"]
        ),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.text(alphabet="model.ayers13_fqpjdowntihk", max_size=24), max_size=8),
)
@settings(max_examples=300, deadline=None)
def test_a_skip_list_matches_as_transformers_should_convert_module_does(parts, patterns) -> None:
    """skipped_by looks names up by their suffixes and prefixes; the rule it must give is
    should_convert_module's (transformers 5.24 quantizers_utils.py), patterns literal: a
    suffix of the name, or its start up to a module boundary."""
    from trainmem.core.architecture import skipped_by

    name = ".".join(parts)

    def rule(p: str) -> bool:
        if name.endswith(p):
            return True
        return name.startswith(p) and (
            len(name) == len(p) or p.endswith(".") or name[len(p)] == "."
        )

    assert skipped_by(name, frozenset(patterns)) == any(rule(p) for p in patterns)
