"""Widgets of the dashboard, one module per screen area."""
