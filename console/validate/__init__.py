"""``distconsole validate``: measure every host, GPU and link before a long run, and judge
the figures against the fleet's median and the GPU vendors' published peaks.

``schedule`` (which pairs of hosts are measured, O(n) tests), ``verdicts`` (pure rules:
figures -> ok / warn / fail rows and slow links), ``expected`` (the per-GPU-model table
with its sources), ``store`` (the last result per host, for ``health``), ``runner`` (the
host program over SSH, the rounds, progress and clean-up). The program that runs on the
hosts is :mod:`console.hostprogs.validate_program`.
"""
