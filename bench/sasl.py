"""The cost of a Kafka connection's sign-in: SASL/PLAIN (an API token) beside SCRAM-SHA-256
and SCRAM-SHA-512 (a SCRAM password of the default iterations), on one listener.

On a private PostgreSQL (bench/pgserver.py), a production-mode portal and one listener
(`manage.py runkafka`), as bench/kafka.py starts them. Each connection, one after the other:
TCP connect, SaslHandshake v1, SaslAuthenticate (one round for PLAIN, two for SCRAM, the
client's PBKDF2 by scramp each time, as a client that caches nothing does), one Metadata
request (proof of the sign-in), close. Printed per mechanism: the median over runs of the
connections per second and of the milliseconds per connection, the listener's CPU (user +
system, /proc/<pid>/stat) per connection, and the client's PBKDF2 alone (the server keeps
StoredKey and ServerKey, so it runs none: its SCRAM cost is a round trip, a query and HMACs).
"""

from __future__ import annotations

import argparse
import hashlib
import socket
import statistics
import struct
import time

from scramp import ScramClient

from bench.kafka import Listener
from bench.pgserver import PrivatePostgres
from bench.produce import Portal, start_portal

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
USER, PASSWORD = "bench", "bench-scram-password"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connections", type=int, default=200, help="per mechanism and run")
    parser.add_argument("--runs", type=int, default=5)


# --- a minimal client: SaslHandshake v1, SaslAuthenticate v0, Metadata v1 (header v1) -------


class Connection:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation = 0

    def call(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation += 1
        client = b"bench-sasl"
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client)) + client
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)[4:]  # the correlation id dropped

    def _exactly(self, size: int) -> bytes:
        data, got = bytearray(size), 0
        view = memoryview(data)
        while got < size:
            count = self.sock.recv_into(view[got:])
            if not count:
                raise ConnectionError("the listener closed the connection")
            got += count
        return bytes(data)

    def authenticate(self, payload: bytes) -> bytes:
        """One SaslAuthenticate v0 round: the server's bytes; raises on an error code."""
        answer = self.call(36, 0, struct.pack(">i", len(payload)) + payload)
        code, message_size = struct.unpack_from(">hh", answer)
        if code:
            raise RuntimeError(f"SaslAuthenticate failed with {code}: "
                               f"{answer[4:4 + max(message_size, 0)].decode()}")
        at = 4 + max(message_size, 0)
        size = struct.unpack_from(">i", answer, at)[0]
        return answer[at + 4:at + 4 + size]

    def sign_in(self, mechanism: str, secret: str) -> None:
        name = mechanism.encode()
        handshake = self.call(17, 1, struct.pack(">h", len(name)) + name)
        if struct.unpack_from(">h", handshake)[0]:
            raise RuntimeError(f"SaslHandshake refused {mechanism}")
        if mechanism == "PLAIN":
            self.authenticate(f"\0{USER}\0{secret}".encode())
            return
        client = ScramClient([mechanism], USER, secret)
        client.set_server_first(self.authenticate(client.get_client_first().encode()).decode())
        client.set_server_final(self.authenticate(client.get_client_final().encode()).decode())

    def metadata(self) -> bytes:
        return self.call(3, 1, struct.pack(">i", -1))  # every topic: a signed-in request

    def close(self) -> None:
        self.sock.close()


def connect_once(port: int, mechanism: str, secret: str) -> None:
    connection = Connection(port)
    try:
        connection.sign_in(mechanism, secret)
        connection.metadata()
    finally:
        connection.close()


def one_run(listener: Listener, mechanism: str, secret: str,
            connections: int) -> tuple[float, float]:
    """(connections per second, listener CPU ms per connection) of `connections` in a row."""
    cpu, started = listener.cpu_seconds(), time.perf_counter()
    for _ in range(connections):
        connect_once(listener.port, mechanism, secret)
    elapsed = time.perf_counter() - started
    return connections / elapsed, (listener.cpu_seconds() - cpu) * 1000 / connections


def client_pbkdf2_ms(mechanism: str, iterations: int, times: int = 20) -> float:
    """The client's share of a SCRAM sign-in: one Hi() (PBKDF2) of the password, median."""
    digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    took = []
    for _ in range(times):
        started = time.perf_counter()
        hashlib.pbkdf2_hmac(digest, PASSWORD.encode(), b"0123456789abcdef", iterations)
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


def set_scram_passwords(portal: Portal, token: str) -> int:
    """Set the bench user's SCRAM passwords (the server's default iterations): how many."""
    from streamgate.client import Client

    client = Client(portal.url, token)
    rows = [client.call("user scram set", {"mechanism": m.lower(), "password": PASSWORD})
            for m in MECHANISMS[1:]]
    return rows[0][0]["iterations"]


def main(args: argparse.Namespace) -> int:
    rates: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    cpus: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    with PrivatePostgres(prefix="sgbench-sasl-") as server:
        portal = Portal(server.url("postgres"), "uvicorn")
        listener = None
        try:
            token = start_portal(portal)
            args.iterations = set_scram_passwords(portal, token)
            listener = Listener(portal.env)
            secrets = {"PLAIN": token, "SCRAM-SHA-256": PASSWORD, "SCRAM-SHA-512": PASSWORD}
            for mechanism in MECHANISMS:  # warm: imports, connection pools, caches
                one_run(listener, mechanism, secrets[mechanism], 10)
            for n in range(args.runs):
                for mechanism in MECHANISMS:  # interleaved, so a busy moment hits all alike
                    rate, cpu = one_run(listener, mechanism, secrets[mechanism],
                                        args.connections)
                    rates[mechanism].append(rate)
                    cpus[mechanism].append(cpu)
                print(f"run {n + 1}: " + "  ".join(
                    f"{m} {rates[m][-1]:,.0f}/s ({cpus[m][-1]:.2f} ms CPU)" for m in MECHANISMS),
                    flush=True)
        finally:
            if listener is not None:
                listener.stop()
            portal.stop()
    print()
    print(table(rates, cpus, args))
    return 0


def table(rates: dict[str, list[float]], cpus: dict[str, list[float]],
          args: argparse.Namespace) -> str:
    plain = statistics.median(rates["PLAIN"])
    lines = [f"{args.connections} connections in a row per mechanism and run, medians of "
             f"{args.runs} runs; SCRAM passwords of {args.iterations} iterations", "",
             "| mechanism | connections/s | ms per connection | listener CPU ms per connection "
             "| client PBKDF2 ms | vs PLAIN |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for mechanism in MECHANISMS:
        rate = statistics.median(rates[mechanism])
        client = ("-" if mechanism == "PLAIN"
                  else f"{client_pbkdf2_ms(mechanism, args.iterations):.2f}")
        lines.append(f"| {mechanism} | {rate:,.0f} | {1000 / rate:.2f} | "
                     f"{statistics.median(cpus[mechanism]):.2f} | {client} | "
                     f"{plain / rate:.2f}x time |")
    return "\n".join(lines)
