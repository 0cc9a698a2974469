"""Shared fixtures for the end-to-end tests: the real binary, the real model, `splash serve`.

Environment: SPLASH_BIN (default <repo>/build/splash), SPLASH_TEST_MODEL (the GGUF).

`splash_server(*args)` starts `splash serve --model $SPLASH_TEST_MODEL --port <free> *args`,
waits for the stdout line `Ready http://127.0.0.1:PORT` and returns the base URL (a str that
also carries the process: `.port`, `.proc`, `.stdout_lines`, `.stderr_lines`, `.stop()`).
On teardown every server still running gets SIGTERM and must exit with code 0 within 10 s.
`splash_server` is per test; `splash_server_module` is the same factory shared by a module.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("SPLASH_BIN", str(REPO / "build" / "splash"))
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 10


def splash_bin() -> str:
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"splash binary not found at {BIN} (set SPLASH_BIN)")
    return BIN


def env_model_path() -> str | None:
    """SPLASH_TEST_MODEL, or None when unset; fails when it names a missing file."""
    path = os.environ.get("SPLASH_TEST_MODEL")
    if path and not os.path.isfile(path):
        pytest.fail(f"SPLASH_TEST_MODEL names a missing file: {path}")
    return path or None


@pytest.fixture(scope="session", name="splash_binary")
def splash_binary_fixture() -> str:
    """The engine binary (SPLASH_BIN, default <repo>/build/splash)."""
    return splash_bin()


@pytest.fixture(scope="session")
def model_path() -> str:
    path = env_model_path()
    if path is None:
        pytest.skip("SPLASH_TEST_MODEL is not set")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SplashServer(str):
    """A running `splash serve`: the string is its base URL, e.g. http://127.0.0.1:41234."""

    proc: subprocess.Popen
    port: int
    host: str
    args: list[str]

    def __new__(cls, url: str, *, proc: subprocess.Popen, host: str, port: int, args: list[str]):
        self = super().__new__(cls, url)
        self.proc, self.host, self.port, self.args = proc, host, port, args
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self.ready = threading.Event()
        self.stopped = False
        self._readers: list[threading.Thread] = []
        return self

    @property
    def url(self) -> str:
        return str(self)

    def _pump(self, stream, lines: list[str], watch_ready: bool) -> None:
        ready = f"Ready http://{self.host}:{self.port}"
        for raw in iter(stream.readline, ""):
            line = raw.rstrip("\n")
            lines.append(line)
            if watch_ready and line == ready:
                self.ready.set()
        stream.close()

    def _start_readers(self) -> None:
        for stream, lines, watch in ((self.proc.stdout, self.stdout_lines, True),
                                     (self.proc.stderr, self.stderr_lines, False)):
            t = threading.Thread(target=self._pump, args=(stream, lines, watch), daemon=True)
            t.start()
            self._readers.append(t)

    def output(self) -> str:
        return ("stdout:\n" + "\n".join(self.stdout_lines) + "\nstderr:\n" + "\n".join(self.stderr_lines))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send_signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Exit code, or fails the test when the process is still running after `timeout`."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.stopped = True
            pytest.fail(f"splash serve did not exit within {timeout} s\n{self.output()}")
        self.stopped = True
        for t in self._readers:
            t.join(timeout=2)
        return rc

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        """Sends `sig` (if still running) and returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)


def start_server(*args: str, model: str | None, env: dict[str, str] | None = None,
                 host: str = "127.0.0.1", ready_timeout: float = READY_TIMEOUT_S) -> SplashServer:
    """Starts `splash serve` on a free port and waits until it prints its Ready line."""
    last_error = ""
    for _attempt in range(3):  # the free port can be taken between probing and binding
        port = free_port()
        cmd = [splash_bin(), "serve", "--host", host, "--port", str(port)]
        if model is not None:
            cmd += ["--model", model]
        cmd += list(args)
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, errors="replace", bufsize=1,
            env={**os.environ, **(env or {})},
        )
        server = SplashServer(f"http://{host}:{port}", proc=proc, host=host, port=port, args=cmd)
        server._start_readers()
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if server.ready.wait(timeout=0.05):
                return server
            if proc.poll() is not None:
                break
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            pytest.fail(f"`{' '.join(cmd)}` printed no `Ready http://{host}:{port}` within {ready_timeout} s\n"
                        f"{server.output()}")
        for t in server._readers:
            t.join(timeout=2)
        last_error = server.output()
        if "in use" not in last_error.lower():
            break
    pytest.fail(f"`splash serve {' '.join(args)}` exited before it was ready (code {proc.returncode})\n{last_error}")


class _ServerFactory:
    def __init__(self, model: str):
        self.model = model
        self.servers: list[SplashServer] = []

    def __call__(self, *args: str, env: dict[str, str] | None = None, with_model: bool = True) -> SplashServer:
        server = start_server(*args, model=self.model if with_model else None, env=env)
        self.servers.append(server)
        return server

    def teardown(self) -> None:
        failures = []
        for server in self.servers:
            if server.stopped:
                continue
            running = server.alive()
            rc = server.stop(signal.SIGTERM, STOP_TIMEOUT_S)
            if not running:
                failures.append(f"{server} had already exited with code {rc} before teardown\n{server.output()}")
            elif rc != 0:
                failures.append(f"{server}: SIGTERM gave exit code {rc}, expected 0\n{server.output()}")
        if failures:
            pytest.fail("\n".join(failures))


@pytest.fixture
def splash_server(model_path):
    factory = _ServerFactory(model_path)
    yield factory
    factory.teardown()


@pytest.fixture(scope="module")
def splash_server_module(model_path):
    factory = _ServerFactory(model_path)
    yield factory
    factory.teardown()


def run_serve_expecting_failure(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """`splash serve *args` that must fail on its own; killed (and the test failed) if it is still
    running after `timeout` seconds, e.g. because it printed Ready."""
    cmd = [splash_bin(), "serve", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"`{' '.join(cmd)}` was still running after {timeout} s (expected an error)\n"
                    f"stdout: {e.stdout!r}\nstderr: {e.stderr!r}")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long prefills (agent replays); deselect with -m 'not slow'")


def render_chat_template(template: str, **variables) -> str:
    """A chat template rendered as transformers' apply_chat_template renders it (a sandboxed
    jinja2 environment with trim_blocks, lstrip_blocks and loopcontrols; tojson as json.dumps
    keeping non-ASCII), for tests that hold splash's prompt to the real template's."""
    import jinja2.sandbox

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    return env.from_string(template).render(**variables)
