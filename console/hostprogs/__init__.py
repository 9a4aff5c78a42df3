"""The programs distconsole sends to hosts, and the one way they are shipped.

Everything here but :mod:`console.hostprogs.ship` and :mod:`console.hostprogs.wire`
runs ON a host, where nothing of distconsole is installed: standard library only (plus
optional psutil/pynvml for the sampler), no imports from ``console`` at run time. The
console imports these modules too, for their constants (wire versions, the GPU sample
schema, frame layouts), so both ends read one definition.
"""
