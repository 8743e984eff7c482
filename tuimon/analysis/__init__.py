"""Pure functions over what the sources collected: step stats, breakdowns, verdicts."""
