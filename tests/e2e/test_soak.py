"""A soak: bounded busy and hostile traffic against one real server, then the checks that
nothing leaked and nothing was lost.

For DURATION_S seconds, 64 connections at most (loopback), in every protocol (Chat
Completions, Anthropic Messages, Responses):
  - clients that read whole streamed and non-streamed replies, each of which must end with its
    protocol's terminal event ([DONE], message_stop, response.completed / .incomplete) or a
    complete JSON body;
  - disconnect storms: streams dropped after their first event (half with RST, half with FIN),
    and non-streaming requests abandoned while they generate;
  - slow clients dribbling their headers, hostile framing (pipelined, conflicting or missing
    lengths, chunked bodies), malformed and unsatisfiable requests (each must get its 4xx);
  - bodies declared at the 8 MiB limit and sent slowly, holding the body budget;
  - /health polled throughout: it must always answer.
Afterwards /status must come back to zero running, zero queued and zero KV blocks in use, the
server's RSS must be within its memory plan, and a plain request must still be served.
"""
from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time

import pytest
import requests

DURATION_S = 40
SETTLE_S = 60
PROMPTS = ["Write a haiku about rivers.", "List three prime numbers.", "Say hello.", "What is a tuple?"]


@pytest.fixture(scope="module")
def server(splash_server_module):
    return splash_server_module()


def request_body(protocol: str, model: str, stream: bool, max_tokens: int, prompt: str) -> tuple[str, dict]:
    if protocol == "chat":
        return "/v1/chat/completions", {"model": model, "stream": stream, "max_tokens": max_tokens,
                                        "messages": [{"role": "user", "content": prompt}]}
    if protocol == "messages":
        return "/v1/messages", {"model": model, "stream": stream, "max_tokens": max_tokens,
                                "messages": [{"role": "user", "content": prompt}]}
    return "/v1/responses", {"model": model, "stream": stream, "max_output_tokens": max_tokens, "input": prompt,
                             "store": False}


def raw_request(path: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def stream_ended_properly(protocol: str, text: str) -> bool:
    if protocol == "chat":
        return text.rstrip().endswith("data: [DONE]")
    if protocol == "messages":
        return "event: message_stop" in text
    return "event: response.completed" in text or "event: response.incomplete" in text


class Soak:
    def __init__(self, server, model: str):
        self.server, self.model = server, model
        self.deadline = time.monotonic() + DURATION_S
        self.failures: list[str] = []
        self.counts: dict[str, int] = {}
        self.worst_health_s = 0.0
        self.lock = threading.Lock()

    def running(self) -> bool:
        return time.monotonic() < self.deadline

    def count(self, kind: str) -> None:
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def fail(self, message: str) -> None:
        with self.lock:
            self.failures.append(message)

    def connect(self, timeout: float = 30) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.server.port), timeout=timeout)

    # --- the clients ---------------------------------------------------------------------
    def completer(self, seed: int) -> None:
        rng = random.Random(seed)
        while self.running():
            protocol = rng.choice(["chat", "messages", "responses"])
            stream = rng.random() < 0.6
            path, body = request_body(protocol, self.model, stream, rng.randint(4, 24), rng.choice(PROMPTS))
            try:
                resp = requests.post(f"{self.server}{path}", json=body, timeout=120, stream=stream)
                text = resp.text
            except requests.RequestException as e:
                self.fail(f"{protocol} stream={stream}: {e}")
                continue
            if resp.status_code != 200:
                self.fail(f"{protocol} stream={stream}: {resp.status_code} {text[:200]}")
            elif stream and not stream_ended_properly(protocol, text):
                self.fail(f"{protocol} stream ended without its terminal event: ...{text[-300:]!r}")
            elif not stream:
                try:
                    json.loads(text)
                except ValueError:
                    self.fail(f"{protocol}: a non-streamed reply that is not JSON: {text[:200]!r}")
            self.count(f"complete {protocol}")

    def disconnector(self, seed: int) -> None:
        rng = random.Random(seed)
        while self.running():
            protocol = rng.choice(["chat", "messages", "responses"])
            stream = rng.random() < 0.7
            path, body = request_body(protocol, self.model, stream, 2000, rng.choice(PROMPTS))
            try:
                sock = self.connect()
                sock.sendall(raw_request(path, body))
                if stream:
                    sock.recv(1)  # its headers (or first event) are on the way: the work has begun
                else:
                    time.sleep(rng.uniform(0.1, 0.8))  # generating, nobody reading yet
                if rng.random() < 0.5:  # RST instead of FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
            except OSError as e:
                self.fail(f"disconnector {protocol}: {e}")
            self.count("disconnect")

    def dribbler(self, seed: int) -> None:
        rng = random.Random(seed)
        while self.running():
            try:
                with self.connect() as sock:
                    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                    for _ in range(rng.randint(3, 8)):
                        sock.sendall(b"X")
                        time.sleep(0.4)
            except OSError:
                pass  # the server may close a slow client: that is what it should do
            self.count("dribble")

    def hostile_framing(self, seed: int) -> None:
        rng = random.Random(seed)
        host = b"Host: 127.0.0.1\r\n"
        attacks = [
            b"GET /health HTTP/1.1\r\n" + host + b"\r\nGET /health HTTP/1.1\r\n" + host + b"\r\n",
            b"POST /v1/chat/completions HTTP/1.1\r\n" + host + b"Content-Length: 5\r\nContent-Length: 50\r\n\r\nhello",
            b"POST /v1/chat/completions HTTP/1.1\r\n" + host + b"\r\n{\"messages\": []}",
            b"POST /v1/chat/completions HTTP/1.1\r\n" + host + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            b"POST /v1/chat/completions HTTP/1.1\r\n" + host + b"Content-Length: -1\r\n\r\n",
            b"GARBAGE\r\n\r\n",
        ]
        while self.running():
            attack = rng.choice(attacks)
            # An answer or a close, never a connection left hanging (idle keep-alives close
            # after a second).
            try:
                with self.connect(timeout=15) as sock:
                    sock.sendall(attack)
                    while sock.recv(65536):
                        pass
            except socket.timeout:
                self.fail(f"neither an answer nor a close within 15 s after {attack[:60]!r}")
            except OSError:
                pass  # a reset after the refusal is an acceptable end
            self.count("framing")
            time.sleep(0.05)

    def malformed(self, seed: int) -> None:
        rng = random.Random(seed)
        bad = [
            ("/v1/chat/completions", b"{not json"),
            ("/v1/messages", b'{"model": "m", "messages": "nope", "max_tokens": 5}'),
            ("/v1/responses", b'{"model": "m", "input": 5}'),
            ("/v1/chat/completions", json.dumps({"model": self.model, "messages": [{"role": "user", "content": "x"}],
                                                 "response_format": {"type": "json_schema", "json_schema": {
                                                     "name": "n", "schema": False}}}).encode()),
            ("/v1/chat/completions", b"[" * 5000 + b"]" * 5000),
        ]
        while self.running():
            path, data = rng.choice(bad)
            try:
                resp = requests.post(f"{self.server}{path}", data=data, timeout=60,
                                     headers={"Content-Type": "application/json"})
                if not 400 <= resp.status_code < 500:
                    self.fail(f"{path} {data[:40]!r}: {resp.status_code}, expected a 4xx")
                else:
                    resp.json()  # in the protocol's error shape
            except (requests.RequestException, ValueError) as e:
                self.fail(f"{path} {data[:40]!r}: {e}")
            self.count("malformed")
            time.sleep(0.05)

    def body_holder(self, seed: int) -> None:
        rng = random.Random(seed)
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % (8 << 20))
        while self.running():
            try:
                with self.connect() as sock:
                    sock.sendall(head + b'{"messages": [' + b" " * 65536)
                    time.sleep(rng.uniform(0.5, 2.0))
            except OSError:
                pass
            self.count("body held")

    def health(self, seed: int) -> None:
        while self.running():
            start = time.monotonic()
            try:
                resp = requests.get(f"{self.server}/health", timeout=30)
                if resp.status_code != 200:
                    self.fail(f"/health: {resp.status_code}")
            except requests.RequestException as e:
                self.fail(f"/health: {e}")
            with self.lock:
                self.worst_health_s = max(self.worst_health_s, time.monotonic() - start)
            self.count("health")
            time.sleep(0.2)


