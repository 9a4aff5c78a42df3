"""The programs distconsole sends to hosts.

Everything here runs ON a host, where nothing of distconsole is installed: standard library
only (plus optional psutil/pynvml for the sampler), and no imports from ``console`` but
this package (an import contract in pyproject.toml). The console imports these modules
too, for their constants (wire versions, the GPU sample schema, frame layouts), so both
ends read one definition. How a program is shipped (the command line, the host's setup) is
the console's side: :mod:`console.transport.ship`; the check of a program's versioned hello
is :mod:`console.transport.hello`.

Folders: ``supervisor/`` (the job supervisor and its hang watch), ``sampler/`` (the GPU
and host sampler), ``jobctl/`` (the job helper). The single-file programs sit here: facts,
follow (logs), keys, pre-flight probe, sync, jobs scan, job pack (report bundles), and the
failure-line rule the supervisor and the console share.
"""
