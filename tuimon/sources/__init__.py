"""Samplers the monitor reads: the channel, NVML, psutil. No textual imports here."""
