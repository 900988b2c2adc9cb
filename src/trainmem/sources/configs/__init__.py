"""Plans from the training configs people already have (``--from FILE``, ``--from-args``):
axolotl and LLaMA-Factory YAML, TRL SFTConfig / Hugging Face TrainingArguments (YAML, JSON
or a command line), DeepSpeed JSON and accelerate config YAML. See detect.read_configs."""

from trainmem.sources.configs.common import ConfigPlan
from trainmem.sources.configs.detect import read_configs

__all__ = ["ConfigPlan", "read_configs"]