CLIENTS = {"completer": 12, "disconnector": 16, "dribbler": 8, "hostile_framing": 6, "malformed": 8,
           "body_holder": 6, "health": 8}


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def status(server) -> dict:
    return requests.get(f"{server}/status", timeout=30).json()


@pytest.mark.slow
def test_soak(server):
    assert sum(CLIENTS.values()) == 64
    model = requests.get(f"{server}/v1/models", timeout=30).json()["data"][0]["id"]
    soak = Soak(server, model)
    threads = [threading.Thread(target=getattr(soak, kind), args=(i * 1000 + n,), daemon=True)
               for i, (kind, n) in enumerate(CLIENTS.items()) for n in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=DURATION_S + 180)
    assert not any(t.is_alive() for t in threads), "a client was still waiting for the server"
    print(f"\n  soak: {sorted(soak.counts.items())}, slowest /health {soak.worst_health_s:.2f} s")
    assert not soak.failures, f"{len(soak.failures)} failures, first ones:\n" + "\n".join(soak.failures[:10])
    assert soak.worst_health_s < 10, soak.worst_health_s

    # Everything it was given ends: nothing running, nothing queued, every block given back.
    def settled():
        s = status(server)
        return s["requests_running"] == 0 and s["requests_queued"] == 0 and s["kv_blocks"]["in_use"] == 0 \
            and s["request_bodies"]["in_use_bytes"] == 0
    deadline = time.monotonic() + SETTLE_S
    while not settled() and time.monotonic() < deadline:
        time.sleep(0.5)
    final = status(server)
    assert settled(), {k: final[k] for k in ("requests_running", "requests_queued", "kv_blocks", "request_bodies")}

    # Within the memory plan, and still serving.
    memory = final["memory"]
    plan = (memory["weights_bytes"] + memory["mapped_weights_bytes"] + memory["activations_bytes"] +
            memory["runtime_bytes"] + sum(c["budget_bytes"] for c in memory["caches"]) + memory["kv_cache_bytes"])
    rss = rss_bytes(server.proc.pid)
    print(f"  RSS {rss / 2**20:.0f} MiB of a {plan / 2**20:.0f} MiB plan")
    assert rss <= plan, (rss, plan)
    resp = requests.post(f"{server}/v1/chat/completions", timeout=60,
                         json={"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 200, resp.text
