"""Network presets (``--net auto|tcp|ib|roce``): the NCCL / Gloo / Open MPI / Horovod
variables that pin multi-node traffic to the right fabric, from one choice and the job's
interface.

- ``tcp``: everything over the interface: ``NCCL_SOCKET_IFNAME``, ``GLOO_SOCKET_IFNAME``,
  ``NCCL_IB_DISABLE=1`` (NCCL would otherwise take any InfiniBand/RoCE device it finds),
  Open MPI's ``btl_tcp_if_include`` / ``oob_tcp_if_include`` (as ``OMPI_MCA_*``
  variables, which mpirun and its daemons read) and ``HOROVOD_GLOO_IFACE``.
- ``ib``: NCCL over InfiniBand verbs on ``NCCL_IB_HCA`` (the HCAs asked for), with its
  bootstrap (and Gloo's) on the interface.
- ``roce``: as ``ib`` plus ``NCCL_IB_GID_INDEX=3``: on RoCE the GID index picks the
  protocol; with the usual Mellanox/NVIDIA GID table (0/1: RoCE v1/v2 on the link-local
  IPv6, 2/3: RoCE v1/v2 on the IPv4 address), 3 is RoCE v2 over the interface's IPv4
  address, which routes across subnets (``show_gids`` on a host lists its table).
- ``auto``: nothing forced; NCCL picks (it prefers IB when present). The interface, when
  given, is still checked by pre-flight.

The values are the planner's defaults layer (``placement.job_env``): the host's
inventory ``env`` and the user's ``--env`` win over a preset.
"""

from __future__ import annotations

from typing import Literal

from console.errors import JobSpecError

NetPreset = Literal["auto", "tcp", "ib", "roce"]
NET_PRESETS: tuple[NetPreset, ...] = ("auto", "tcp", "ib", "roce")
ROCE_V2_GID_INDEX = "3"  # see the module doc


def preset_env(net: NetPreset, interface: str | None, ib_hca: str | None) -> dict[str, str]:
    """The variables ``net`` sets for a host whose job interface is ``interface``."""
    if net == "auto":
        return {}
    env: dict[str, str] = {}
    if net == "tcp":
        if not interface:
            # Raised on the field to fill, in words of neither surface: the form shows
            # it under Interface, the CLI names --interface (job_options.naming_options).
            raise JobSpecError(
                "interface",
                "the tcp network preset needs an interface: give one, or set the hosts' "
                "interface in the inventory",
            )
        return {
            "NCCL_SOCKET_IFNAME": interface,
            "GLOO_SOCKET_IFNAME": interface,
            "NCCL_IB_DISABLE": "1",
            "OMPI_MCA_btl_tcp_if_include": interface,
            "OMPI_MCA_oob_tcp_if_include": interface,
            "HOROVOD_GLOO_IFACE": interface,
        }
    if interface:  # ib, roce: bootstrap and Gloo over the interface
        env["NCCL_SOCKET_IFNAME"] = interface
        env["GLOO_SOCKET_IFNAME"] = interface
    if ib_hca:
        env["NCCL_IB_HCA"] = ib_hca
    if net == "roce":
        env["NCCL_IB_GID_INDEX"] = ROCE_V2_GID_INDEX
    return env


def describe(net: NetPreset, interface: str | None, ib_hca: str | None) -> str:
    """One info line (a plan note, not a warning) for ``plan``, ``launch`` and the form's
    preview: ``net: tcp on eth0 sets NCCL_SOCKET_IFNAME=eth0 ...``."""
    env = preset_env(net, interface, ib_hca)
    where = f"net: {net} on {interface}" if interface else f"net: {net}"
    if not env:
        return f"{where}: nothing forced (NCCL picks)"
    what = " ".join(f"{k}={v}" for k, v in env.items())
    return f"{where} sets {what} (the inventory's env and --env win over these)"
