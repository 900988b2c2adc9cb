"""The plan's field declarations and the method records: checks at the boundary, and an
unknown method is an error everywhere, never a silent full fine-tune."""

from __future__ import annotations

import math

import pytest

from trainmem.core import PlanError, estimate, spec_from_count
from trainmem.core.methods import METHOD_RECORDS, method_record
from trainmem.core.plan import PLAN_FIELDS, Plan
from trainmem.core.precision import dtypes
from trainmem.core.rule_of_thumb import rule_of_thumb_bytes
from trainmem.core.states import model_states

SPEC = spec_from_count(1_000_000_000, "1B")
UNKNOWN = Plan(method="dora")  # not validated: what a caller skipping validation would pass


@pytest.mark.parametrize(
    "use",
    [
        lambda: rule_of_thumb_bytes(SPEC.params, UNKNOWN),
        lambda: model_states(SPEC, UNKNOWN, dtypes(Plan())),
        lambda: dtypes(UNKNOWN),
        lambda: estimate(UNKNOWN, SPEC),
        lambda: UNKNOWN.validated(),
        lambda: method_record("dora"),
    ],
)
def test_an_unknown_method_is_an_error_everywhere(use):
    with pytest.raises(PlanError, match="method"):
        use()


def test_each_method_record_drives_the_rule_of_thumb():
    """The rule comes from the record: the guide's coefficients, master copy for fp32."""
    billion = 1_000_000_000
    assert rule_of_thumb_bytes(billion, Plan(method="lora")) == 5 * 10**9
    assert rule_of_thumb_bytes(billion, Plan(method="full")) == 16 * 10**9
    assert rule_of_thumb_bytes(billion, Plan(method="full", precision="fp32")) == 20 * 10**9
    assert rule_of_thumb_bytes(billion, Plan(method="qlora")) == round(4.1 * 10**9)
    assert set(METHOD_RECORDS) == {"full", "lora", "qlora"}
    assert [m.name for m in METHOD_RECORDS.values() if m.quantized_base] == ["qlora"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lora_alpha", math.nan, "not a finite number"),
        ("lora_alpha", math.inf, "not a finite number"),
        ("lora_alpha", 0, "is not above 0 and at most"),
        ("lora_dropout", 1.0, "outside 0..0.99"),
        ("seq_len", 2.5, "not a whole number"),
        ("batch", True, "not a number"),
        ("grad_ckpt", "yes", "not true or false"),
        ("model", 5, "not text"),
        ("zero", "3", "not one of 0, 1, 2, 3"),
        ("device", None, "not text"),
    ],
)
def test_every_field_is_checked_against_its_declaration(field, value, message):
    with pytest.raises(PlanError) as info:
        Plan(**{field: value}).validated()
    assert info.value.field == field and message in info.value.message


def test_declarations_cover_every_field_once():
    names = [s.name for s in PLAN_FIELDS]
    assert len(names) == len(set(names)) and names[0] == "model"
    assert all(s.label and s.help for s in PLAN_FIELDS)
    assert all(s.kind != "choice" or s.default in s.choices for s in PLAN_FIELDS)


def test_fields_that_do_not_apply_are_named_in_the_notes():
    est = estimate(Plan(method="full", lora_rank=64, kbit_prep=False), SPEC)
    assert any("lora_rank, kbit_prep do not apply" in n for n in est.notes)
    assert (
        estimate(Plan(method="full", lora_rank=64), SPEC).allocated_bytes
        == estimate(Plan(method="full"), SPEC).allocated_bytes
    )


def test_nf4_without_double_quantization_keeps_an_fp32_absmax_per_block():
    """bitsandbytes quantize_4bit, blocksize 64: 0.5 byte + 4/64 (fp32 absmax) per weight;
    nested quantization stores a uint8 absmax per block and an fp32 one per 256 blocks."""
    spec = spec_from_count(8_000_000_000, "8B")
    plan = Plan(method="qlora")
    q = spec.layers * spec.layer_weight_elements
    dq = estimate(plan, spec).component("weights")
    plain = estimate(Plan(method="qlora", double_quant=False), spec).component("weights")
    assert plain - dq == round(q * (0.5 + 4 / 64)) - round(q * (0.5 + 1 / 64 + 4 / 16384))
    assert estimate(Plan(method="lora", double_quant=False), spec).component("weights") == estimate(
        Plan(method="lora"), spec
    ).component("weights")  # no quantized base
