"""The GPU/host sampler sent to every host (``program`` is its main loop): the sample
schema (``schema``, declared once, imported by the console's reader), NVML and nvidia-smi
(``gpus``), health reading (``health``), CPU/memory/network from /proc (``host``), and the
demo's simulated GPUs (``simulated``). ``console.probe.sampler`` joins them into one
script. ``health_rules`` holds the health verdict's ``fail`` rules: the console's verdict
imports them, and the job supervisor ships them (with ``schema`` and ``health``) for its
drain. Standard library
(pynvml, psutil when present); imports only ``console.hostprogs``."""
