"""Command-line entry points. The headless commands never import the Textual app."""
