#!/bin/bash
# alignment-handbook style: accelerate with a DeepSpeed config, then the SFT script
ACCELERATE_LOG_LEVEL=info accelerate launch \
    --config_file recipes/zero3.yaml \
    scripts/sft.py --config recipes/config_full.yaml
