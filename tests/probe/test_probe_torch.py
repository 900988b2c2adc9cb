"""The probe in real training on CPU: a plain PyTorch loop and the Hugging Face Trainer on a
tiny randomly initialised Llama (no download), then the log read back and reported."""

from __future__ import annotations

import json
import warnings
from importlib import metadata
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer needs it

from trainmem.core.run_log import FORMAT_VERSION, TRAINER_PHASES  # noqa: E402
from trainmem.planner.run_report import rank_report  # noqa: E402
from trainmem.probe import RunProbe  # noqa: E402
from trainmem.sources.run_logs import read_run_log, rebuild_plan  # noqa: E402

pytestmark = pytest.mark.torch
SEQ, BATCH, VOCAB = 16, 2, 512


def tiny_llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=VOCAB,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return {"input_ids": ids, "labels": ids}


def test_plain_loop_logs_every_step_with_its_phases(tmp_path: Path):
    model = tiny_llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    probe = RunProbe(str(tmp_path / "run.jsonl"), model=model, optimizer=opt, seq_len=SEQ)
    for _ in range(3):
        with probe.step():
            model(**batch()).loss.backward()
            probe.phase("optimizer")
            opt.step()
            opt.zero_grad()
    probe.close()
    path = tmp_path / "run.rank0.jsonl"
    assert probe.path == str(path)
    run, *steps, end = records(path)
    assert run["format"] == FORMAT_VERSION and run["kind"] == "run"
    assert run["device"]["type"] == "cpu" and run["peaks"] == "sampled"
    assert run["plan"]["method"] == "full" and run["plan"]["stack"] == "loop"
    assert run["plan"]["optimizer"] == "adamw-foreach"  # torch's AdamW without fused=True
    assert run["plan"]["precision"] == "fp32" and run["plan"]["seq_len"] == SEQ
    assert run["model"]["config"]["hidden_size"] == 64
    assert run["versions"]["torch"] == metadata.version("torch")
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert end == {"kind": "end", "time": end["time"], "steps": 3}
    for s in steps:
        assert list(s["phases"]) == ["step", "forward", "backward", "optimizer"]
        assert s["batch"] == BATCH and s["seq_len"] == SEQ
        assert (
            s["driver_bytes"] > 0
            and s["max_driver_bytes"] >= s["phases"]["forward"]["driver_bytes"]
        )
        assert s["allocated_bytes"] is None  # no tensor count on CPU


def test_an_exception_in_the_step_is_recorded_and_passes_through(tmp_path: Path):
    model = tiny_llama()
    probe = RunProbe(str(tmp_path / "run.jsonl"), model=model)
    with pytest.raises(RuntimeError, match="boom"), probe.step():
        model(**batch())
        raise RuntimeError("boom")
    probe.close()
    _, step, _ = records(tmp_path / "run.rank0.jsonl")
    assert step["error"] == "RuntimeError: boom"


def test_a_log_that_cannot_be_written_warns_once_and_the_loop_goes_on(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    model = tiny_llama()
    probe = RunProbe(str(blocker / "run.jsonl"), model=model)  # a folder under a file
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with probe.step():
                model(**batch()).loss.backward()
        probe.close()
    assert len([w for w in caught if "trainmem probe" in str(w.message)]) == 1
    assert probe.steps == 3


def _trainer(tmp_path: Path, model: torch.nn.Module, steps: int = 3):
    from trainmem.probe import TrainmemCallback

    rows = [batch() for _ in range(steps)]
    rows = [{k: v[i] for k, v in r.items()} for r in rows for i in range(BATCH)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=BATCH,
        max_steps=steps,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
        dataloader_num_workers=0,
        optim="adamw_torch_fused",
    )
    return transformers.Trainer(
        model=model, args=args, train_dataset=rows, callbacks=[TrainmemCallback()]
    )


def test_trainer_callback_logs_each_optimizer_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TRAINMEM_RUN_LOG", raising=False)
    _trainer(tmp_path, tiny_llama()).train()
    path = tmp_path / "out" / "trainmem-run.rank0.jsonl"  # default: beside the checkpoints
    run, *steps, end = records(path)
    assert run["plan"]["stack"] == "trainer" and run["plan"]["method"] == "full"
    assert run["plan"]["optimizer"] == "adamw"  # fused
    assert run["run"]["per_device_train_batch_size"] == BATCH
    assert len(steps) == 3 and end["steps"] == 3
    for s in steps:
        assert tuple(s["phases"]) == ("step", *TRAINER_PHASES)
        assert (s["batch"], s["seq_len"]) == (BATCH, SEQ)
    # Read back: the plan rebuilt from the description, the estimate beside the steps.
    log = read_run_log(path)
    rebuilt = rebuild_plan(log)
    assert (rebuilt.plan.batch, rebuilt.plan.seq_len, rebuilt.plan.method) == (BATCH, SEQ, "full")
    assert rebuilt.spec.hidden == 64 and rebuilt.spec.layers == 2
    report = rank_report(log)
    assert report.estimate.runtime_kind == "system"
    assert report.device_peak is not None and report.device_peak.device_peak > 0


def test_trainer_callback_describes_a_lora_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    peft = pytest.importorskip("peft")
    monkeypatch.setenv("TRAINMEM_RUN_LOG", str(tmp_path / "logs" / "lora-{rank}.jsonl"))
    model = peft.get_peft_model(
        tiny_llama(),
        peft.LoraConfig(
            r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        ),
    )
    _trainer(tmp_path, model, steps=2).train()
    run, *steps, _ = records(tmp_path / "logs" / "lora-0.jsonl")
    plan = run["plan"]
    assert plan["method"] == "lora" and plan["lora_rank"] == 8 and plan["lora_alpha"] == 16.0
    assert plan["lora_targets"] == "q,v"
    assert run["run"]["trainable_params"] < run["run"]["params"]
    assert len(steps) == 2
    assert rebuild_plan(read_run_log(tmp_path / "logs" / "lora-0.jsonl")).plan.lora_targets == "q,v"
