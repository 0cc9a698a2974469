"""`--model owner/repo[:file]` and `splash pull owner/repo[:file]` against a mock Hugging Face
hub on loopback ($HF_ENDPOINT) that answers the hub's API shapes: GET
/api/models/{repo}/revision/{rev}?blobs=true (commit sha, siblings with size and lfs sha256)
and GET /{repo}/resolve/{commit}/{file} (here through a redirect, as the hub sends to its CDN).
Checked: the huggingface_hub cache layout (refs, blobs by sha256, snapshot links), reuse
without a download, HF_HUB_OFFLINE from the cache alone, HF_TOKEN for a gated repository (and
not sent after a redirect to another host), the Q4_K_M choice among several GGUFs, a named
file, a download that is not what the API described (nothing left in the cache), unknown
repositories and files, and references that are not references. Then a real model loads
through `--model owner/repo`.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("SPLASH_BIN", str(REPO / "build" / "splash"))
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_test_secret"


class MockHub:
    """Repositories: name -> {file: bytes}; gated ones need the bearer token; `lie` files
    are described with another sha256 than what is served."""

    def __init__(self, repos, gated=(), lie=()):
        self.repos, self.gated, self.lie = repos, set(gated), set(lie)
        self.requests: list[tuple[str, str | None]] = []  # (path, Authorization)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status, body=b"", headers=()):
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path = self.path
                hub.requests.append((path, self.headers.get("Authorization")))
                if path.startswith("/cdn/"):  # the redirect target: no token needed or wanted
                    repo, file = path[len("/cdn/"):].split("|", 1)
                    return self.reply(200, hub.repos[repo][file])
                if path.startswith("/api/models/"):
                    rest = path[len("/api/models/"):].split("?")[0]
                    repo, _, _rev = rest.partition("/revision/")
                    if repo not in hub.repos:
                        return self.reply(404, b'{"error":"Repository not found"}')
                    if repo in hub.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                        return self.reply(401, b'{"error":"Access to model is restricted"}')
                    siblings = []
                    for name, data in hub.repos[repo].items():
                        digest = hashlib.sha256(data + (b"x" if name in hub.lie else b"")).hexdigest()
                        siblings.append({"rfilename": name, "size": len(data),
                                         "lfs": {"sha256": digest, "size": len(data)}})
                    siblings.append({"rfilename": "README.md"})
                    return self.reply(200, json.dumps({"id": repo, "sha": COMMIT, "siblings": siblings}).encode())
                if "/resolve/" in path:
                    repo, _, rest = path[1:].partition("/resolve/")
                    commit, _, file = rest.partition("/")
                    if repo not in hub.repos or commit != COMMIT or file not in hub.repos[repo]:
                        return self.reply(404)
                    if repo in hub.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                        return self.reply(401)
                    # To "another host": 127.0.0.1 vs localhost, so curl drops the token.
                    return self.reply(302, headers=[("Location", f"http://127.0.0.1:{hub.port}/cdn/{repo}|{file}")])
                self.reply(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self):
        return f"http://localhost:{self.port}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def splash(*args, env):
    return subprocess.run([BIN, *args], capture_output=True, text=True, errors="replace", timeout=300,
                          stdin=subprocess.DEVNULL, env=env)


@pytest.fixture
def hub_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env["HF_HOME"] = str(tmp_path / "hf")
    env["SPLASH_HOME"] = str(tmp_path / "splash")
    return env


def pulled(result) -> Path:
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip())


def test_pull_lays_out_the_hub_cache_and_reuses_it(hub_env):
    data = os.urandom(300_000)
    hub = MockHub({"acme/coder-GGUF": {"coder-Q4_K_M.gguf": data}})
    try:
        env = dict(hub_env, HF_ENDPOINT=hub.endpoint)
        path = pulled(splash("pull", "acme/coder-GGUF", env=env))
        cache = Path(hub_env["HF_HOME"]) / "hub" / "models--acme--coder-GGUF"
        assert path == cache / "snapshots" / COMMIT / "coder-Q4_K_M.gguf"
        assert path.is_symlink() and not os.path.isabs(os.readlink(path))
        assert path.read_bytes() == data
        assert path.resolve() == (cache / "blobs" / hashlib.sha256(data).hexdigest()).resolve()
        assert (cache / "refs" / "main").read_text() == COMMIT
        downloads = sum("/resolve/" in p for p, _ in hub.requests)
        assert pulled(splash("pull", "acme/coder-GGUF", env=env)) == path  # cached: no second download
        assert sum("/resolve/" in p for p, _ in hub.requests) == downloads == 1
    finally:
        hub.stop()
    # Offline, with nothing listening: from the cache alone.
    offline = dict(hub_env, HF_ENDPOINT=hub.endpoint, HF_HUB_OFFLINE="1")
    assert pulled(splash("pull", "acme/coder-GGUF", env=offline)) == path
    assert pulled(splash("pull", "acme/coder-GGUF:coder-Q4_K_M.gguf", env=offline)) == path
    missing = splash("pull", "acme/other-GGUF", env=offline)
    assert missing.returncode != 0 and "HF_HUB_OFFLINE" in missing.stderr


def test_gated_repository_needs_the_token_and_the_cdn_never_sees_it(hub_env, tmp_path):
    hub = MockHub({"acme/gated": {"m.gguf": b"GGUF" + os.urandom(5000)}}, gated={"acme/gated"})
    try:
        env = dict(hub_env, HF_ENDPOINT=hub.endpoint)
        refused = splash("pull", "acme/gated", env=env)
        assert refused.returncode != 0 and "HF_TOKEN" in refused.stderr and "gated or private" in refused.stderr
        wrong = splash("pull", "acme/gated", env=dict(env, HF_TOKEN="nope"))
        assert wrong.returncode != 0 and "refused" in wrong.stderr
        # The token from $HF_HOME/token, as huggingface-cli login leaves it.
        (Path(hub_env["HF_HOME"])).mkdir(parents=True, exist_ok=True)
        (Path(hub_env["HF_HOME"]) / "token").write_text(TOKEN + "\n")
        path = pulled(splash("pull", "acme/gated", env=env))
        assert path.read_bytes() == hub.repos["acme/gated"]["m.gguf"]
        cdn = [auth for p, auth in hub.requests if p.startswith("/cdn/")]
        assert cdn == [None], "the redirect target got the token"
    finally:
        hub.stop()


def test_choice_among_files_and_bad_downloads(hub_env):
    files = {"m-Q8_0.gguf": os.urandom(1000), "m-Q4_K_M.gguf": os.urandom(1200), "mmproj-f16.gguf": os.urandom(900)}
    hub = MockHub({"acme/many": files, "acme/two": {"a-Q8_0.gguf": b"a" * 10, "b-F16.gguf": b"b" * 10},
                   "acme/liar": {"x.gguf": os.urandom(2000)}, "acme/none": {"weights.bin": b"0"}},
                  lie={"x.gguf"})
    try:
        env = dict(hub_env, HF_ENDPOINT=hub.endpoint)
        assert pulled(splash("pull", "acme/many", env=env)).name == "m-Q4_K_M.gguf"
        assert pulled(splash("pull", "acme/many:m-Q8_0.gguf", env=env)).read_bytes() == files["m-Q8_0.gguf"]
        ambiguous = splash("pull", "acme/two", env=env)
        assert ambiguous.returncode != 0
        assert "a-Q8_0.gguf, b-F16.gguf" in ambiguous.stderr and "acme/two:FILE" in ambiguous.stderr
        liar = splash("pull", "acme/liar", env=env)
        assert liar.returncode != 0 and "not the file the hub describes" in liar.stderr
        liar_cache = Path(hub_env["HF_HOME"]) / "hub" / "models--acme--liar"
        assert not (liar_cache / "snapshots").exists()
        assert [p.name for p in (liar_cache / "blobs").iterdir()] == []
        none = splash("pull", "acme/none", env=env)
        assert none.returncode != 0 and "no GGUF file" in none.stderr
        unknown = splash("pull", "acme/nothing-here", env=env)
        assert unknown.returncode != 0 and "no such model repository" in unknown.stderr
        no_file = splash("pull", "acme/many:absent.gguf", env=env)
        assert no_file.returncode != 0 and "has no file absent.gguf" in no_file.stderr
        for bad in ("acme/../etc", "a/b/c", "acme/many:../x.gguf", "acme/many:", "/abs", "acme/ba d"):
            result = splash("pull", bad, env=env)
            assert result.returncode != 0 and "no model named" in result.stderr, (bad, result.stderr)
        assert not any("/etc" in p for p, _ in hub.requests)
    finally:
        hub.stop()


def test_a_hub_model_loads_and_runs(hub_env, model_path):
    hub = MockHub({"acme/smol-GGUF": {"smol-Q4_1.gguf": Path(model_path).read_bytes()}})
    try:
        env = dict(hub_env, HF_ENDPOINT=hub.endpoint)
        result = splash("run", "-q", "-m", "acme/smol-GGUF", "-n", "4", "--temperature", "0", "Say hi", env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip()
    finally:
        hub.stop()
