"""A bitsandbytes 4-bit load and its CUDA matmul, as shapes only, for fake-tensor traces.

bitsandbytes keeps a 4-bit weight in ``Params4bit``, a tensor subclass
(``torch.Tensor._make_subclass``) that cannot wrap a FakeTensor, so a QLoRA model cannot be
loaded under FakeTensorMode as ``from_pretrained`` loads it. Here the load runs the same code
up to that wrapper: transformers' own bitsandbytes quantizer turns the model's linears into
``bnb.nn.Linear4bit`` (transformers 5.25 quantizers/quantizer_bnb_4bit.py
_process_model_before_weight_loading, integrations/bitsandbytes.py replace_with_bnb_linear),
and each weight is quantized by ``bitsandbytes.functional.quantize_4bit`` with the settings
that wrapper holds, as ``Params4bit._quantize`` does (bitsandbytes 0.50.2 nn/modules.py:381-394),
on the fake weight: its packed storage and quantization state come out as fake tensors of the
real sizes. The packed weight then sits in a plain (fake) Parameter carrying the wrapper's
attributes, which is all ``Linear4bit.forward``, PEFT's 4-bit LoRA layer and
``prepare_model_for_kbit_training`` read of it.

The matmul: under FakeTensorMode bitsandbytes' ``gemm_4bit`` op runs its fake kernel, which
allocates only the output. On CUDA (backends/cuda/ops.py:934-978) the op takes
``_dequant_linear_fallback`` (:904-916): the nested absmax dequantized to fp32 and offset (two
tensors), the weight dequantized to the compute dtype, then ``F.linear``; or a custom kernel
that allocates only the output. The custom kernel is always taken at 4 rows (tokens) or fewer
(``_GEMM_4BIT_CUSTOM_FLOOR_M``); above that only for some shapes on some GPUs
(``_gemm_4bit_use_custom_cuda``: for a decoder's large weights up to 5-64 rows on an A100 or
H100, for small weights up to 1,536). A training micro-batch has more rows than that in all but
toy plans, so ``cuda_gemm_4bit`` takes the fallback above 4 rows and allocates what it
allocates; the backward's ``dequantize_4bit`` is bitsandbytes' own Python, traced as it is.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from trainmem.core.errors import PlanError

CUSTOM_MAX_ROWS = 4  # backends/cuda/ops.py _GEMM_4BIT_CUSTOM_FLOOR_M: the custom kernel always
QUANTS = ("nf4", "fp4")  # the 4-bit formats loaded here (LLM.int8 is Linear8bitLt's)


def _bnb() -> Any:
    try:
        return importlib.import_module("bitsandbytes")
    except ImportError:
        raise PlanError("trace", "a QLoRA trace needs bitsandbytes installed") from None


def check_quant(quant: str) -> None:
    """One line for a format this load cannot make."""
    if quant not in QUANTS:
        raise PlanError("trace", f"quant {quant} is not traced (nf4 and fp4 are)")


def quant_state_tensors(params: Iterable[Any]) -> list[Any]:
    """The tensors of the 4-bit weights' quantization states among ``params`` (absmax, code,
    offset, and the nested state's): part of the loaded model, but no parameter or buffer."""
    out: list[Any] = []
    for param in params:
        state = getattr(param, "quant_state", None)
        while state is not None:
            out += [t for t in (state.absmax, state.code, state.offset) if t is not None]
            state = state.state2
    return out


