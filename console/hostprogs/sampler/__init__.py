"""The GPU/host sampler sent to every host (``program`` is its main loop): the sample
schema (``schema``, declared once, imported by the console's reader), NVML and nvidia-smi
(``gpus``), CPU/memory/network from /proc (``host``), and the demo's simulated GPUs
(``simulated``). ``console.probe.sampler`` joins them into one script. Standard library
(pynvml, psutil when present); imports only ``console.hostprogs``."""
