# `make run` opens the dashboard, `make test` runs every check; each sets itself up first and
# reinstalls only when pyproject.toml changed (scripts/install.sh).
.PHONY: run test screenshots accuracy measure measure-sharded

run:
	./scripts/run.sh $(ARGS)

test:
	./scripts/test.sh

screenshots:
	./scripts/install.sh && .venv/bin/python scripts/screenshots.py

# The accuracy table from the recorded measurements (no torch needed).
accuracy:
	./scripts/install.sh && .venv/bin/python bench/accuracy/compare.py \
		bench/results/measure-cpu.json bench/results/measure-cpu-moe.json \
		bench/results/trace-cpu.json bench/results/trace-cpu-moe.json \
		bench/results/trace-cpu-sweep.json bench/results/trace-cpu-qlora.json \
		bench/results/measure-cpu-stacks.json bench/results/measure-cpu-nodq.json \
		bench/results/measure-cpu-real-stacks.json bench/results/measure-cpu-sharded.json \
		bench/results/measure-cpu-sharded-mp.json bench/results/measure-cpu-mlx.json \
		bench/results/measure-cpu-sharded-fsdp1-mp.json \
		bench/results/measure-cpu-deepspeed.json \
		bench/results/measure-cpu-frameworks.json bench/results/bnb-moe-load.json \
		bench/results/measure-cpu-sharded-accelerate.json \
		$(wildcard bench/results/measure-cuda.json) \
		--out docs/accuracy.md

# Re-measure real training steps on CPU (installs torch's CPU wheel into .measure-venv).
measure:
	[ -x .measure-venv/bin/python ] || python3 -m venv .measure-venv
	.measure-venv/bin/pip install -q torch==2.13.0 && .measure-venv/bin/pip install -q -e ".[measure]"
	.measure-venv/bin/python bench/measure/harness.py --subset full --out bench/results/measure-cpu.json
	.measure-venv/bin/python bench/measure/harness.py --subset moe --out bench/results/measure-cpu-moe.json
	.measure-venv/bin/python bench/measure/harness.py --subset stacks --out bench/results/measure-cpu-stacks.json
	.measure-venv/bin/python bench/measure/harness.py --subset quant --out bench/results/measure-cpu-nodq.json
	.measure-venv/bin/python bench/measure/real_stacks.py --threads 1 --out bench/results/measure-cpu-real-stacks.json
	.measure-venv/bin/python bench/measure/trace_events.py --threads 2 --out bench/results/trace-cpu.json
	.measure-venv/bin/python bench/measure/trace_events.py --threads 2 --subset moe
	.measure-venv/bin/python bench/measure/trace_events.py --threads 2 --subset sweep

# Re-measure sharded (FSDP2) steps per rank on CPU: fake process group + FakeTensorMode,
# validated against real 2- and 4-process gloo runs first (~40 min on 2 shared cores), then
# full fine-tuning under FSDP2 mixed precision (--mp, ~25 min) and FSDP1 MixedPrecision
# (--fsdp1-mp, ~10 min); then DeepSpeed ZeRO 1-3 as real
# 2- and 4-process runs on its CPU accelerator (~1 min a run on 2 shared cores).
measure-sharded:
	.measure-venv/bin/python bench/measure/sharded.py --validate --out bench/results/measure-cpu-sharded.json
	.measure-venv/bin/python bench/measure/sharded.py --mp --validate --out bench/results/measure-cpu-sharded-mp.json
	.measure-venv/bin/python bench/measure/sharded.py --fsdp1-mp --validate --out bench/results/measure-cpu-sharded-fsdp1-mp.json
	.measure-venv/bin/pip install -q deepspeed==0.19.8
	.measure-venv/bin/python bench/measure/deepspeed_zero.py --out bench/results/measure-cpu-deepspeed.json
