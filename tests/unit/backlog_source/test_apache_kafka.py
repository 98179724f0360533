"""The test and demo broker's own helpers, without starting a broker: the ports its nodes
listen on, and what a node's log tells when it failed to start."""

from __future__ import annotations

import socket

from backlog_source.demo import apache_kafka
from backlog_source.demo.apache_kafka import KafkaNode, free_port


def test_free_ports_are_bindable_distinct_and_below_the_ephemeral_range_outgoing_connections_use():
    low = apache_kafka._ephemeral_ports_start()
    ports = [free_port() for _ in range(30)]
    assert len(set(ports)) == len(ports)
    if low > apache_kafka._LISTEN_PORTS_FROM:
        assert all(apache_kafka._LISTEN_PORTS_FROM <= port < low for port in ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_taken_or_handed_out_already_is_not_handed_out(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        # A range of one port below the "ephemeral" range, and it is taken: another port.
        monkeypatch.setattr(apache_kafka, "_LISTEN_PORTS_FROM", taken)
        monkeypatch.setattr(apache_kafka, "_ephemeral_ports_start", lambda: taken + 1)
        assert free_port() != taken
    free = free_port()  # the one port of the range is free now: it is the answer, once
    assert free == taken and free_port() != taken


def test_the_log_tail_leads_with_the_first_error_when_it_came_before_the_tail(tmp_path):
    node = KafkaNode(1, 1, 2, tmp_path, (), "")
    assert node.log_tail() == "(no log)"
    lines = ["[t] INFO starting", "[t] ERROR [SocketServer] Unable to bind 127.0.0.1:9092",
             "java.net.BindException: Address already in use", *(f"[t] INFO shutting down {i}" for i in range(20))]
    node.log_file.write_text("\n".join(lines))
    assert node.log_tail(3) == ("[t] ERROR [SocketServer] Unable to bind 127.0.0.1:9092 | java.net.BindException: "
                                "Address already in use | ... | [t] INFO shutting down 17 | [t] INFO shutting down 18 | "
                                "[t] INFO shutting down 19")
    node.log_file.write_text("\n".join(lines[:3]))
    assert node.log_tail(3) == " | ".join(lines[:3])  # the error is in the tail: once
