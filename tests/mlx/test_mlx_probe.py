"""The MLX probe in a real mlx-lm run: mlx-lm 0.32.2's own train() on a tiny random Llama
with LoRA on its last layer, the callback writing the run log, then run-report's reader
rebuilding the plan from it."""

from __future__ import annotations

import json

import pytest

from trainmem.core.run_log import RUN, STEP
from trainmem.probe.mlx_callback import TrainmemMlxCallback
from trainmem.sources.run_logs import read_run_log, rebuild_plan

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

pytestmark = pytest.mark.mlx
CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "vocab_size": 256,
    "tie_word_embeddings": False,
}


def test_a_real_mlx_lm_run_is_logged_and_read_back(tmp_path) -> None:
    import mlx.optimizers as optim
    import numpy as np
    from mlx_lm.tuner.trainer import TrainingArgs, train
    from mlx_lm.tuner.utils import linear_to_lora_layers
    from mlx_lm.utils import _get_classes

    mx.random.seed(0)
    model_class, args_class = _get_classes(CONFIG)
    model = model_class(args_class.from_dict(CONFIG))
    model.freeze()  # mlx_lm/lora.py train_model()
    linear_to_lora_layers(model, 1, {"rank": 4, "dropout": 0.0, "scale": 20.0})
    rng = np.random.default_rng(0)
    data = [(rng.integers(0, 256, 33).tolist(), 0) for _ in range(8)]  # (tokens, offset)
    log = tmp_path / "run.jsonl"
    callback = TrainmemMlxCallback(str(log), model=model, seq_len=32, mlx_num_layers=1)
    args = TrainingArgs(
        batch_size=2,
        iters=4,
        steps_per_report=2,
        steps_per_eval=1000,
        steps_per_save=1000,
        max_seq_length=33,
        adapter_file=str(tmp_path / "adapters.safetensors"),
    )
    train(model, optim.Adam(learning_rate=1e-4), data, None, args, training_callback=callback)
    callback.close()
    peak = mx.get_peak_memory()

    lines = [json.loads(line) for line in (tmp_path / "run.rank0.jsonl").read_text().splitlines()]
    assert [rec["kind"] for rec in lines] == [RUN, STEP, STEP, "end"]
    run, first, second = lines[0], lines[1], lines[2]
    assert run["device"]["type"] == "cpu" and run["device"]["framework"] == "mlx"
    assert run["peaks"] == "exact" and run["plan"]["stack"] == "mlx"
    assert [first["step"], second["step"]] == [2, 4]  # mlx-lm's iterations, one per report
    for rec in (first, second):
        assert 0 < rec["allocated_bytes"] <= rec["max_allocated_bytes"] <= peak
        assert rec["reserved_bytes"] == rec["allocated_bytes"] + rec["cache_bytes"]
    assert first["max_allocated_bytes"] <= second["max_allocated_bytes"]  # never reset

    read = read_run_log(tmp_path / "run.rank0.jsonl")
    assert read.ended and len(read.steps) == 2 and read.exact_peaks
    rebuilt = rebuild_plan(read)
    assert rebuilt.plan.stack == "mlx"
    assert (rebuilt.plan.seq_len, rebuilt.plan.mlx_num_layers) == (32, 1)
    assert (rebuilt.spec.hidden, rebuilt.spec.layers, rebuilt.spec.vocab) == (64, 2, 256)
