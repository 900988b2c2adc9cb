"""trainmem-tui: will this fine-tuning run fit? Memory planning and live device monitoring."""

__version__ = "0.1.0"
