#!/usr/bin/env python3
"""Minimal CQL native protocol v4 client: run one statement, report the outcome.

  cql.py --host 127.0.0.1 --port 19042 --user U --password P "SELECT ..."

Exit 0 on a RESULT (rows printed tab-separated), 1 on a server ERROR (its
message printed) or an unexpected reply, 2 when the connection fails.
"""
import argparse
import socket
import struct
import sys

ERROR, STARTUP, READY, AUTHENTICATE, QUERY, RESULT = 0x00, 0x01, 0x02, 0x03, 0x07, 0x08
AUTH_RESPONSE, AUTH_SUCCESS = 0x0F, 0x10


class Reader:
    """Cursor over a frame body, decoding the protocol's notation types."""

    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def short(self):
        return struct.unpack(">H", self.take(2))[0]

    def int(self):
        return struct.unpack(">i", self.take(4))[0]

    def string(self):
        return self.take(self.short()).decode("utf-8", "replace")

    def bytes(self):
        n = self.int()
        return None if n < 0 else self.take(n)

    def option(self):
        """Read a column type; return its id, skipping nested types."""
        kind = self.short()
        nested = {0x0020: 1, 0x0022: 1, 0x0021: 2}.get(kind, 0)  # list, set, map
        if kind == 0x0000:  # custom: class name
            self.string()
        elif kind == 0x0030:  # UDT: keyspace, name, then named fields
            self.string(), self.string()
            for _ in range(self.short()):
                self.string(), self.option()
        elif kind == 0x0031:  # tuple
            nested = self.short()
        for _ in range(nested):
            self.option()
        return kind


def string(s):
    b = s.encode("utf-8")
    return struct.pack(">H", len(b)) + b


class Connection:
    """Frames over one socket: 9-byte header (version, flags, stream, opcode, length)."""

    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.file = self.sock.makefile("rb")

    def send(self, opcode, body, stream=0):
        self.sock.sendall(struct.pack(">BBhBi", 0x04, 0, stream, opcode, len(body)) + body)

    def read(self, n):
        data = self.file.read(n)
        if len(data) < n:
            raise ConnectionError("connection closed by server")
        return data

    def recv(self):
        """Read one response frame; return (opcode, Reader over its body)."""
        _, flags, _, opcode, length = struct.unpack(">BBhBi", self.read(9))
        body = Reader(self.read(length))
        if flags & 0x08:  # warnings (tracing and custom payloads are never requested)
            for _ in range(body.short()):
                print("warning: " + body.string(), file=sys.stderr)
        return opcode, body


def render(kind, value):
    if value is None:
        return "null"
    if kind in (0x0001, 0x000A, 0x000D):  # ascii, text, varchar
        return value.decode("utf-8", "replace")
    if kind in (0x0002, 0x0009):  # bigint, int
        return str(int.from_bytes(value, "big", signed=True))
    if kind == 0x0004:  # boolean
        return "true" if value != b"\0" else "false"
    return "0x" + value.hex()


def print_rows(body):
    """Print a Rows result; other kinds (void, schema change...) print nothing."""
    if body.int() != 0x0002:
        return
    flags, count = body.int(), body.int()
    if flags & 0x0002:
        body.bytes()  # paging state
    kinds = [-1] * count
    if not flags & 0x0004:  # metadata present
        if flags & 0x0001:
            body.string(), body.string()  # global keyspace and table
        for i in range(count):
            if not flags & 0x0001:
                body.string(), body.string()
            body.string()
            kinds[i] = body.option()
    for _ in range(body.int()):
        print("\t".join(render(kinds[i], body.bytes()) for i in range(count)))


def expect(reply, wanted, step):
    """Return 0 if the reply's opcode is wanted, else report it and return 1."""
    opcode, body = reply
    if opcode == wanted:
        return 0
    if opcode == ERROR:
        code = body.int()
        print("error 0x%04x: %s" % (code, body.string()), file=sys.stderr)
    else:
        print("error: unexpected opcode 0x%02x after %s" % (opcode, step), file=sys.stderr)
    return 1


def run(args):
    conn = Connection(args.host, args.port, args.timeout)
    conn.send(STARTUP, struct.pack(">H", 1) + string("CQL_VERSION") + string("3.0.0"))
    reply = conn.recv()
    if reply[0] == AUTHENTICATE:  # SASL PLAIN token: \0user\0password
        token = b"\0" + args.user.encode() + b"\0" + args.password.encode()
        conn.send(AUTH_RESPONSE, struct.pack(">i", len(token)) + token)
        failed = expect(conn.recv(), AUTH_SUCCESS, "AUTH_RESPONSE")
    else:
        failed = expect(reply, READY, "STARTUP")
    if failed:
        return failed
    query = args.statement.encode("utf-8")
    consistency_one, no_flags = 0x0001, 0
    conn.send(QUERY, struct.pack(">i", len(query)) + query + struct.pack(">HB", consistency_one, no_flags), 1)
    reply = conn.recv()
    failed = expect(reply, RESULT, "QUERY")
    if not failed:
        print_rows(reply[1])
    return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9042)
    parser.add_argument("--user", default="cassandra")
    parser.add_argument("--password", default="cassandra")
    parser.add_argument("--timeout", type=float, default=10.0, help="socket timeout, seconds")
    parser.add_argument("statement")
    args = parser.parse_args()
    try:
        return run(args)
    except (OSError, struct.error) as exc:  # refused, reset, timed out, closed, truncated
        print("connection failed: %s" % exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
