"""A raw Kafka protocol connection for tests that send what no client library would."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from scramp import ScramClient

from broker.codec import build, encode, reader


class Wire:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, **fields: Any) -> int:
        self.correlation += 1
        request_cls = load_request_schema(api_key, version)
        header_cls = HeaderV2 if request_cls.__flexible__ else HeaderV1
        header = header_cls(request_api_key=api_key, request_api_version=version,
                            correlation_id=self.correlation, client_id="wire-test")
        payload = encode(header, build(request_cls, **fields))
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        return self.correlation

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def response(self, api_key: int, version: int) -> Any:
        frame = self.read_frame()
        # ApiVersions answers with header v0 (correlation id only); others v1 when flexible.
        response_cls = load_response_schema(api_key, version)
        offset = 4 + (1 if response_cls.__flexible__ and api_key != 18 else 0)
        return reader(response_cls)(frame, offset)[0]

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        self.send(api_key, version, **fields)
        return self.response(api_key, version)

    def authenticate(self, username: str, password: str) -> Any:
        self.call(17, 1, mechanism="PLAIN")
        return self.call(36, 2, auth_bytes=f"\0{username}\0{password}".encode())

    def scram_authenticate(self, username: str, password: str,
                           mechanism: str = "SCRAM-SHA-256") -> tuple[Any, Any]:
        """A SCRAM sign-in (scramp's client): both SaslAuthenticate answers; the second is
        None when the first failed (the listener then closes the connection)."""
        client = ScramClient([mechanism], username, password)
        assert self.call(17, 1, mechanism=mechanism).error_code == 0
        first = self.call(36, 2, auth_bytes=client.get_client_first().encode())
        if first.error_code != 0:
            return first, None
        client.set_server_first(first.auth_bytes.decode())
        final = self.call(36, 2, auth_bytes=client.get_client_final().encode())
        if final.error_code == 0:
            client.set_server_final(final.auth_bytes.decode())  # the listener proved itself
        return first, final

    def closed(self) -> bool:
        """True when the listener has closed the connection (EOF before any byte)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, size: int) -> bytes:
        chunks, missing = [], size
        while missing:
            chunk = self.sock.recv(missing)
            if not chunk:
                raise ConnectionError("closed by the listener")
            chunks.append(chunk)
            missing -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()
