"""Samplers the monitor reads: the channel, NVML, the processes (psutil), py-spy. No textual imports here."""
