"""Bundled training workloads (they import torch; the monitor never imports these)."""