def load_4bit(torch: Any, transformers: Any, model: Any, quant: str, double_quant: bool) -> None:
    """Quantize ``model`` (built in bf16 under the active FakeTensorMode) in place to
    ``quant`` (nf4 or fp4, bf16 compute, as QLoRA recipes load it): the modules bitsandbytes
    replaces, their weights packed as fake tensors."""
    bnb = _bnb()
    fake_tensor = importlib.import_module("torch._subclasses.fake_tensor")
    check_quant(quant)
    config = transformers.BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=quant,
        bnb_4bit_use_double_quant=double_quant,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    auto = importlib.import_module("transformers.quantizers.auto")
    quantizer = auto.AutoHfQuantizer.from_config(config, pre_quantized=False)
    originals = {n: m for n, m in model.named_modules() if type(m) is torch.nn.Linear}
    # Linear4bit's constructor wraps a new meta weight in Params4bit: outside the fake mode
    with fake_tensor.unset_fake_temporarily():
        quantizer.preprocess_model(model, device_map=None)
    for name, module in model.named_modules():
        if not isinstance(module, bnb.nn.Linear4bit):
            continue
        meta = module.weight  # the Params4bit replace_with_bnb_linear made, with its settings
        original = originals[name]
        if original.bias is not None:  # loaded as it is, in the model's dtype
            module._parameters["bias"] = original.bias
        packed, state = bnb.functional.quantize_4bit(
            original.weight.data,
            blocksize=meta.blocksize,
            compress_statistics=meta.compress_statistics,
            quant_type=meta.quant_type,
            quant_storage=meta.quant_storage,
        )
        # uint8 storage (BitsAndBytesConfig's default bnb_4bit_quant_storage): not a float, so
        # prepare_model_for_kbit_training, which spares Params4bit by class name, casts none
        weight = torch.nn.Parameter(packed, requires_grad=False)
        for key in ("blocksize", "compress_statistics", "quant_type", "quant_storage"):
            setattr(weight, key, getattr(meta, key))
        weight.quant_state, weight.bnb_quantized, weight.module = state, True, module
        module._parameters["weight"] = weight
        module.quant_state = state
    del originals
    quantizer.postprocess_model(model)
    model.hf_quantizer = quantizer


@contextlib.contextmanager
def fake_dynamic_map(torch: Any) -> Iterator[None]:
    """Nested quantization's 8-bit code: bitsandbytes builds it from Python numbers on first
    use (functional.py create_dynamic_map), which a fake tensor cannot hold; its 256 floats
    stand in as a fake tensor while the trace runs, and the cache is restored after."""
    functional = _bnb().functional
    saved = functional.name2qmap.get("dynamic")
    try:
        functional.name2qmap["dynamic"] = torch.empty(256, dtype=torch.float32)
        yield
    finally:
        functional.name2qmap.pop("dynamic", None)
        if saved is not None:
            functional.name2qmap["dynamic"] = saved


def cuda_gemm_4bit(torch: Any) -> Callable[..., Any]:
    """``bitsandbytes::gemm_4bit`` as the CUDA backend allocates it (see the module's text)."""

    def gemm_4bit(
        A: Any,
        B: Any,
        shapeB: Any,
        absmax: Any,
        blocksize: int,
        quant_type: str,
        bias: Any = None,
        absmax_8bit: Any = None,
        absmax_code: Any = None,
        absmax_offset: Any = None,
    ) -> Any:
        rows = A.numel() // A.shape[-1]
        if rows <= CUSTOM_MAX_ROWS:  # the custom kernel: the output only
            return torch.empty((*A.shape[:-1], shapeB[0]), dtype=A.dtype, device=A.device)
        if absmax_8bit is not None:  # the nested absmax, both alive until it returns
            absmax_dq = torch.empty_like(absmax_8bit, dtype=torch.float32)
            _absmax = absmax_dq + absmax_offset
        dequantized = torch.empty(tuple(shapeB), dtype=A.dtype, device=A.device)
        return torch.nn.functional.linear(A, dequantized, bias)

    return gemm_4bit


@contextlib.contextmanager
def matmul(torch: Any, device: str) -> Iterator[None]:
    """While tracing, ``torch.ops.bitsandbytes.gemm_4bit`` (looked up by bitsandbytes'
    MatMul4Bit and matmul_4bit at each call) allocates as on ``device``: "cuda" (see the
    module's text) or "cpu", bitsandbytes' own default kernel (backends/default/ops.py
    _gemm_4bit_default_impl: the absmax, then the weight, dequantized by ops whose fake
    kernels allocate their outputs; then F.linear); restored after."""
    _bnb()  # installed, or one line
    if device == "cuda":
        impl = cuda_gemm_4bit(torch)
    else:
        impl = importlib.import_module("bitsandbytes.backends.default.ops")._gemm_4bit_default_impl
    shim = type("gemm_4bit", (), {"default": staticmethod(impl)})  # as op.default is called
    namespace = torch.ops.bitsandbytes
    saved = namespace.__dict__.get("gemm_4bit")
    namespace.gemm_4bit = shim
    try:
        yield
    finally:
        if saved is None:
            del namespace.gemm_4bit
        else:
            namespace.gemm_4bit = saved
