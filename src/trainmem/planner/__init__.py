"""The typed reports the front ends share."""

# The share of a dataset's examples a suggested maximum length keeps whole (``--keep-share``);
# here so the flag's default does not load the dataset readers (planner.lengths).
KEEP_SHARE = 0.95
