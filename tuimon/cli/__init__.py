"""Command-line entry points and wiring."""
