"""The monitor's side of capture windows: asking, waiting, finding and summarising results."""
