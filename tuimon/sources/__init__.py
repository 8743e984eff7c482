"""Samplers the monitor reads: the channel, NVML, /proc. No textual imports here."""
