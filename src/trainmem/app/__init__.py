"""The dashboard (Textual). ``make_app`` builds it; ``trainmem.cli.dashboard_cmd`` runs it."""

from trainmem.app.app import TrainmemApp, make_app

__all__ = ["TrainmemApp", "make_app"]
