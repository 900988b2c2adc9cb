"""The dashboard's screens: plan (main), compare, monitor, and the help and prompt dialogs."""
