"""Ports for stacks that are stopped and started again: outside the ephemeral range, never
handed out twice."""

from __future__ import annotations

import socket
from pathlib import Path

from bench.stack import HOST, LOWEST_PORT, free_ports


def test_ports_are_free_distinct_below_the_ephemeral_range_and_never_repeated() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    first, second = free_ports(6), free_ports(6)
    assert len(set(first) | set(second)) == 12
    assert all(LOWEST_PORT <= port < low for port in first + second)
    for port in first:
        with socket.socket() as sock:
            sock.bind((HOST, port))  # still free
